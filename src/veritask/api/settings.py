"""How the API process is configured: the database, the data folder, the limits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Requests with a larger body are refused with 413 before anything reads them.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ApiSettings:
    """The API's configuration.

    ``home`` is VERITASK_HOME: attempt logs are served only from inside it.
    """

    database_url: str
    home: Path
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1024:
            raise ValueError("max_body_bytes: at least 1024")

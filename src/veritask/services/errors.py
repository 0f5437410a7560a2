"""What a service refuses, and why, as a closed set the API maps to problem documents.

The services translate the lower layers' errors (definition problems, scheduling refusals) into
these, so that ``api`` knows one vocabulary. A lower-layer error that is ``retryable`` (the
database is busy or unreachable) passes through untouched: the API answers 503 for those.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Self

from veritask.core import refusals
from veritask.core.errors import VeritaskError


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with the input: the field, its line in the source when known, why."""

    field: str
    line: int | None
    message: str


class ServiceError(VeritaskError):
    """The request could not be served."""


class NotFound(ServiceError):
    """There is no such object."""


class Conflict(ServiceError):
    """The request is illegal in the object's current state."""

    def __init__(
        self, message: str, *, current_state: str | None = None, run_ids: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.current_state = current_state
        self.run_ids = tuple(run_ids)
        """The runs the refusal is about (the active ones a ``forbid`` waits for), to link."""


class StaleAttempt(Conflict):
    """The attempt is no longer the current one, or it was fenced or cancelled."""


class InvalidInput(ServiceError):
    """The input was refused; ``problems`` names each field (and line) at fault."""

    def __init__(self, message: str, problems: Iterable[FieldProblem] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)

    @classmethod
    def about(cls, field: str, message: str) -> Self:
        """A refusal with one problem, about one field."""
        text = refusals.FIELD_PROBLEM.format(field=field, problem=message)
        return cls(text, [FieldProblem(field, None, message)])


class UnreadableInput(InvalidInput):
    """The body could not be read at all (not UTF-8 text, nested too deeply to parse)."""


class Unauthenticated(ServiceError):
    """No credentials, or credentials that name nobody."""


class Forbidden(ServiceError):
    """The credentials are valid but do not allow this."""


class SchedulerRefused(ServiceError):
    """Another scheduler holds the lease and this database allows only one."""

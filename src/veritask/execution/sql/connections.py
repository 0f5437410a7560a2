"""Connection names (a task's ``connection:``) mapped to server URLs, from the environment.

``VERITASK_SQL_URL_<NAME>=postgresql://user@host:5432/db`` names the server ``<name>``: the
name is lowercased and ``_`` stands for ``-`` (``VERITASK_SQL_URL_EU_WAREHOUSE`` serves
``eu-warehouse`` and ``eu_warehouse``). The URL holds a password: give it as a secret instead,
``VERITASK_SQL_URL_<NAME>=secret:<secret name>``, and the executor asks the secret providers
(``execution/secrets.py``) for the URL each time it connects; or use a ``.pgpass``.
"""

from __future__ import annotations

from collections.abc import Mapping

ENV_PREFIX = "VERITASK_SQL_URL_"


def from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """Every connection the environment names, by lowercased name."""
    found: dict[str, str] = {}
    for variable, url in environ.items():
        if variable.startswith(ENV_PREFIX) and url:
            name = variable.removeprefix(ENV_PREFIX).lower()
            found[name] = url
            found[name.replace("_", "-")] = url
    return found


def libpq_url(url: str) -> str:
    """A URL libpq accepts: SQLAlchemy's ``postgresql+psycopg://`` loses its driver part."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.partition("+")[0] not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    return f"postgresql://{rest}"

"""Readiness: the database answers and its schema is the one this version of Veritask needs."""

from __future__ import annotations

import functools

from veritask.core.errors import VeritaskError
from veritask.ledger import migrate
from veritask.services import views
from veritask.services.platform import Platform


@functools.cache
def expected_revision() -> str:
    """The newest migration shipped with this version (read once: it never changes)."""
    return migrate.head()


def readiness(platform: Platform) -> views.Readiness:
    """Whether this process can serve requests, and if not, why."""
    expected = expected_revision()
    backend = platform.database_backend
    try:
        revision = migrate.revision_of(platform.engine)
    except VeritaskError as exc:
        return views.Readiness(False, backend, None, expected, f"database unreachable: {exc}")
    if revision != expected:
        detail = (
            f"the database is at revision {revision or 'none'}, this version needs {expected}: "
            "run `veritask db upgrade`"
        )
        return views.Readiness(False, backend, revision, expected, detail)
    return views.Readiness(True, backend, revision, expected, "ready")

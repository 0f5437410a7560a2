"""Stored definition versions, parsed once per process: a version never changes.

Parsing a stored version re-validates it, which for a definition of thousands of tasks takes
a tenth of a second; triggers, schedules and the scheduler's loop all read the same few
versions over and over.
"""

from __future__ import annotations

import threading
from typing import Final

from veritask.core.jsontypes import JSONObject
from veritask.definitions.model import Definition
from veritask.definitions.parse import definition_from_json
from veritask.ledger import definitions as definition_store
from veritask.ledger.database import Connection

#: Versions kept; past it the cache starts again empty (the working set is the active ones).
_LIMIT: Final = 256

_parsed: dict[tuple[str, int], Definition] = {}
_lock = threading.Lock()


def read(connection: Connection, definition_id: str, version: int) -> Definition:
    """The stored version, read and parsed on first use."""
    found = _parsed.get((definition_id, version))
    if found is not None:
        return found
    return parsed(
        definition_id, version, definition_store.version_spec(connection, definition_id, version)
    )


def parsed(definition_id: str, version: int, spec: JSONObject) -> Definition:
    """The stored version whose ``spec`` the caller already read."""
    found = _parsed.get((definition_id, version))
    if found is None:
        found = definition_from_json(spec)
        remember(definition_id, version, found)
    return found


def remember(definition_id: str, version: int, definition: Definition) -> None:
    """Keep a version that this process parsed as it stored it: the stored spec reads back
    as the same definition (tests/definitions/test_codec.py), so a trigger right after
    ``apply`` does not parse it again."""
    with _lock:
        if len(_parsed) >= _LIMIT:
            _parsed.clear()
        _parsed[(definition_id, version)] = definition

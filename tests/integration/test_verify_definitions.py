"""``verify`` and ``doctor`` follow each definition's own events (docs/operations.md): its
versions, current version and lifecycle are where they leave them, and an event removed
behind Veritask's back is named, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import NamedTuple

import sqlalchemy as sa

from tests.integration.conftest import HELLO, Api
from veritask.ledger import dialects, schema
from veritask.services import doctor, operations

AGAIN = HELLO.replace("echo hello", "echo hello again")


class _Event(NamedTuple):
    event_id: str
    kind: str
    subject_id: str


def _definition_events(api: Api) -> list[_Event]:
    e = schema.events.c
    with dialects.read_transaction(api.platform.engine) as connection:
        rows = connection.execute(
            sa.select(e.event_id, e.kind, e.subject_id)
            .where(sa.text(schema.DEFINITION_EVENT_PREDICATE))
            .order_by(e.position)
        ).all()
    return [_Event(str(row.event_id), str(row.kind), str(row.subject_id)) for row in rows]


def _remove(api: Api, event_ids: list[str]) -> None:
    """Remove events as only the retention purge may: with its permit."""
    with (
        api.platform.engine.begin() as connection,
        dialects.purge_permitted(
            connection, permit_table=schema.purge_permit, setting=schema.PURGE_SETTING
        ),
    ):
        connection.execute(schema.events.delete().where(schema.events.c.event_id.in_(event_ids)))


def test_a_removed_definition_event_is_reported_by_verify_and_doctor(api: Api) -> None:
    api.apply(HELLO)
    api.apply(AGAIN)
    assert api.http.post("/api/v2/definitions/hello/disable").status_code == 200
    held = operations.verify(api.platform, repair=False, actor="operator:test")
    assert held.ok, (held.mismatches, held.violations)
    assert held.definitions == 1
    check = doctor.runs(api.platform)
    assert check.status is doctor.Status.OK
    assert check.figures["definitions"] == 1

    events = _definition_events(api)
    assert [kind for _, kind, _ in events] == [
        "definition_applied",
        "definition_applied",
        "definition_disabled",
    ]
    _, _, definition_id = events[0]
    subject = f"definition hello ({definition_id})"
    _remove(api, [events[1].event_id, events[2].event_id])

    broken = operations.verify(api.platform, repair=False, actor="operator:test")

    assert broken.mismatches == [
        f"{subject}: lifecycle is disabled, its events say active",
        f"{subject}: current_version is 2, its events say 1",
    ]
    assert broken.violations == [
        f"{subject}: version 2 has no definition_applied event that created it: an event is missing"
    ]
    check = doctor.runs(api.platform)
    assert check.status is doctor.Status.FAIL
    assert "version 2 has no definition_applied event" in check.detail
    repaired = operations.verify(api.platform, repair=True, actor="operator:test")
    assert repaired.violations == broken.violations, "a lost event is not rebuilt"


def test_a_lifecycle_step_removed_from_the_middle_is_a_missing_link(api: Api) -> None:
    api.apply(HELLO)
    for verb in ("disable", "enable", "disable"):
        assert api.http.post(f"/api/v2/definitions/hello/{verb}").status_code == 200
    events = _definition_events(api)
    assert [kind for _, kind, _ in events] == [
        "definition_applied",
        "definition_disabled",
        "definition_active",
        "definition_disabled",
    ]
    _remove(api, [events[2].event_id])

    broken = operations.verify(api.platform, repair=False, actor="operator:test")

    assert broken.mismatches == []  # the row is where the last step left it
    assert broken.violations == [
        f"definition hello ({events[0].subject_id}): lifecycle event {events[3].event_id} "
        "(definition_disabled) moves it from active, but the event before left it at "
        "disabled: an event is missing"
    ]

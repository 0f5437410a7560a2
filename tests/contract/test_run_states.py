"""A run's two states move the same way: compare-and-set on the row, and an event saying why."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.contract import builders
from veritask.core.states import PublicationState, RunExecutionState
from veritask.ledger import errors, run_store, schema

NOW = datetime(2024, 5, 1, 3, tzinfo=UTC)

#: Each setter, the state it moves from and to, and the columns and event kind that are its own.
AXES = [
    pytest.param(
        run_store.set_execution_state,
        RunExecutionState.RUNNING,
        RunExecutionState.CANCELLING,
        ("execution_state", "execution_reason"),
        "run_state_changed",
        id="execution",
    ),
    pytest.param(
        run_store.set_publication_state,
        PublicationState.NOT_REQUIRED,
        PublicationState.PUBLISHED,
        ("publication_state", "publication_reason"),
        "publication_changed",
        id="publication",
    ),
]


def _run(engine: Engine, run_id: str) -> dict[str, Any]:
    with engine.connect() as connection:
        row = connection.execute(sa.select(schema.runs).where(schema.runs.c.id == run_id)).one()
    return dict(row._mapping)


@pytest.mark.parametrize(("setter", "previous", "state", "columns", "kind"), AXES)
def test_a_state_moves_its_own_columns_and_records_why(
    engine: Engine,
    setter: Callable[..., int],
    previous: RunExecutionState | PublicationState,
    state: RunExecutionState | PublicationState,
    columns: tuple[str, str],
    kind: str,
) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="k")
    before = _run(engine, run_id)

    with engine.begin() as connection:
        version = setter(
            connection,
            run_id=run_id,
            expected_version=before["version"],
            state=state,
            reason="because",
            previous=previous,
            actor="operator:test",
            event_id="event-1",
            now=NOW,
            evidence={"why": "a test"},
        )
    after = _run(engine, run_id)
    with engine.connect() as connection:
        event = connection.execute(
            sa.select(schema.events).where(schema.events.c.event_id == "event-1")
        ).one()

    state_column, reason_column = columns
    assert version == after["version"] == before["version"] + 1
    assert (after[state_column], after[reason_column]) == (state.value, "because")
    others = {"execution_state", "execution_reason", "publication_state", "publication_reason"}
    for other in others - set(columns):
        assert after[other] == before[other], f"{other} moved with {state_column}"
    assert after["updated_observed_at"].replace(tzinfo=UTC) == NOW
    assert (event.kind, event.subject_type, event.subject_id, event.run_id) == (
        kind,
        "run",
        run_id,
        run_id,
    )
    assert (event.from_state, event.to_state) == (previous.value, state.value)
    assert (event.actor, event.reason, event.evidence) == (
        "operator:test",
        "because",
        {"why": "a test"},
    )


@pytest.mark.parametrize(("setter", "previous", "state", "columns", "kind"), AXES)
def test_a_stale_version_moves_nothing_and_records_nothing(
    engine: Engine,
    setter: Callable[..., int],
    previous: RunExecutionState | PublicationState,
    state: RunExecutionState | PublicationState,
    columns: tuple[str, str],
    kind: str,
) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="k")
    before = _run(engine, run_id)

    with pytest.raises(errors.LedgerConflict), engine.begin() as connection:
        setter(
            connection,
            run_id=run_id,
            expected_version=before["version"] - 1,
            state=state,
            reason="because",
            previous=previous,
            actor="operator:test",
            event_id="event-1",
            now=NOW,
            evidence={"why": "a test"},
        )

    assert _run(engine, run_id) == before
    with engine.connect() as connection:
        kinds = connection.execute(
            sa.select(schema.events.c.kind).where(schema.events.c.run_id == run_id)
        ).scalars()
        assert kind not in list(kinds)


@pytest.mark.parametrize(("setter", "previous", "state", "columns", "kind"), AXES)
def test_a_move_without_evidence_is_refused_and_records_nothing(
    engine: Engine,
    setter: Callable[..., int],
    previous: RunExecutionState | PublicationState,
    state: RunExecutionState | PublicationState,
    columns: tuple[str, str],
    kind: str,
) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="k")
    before = _run(engine, run_id)

    with pytest.raises(errors.EvidenceMissing, match="needs evidence"), engine.begin() as c:
        setter(
            c,
            run_id=run_id,
            expected_version=before["version"],
            state=state,
            reason="because",
            previous=previous,
            actor="operator:test",
            event_id="event-1",
            now=NOW,
            evidence={},
        )

    assert _run(engine, run_id) == before
    with engine.connect() as connection:
        kinds = connection.execute(
            sa.select(schema.events.c.kind).where(schema.events.c.run_id == run_id)
        ).scalars()
        assert kind not in list(kinds)

"""Which runs the retention purge takes: those of deleted definitions, and with
``live_definitions`` the finished runs of every definition but each one's newest."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.engine import Engine

from tests.contract import builders
from veritask.core.states import RunExecutionState
from veritask.ledger import retention

DAY = timedelta(days=1)
ACTIVE = [RunExecutionState.QUEUED.value, RunExecutionState.RUNNING.value]
CUTOFF = builders.T0 + 30 * DAY


def _run(
    engine: Engine,
    definition: tuple[str, int],
    key: str,
    day: int,
    *,
    state: RunExecutionState = RunExecutionState.SUCCESS,
    logical_time: datetime | None = None,
) -> str:
    with engine.begin() as connection:
        run_id = builders.a_run(
            connection,
            definition,
            key=key,
            created_at=builders.T0 + day * DAY,
            execution_state=state,
            logical_time=logical_time,
        )
        builders.an_event(connection, event_id=f"e-{key}", run_id=run_id)
    return run_id


def _purgeable(engine: Engine, *, live: bool) -> set[str]:
    with engine.connect() as connection:
        found = retention.purgeable_runs(
            connection, cutoff=CUTOFF, active_states=ACTIVE, live_definitions=live
        )
    return set(found)


def test_a_live_definitions_old_finished_runs_go_but_its_newest(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
    oldest = _run(engine, definition, "a", 0, logical_time=builders.T0)
    _run(engine, definition, "b", 1, state=RunExecutionState.RUNNING)
    older = _run(engine, definition, "c", 2, logical_time=builders.T0 + DAY)
    # A backfill made last: the newest by creation, not by logical time.
    backfilled = _run(engine, definition, "d", 3, logical_time=builders.T0 - DAY)
    # A newer scheduled run made earlier: the newest by logical time.
    newest_logical = _run(engine, definition, "e", 0, logical_time=builders.T0 + 2 * DAY)

    assert _purgeable(engine, live=False) == set()
    purgeable = _purgeable(engine, live=True)
    assert purgeable == {oldest, older}
    assert backfilled not in purgeable and newest_logical not in purgeable


def test_recent_runs_stay(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        run_id = builders.a_run(
            connection, definition, key="r", execution_state=RunExecutionState.SUCCESS
        )
        builders.an_event(connection, event_id="late", run_id=run_id, observed_at=CUTOFF)
    _run(engine, definition, "newer", 1)

    assert _purgeable(engine, live=True) == set()

"""The delete lifecycle over a real scheduler and local executor, on SQLite and PostgreSQL.

Disable starts nothing new while the active runs go on; delete cancels the active runs (the
engine confirms each stop) and soft-deletes; the purge of the attempts' folders and logs
waits for the retention window, or comes at once when asked, and only a process that serves
the executor that ran them finishes it; a deleted name may be applied again.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.scheduling.harness import Harness, attempt_dirs
from veritask.core.states import DefinitionLifecycle, InstanceState, RunExecutionState, TriggerKind
from veritask.execution import port
from veritask.ledger import queries
from veritask.ledger.ledger import Ledger, utc_now
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import triggers
from veritask.services import definitions, operations, runs
from veritask.services.errors import Conflict
from veritask.services.platform import Platform

QUICK = """\
name: quick
tasks:
  say: {run: "echo quick output"}
"""

#: Runs until the test creates its file: "still running" for as long as a test needs.
GATED = """\
name: gated
tasks:
  wait: {{run: "while [ ! -f {gate} ]; do sleep 0.02; done"}}
"""

WEEK = timedelta(days=7)


def _platform(harness: Harness, *, later: timedelta = timedelta()) -> Platform:
    """The harness's database as the services see it, its clock ``later`` ahead."""

    def clock() -> datetime:
        return utc_now() + later

    return Platform(Ledger(harness.engine, clock=clock), harness.home)


def _lifecycle(harness: Harness, name: str) -> DefinitionLifecycle:
    with harness.engine.connect() as connection:
        row = queries.get_definition(connection, name=name)
    assert row is not None
    return DefinitionLifecycle(row.lifecycle)


def _definition_kinds(harness: Harness, definition_id: str) -> list[str]:
    with harness.engine.connect() as connection:
        events = queries.history(
            connection, subject_type=SubjectType.DEFINITION, subject_id=definition_id
        )
    return [event.kind for event in events]


def _definition_id(harness: Harness, name: str) -> str:
    with harness.engine.connect() as connection:
        row = queries.get_definition(connection, name=name)
    assert row is not None
    return row.id


def _served(harness: Harness) -> Mapping[str, port.Executor]:
    return {"local": harness.executor}


def _settle(
    harness: Harness,
    platform: Platform,
    name: str,
    target: DefinitionLifecycle,
    *,
    executors: Mapping[str, port.Executor] | None = None,
) -> None:
    """Tick the scheduler and the housekeeping's deletion step until ``name`` is ``target``."""

    def reached() -> bool:
        definitions.advance_deletions(platform, executors=executors or _served(harness))
        return _lifecycle(harness, name) is target

    harness.until(reached, what=f"{name} to be {target}")


def _finished_quick_run(harness: Harness) -> str:
    harness.apply(QUICK)
    run_id = harness.trigger("quick")
    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    return run_id


def test_a_disabled_definition_starts_no_run_while_its_active_run_goes_on(
    harness: Harness, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    harness.apply(GATED.format(gate=gate))
    run_id = harness.trigger("gated")
    harness.until(harness.state_is(run_id, "wait", InstanceState.RUNNING), what="the task")
    platform = _platform(harness)

    shown = definitions.set_enabled(platform, "gated", enabled=False, actor="operator:test")

    assert shown.lifecycle is DefinitionLifecycle.DISABLED
    for kind in (TriggerKind.MANUAL, TriggerKind.API):
        with pytest.raises(triggers.Refused, match="gated is disabled; it cannot be triggered"):
            triggers.trigger(harness.ledger, name="gated", kind=kind, actor="operator:test")
    with pytest.raises(Conflict, match="is disabled") as refused:
        runs.trigger_run(platform, "gated", actor="operator:test", kind=TriggerKind.MANUAL)
    assert refused.value.current_state == "disabled"
    assert [run_id for run_id, _, _ in harness.runs()] == [run_id]
    gate.touch()
    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    definitions.set_enabled(platform, "gated", enabled=True, actor="operator:test")
    assert harness.trigger("gated", key="after enable") != run_id


def test_delete_cancels_the_active_run_with_the_engine_then_soft_deletes(
    harness: Harness, tmp_path: Path
) -> None:
    harness.apply(GATED.format(gate=tmp_path / "never"))
    run_id = harness.trigger("gated")
    harness.until(harness.state_is(run_id, "wait", InstanceState.RUNNING), what="the task")
    platform = _platform(harness)

    deletion = definitions.delete_definition(platform, "gated", actor="operator:test", purge=False)

    assert deletion.lifecycle is DefinitionLifecycle.DELETING
    assert deletion.cancelling_runs == (run_id,)
    assert deletion.purge is False
    _settle(harness, platform, "gated", DefinitionLifecycle.DELETED)
    assert harness.run(run_id)[0] is RunExecutionState.CANCELLED
    [(attempt_no, state, _, _)] = harness.attempts(harness.instances(run_id)["wait"].id)
    assert (attempt_no, state) == (1, "CANCELLED")  # the engine confirmed the stop
    # Soft: the history and the attempt's folder stay until the purge is due.
    assert definitions.advance_deletions(platform, executors=_served(harness)) == 0
    assert attempt_dirs(harness.executor.home)
    assert runs.get_run(platform, run_id).run.definition == "gated"


def test_the_purge_waits_for_the_retention_window_then_removes_the_attempts(
    harness: Harness,
) -> None:
    run_id = _finished_quick_run(harness)
    instance_id = harness.instances(run_id)["say"].id
    assert instance_id in attempt_dirs(harness.executor.home)
    platform = _platform(harness)
    deleted = definitions.delete_definition(platform, "quick", actor="operator:test", purge=False)
    assert deleted.lifecycle is DefinitionLifecycle.DELETED

    # Within the window nothing is removed, whoever passes.
    assert definitions.advance_deletions(platform, executors=_served(harness), retention=WEEK) == 0
    assert instance_id in attempt_dirs(harness.executor.home)
    a_week_later = _platform(harness, later=WEEK + timedelta(minutes=1))
    steps = definitions.advance_deletions(a_week_later, executors=_served(harness), retention=WEEK)

    assert steps == 3  # purging, the local executor's part, purged: in one pass
    assert _lifecycle(harness, "quick") is DefinitionLifecycle.PURGED
    assert attempt_dirs(harness.executor.home) == {}
    kinds = _definition_kinds(harness, _definition_id(harness, "quick"))
    assert kinds[-4:] == [
        "definition_deleted",
        "definition_purging",
        "definition_resources_cleaned",
        "definition_purged",
    ]
    # The event history is kept, and still holds.
    assert runs.get_run(platform, run_id).run.execution_state is RunExecutionState.SUCCESS
    assert operations.verify(platform, repair=False, actor="operator:test").ok


def test_purge_now_removes_the_attempts_as_soon_as_the_runs_stopped(harness: Harness) -> None:
    run_id = _finished_quick_run(harness)
    platform = _platform(harness)

    deletion = definitions.delete_definition(platform, "quick", actor="operator:test", purge=True)

    # The API serves no executor: it goes as far as purging, a scheduler does the rest.
    assert deletion.lifecycle is DefinitionLifecycle.PURGING
    assert deletion.purge is True
    _settle(harness, platform, "quick", DefinitionLifecycle.PURGED)
    assert harness.instances(run_id)["say"].id not in attempt_dirs(harness.executor.home)


def test_an_executor_this_process_does_not_serve_keeps_it_purging(harness: Harness) -> None:
    run_id = _finished_quick_run(harness)
    instance_id = harness.instances(run_id)["say"].id
    platform = _platform(harness)
    definitions.delete_definition(platform, "quick", actor="operator:test", purge=True)

    for _ in range(3):
        definitions.advance_deletions(platform, executors={})
    assert _lifecycle(harness, "quick") is DefinitionLifecycle.PURGING
    assert instance_id in attempt_dirs(harness.executor.home)

    assert definitions.advance_deletions(platform, executors=_served(harness)) == 2
    assert _lifecycle(harness, "quick") is DefinitionLifecycle.PURGED
    assert attempt_dirs(harness.executor.home) == {}


def test_a_deleted_name_applied_again_is_a_new_definition_beside_the_old_history(
    harness: Harness,
) -> None:
    old_run = _finished_quick_run(harness)
    platform = _platform(harness)
    old_id = _definition_id(harness, "quick")
    definitions.delete_definition(platform, "quick", actor="operator:test", purge=False)

    applied = definitions.apply_definition(
        platform, QUICK.replace("quick output", "again"), actor="operator:test"
    )

    assert (applied.version, applied.created) == (1, True)
    new_id = _definition_id(harness, "quick")
    assert new_id != old_id
    assert _lifecycle(harness, "quick") is DefinitionLifecycle.ACTIVE
    new_run = harness.trigger("quick")
    assert harness.finish(new_run)[0] is RunExecutionState.SUCCESS
    # The old runs keep their definition (by id), and read as before.
    old = runs.get_run(platform, old_run).run
    assert (old.definition, old.execution_state) == ("quick", RunExecutionState.SUCCESS)
    with harness.engine.connect() as connection:
        stored = queries.get_run(connection, old_run)
        assert stored is not None and stored.definition_id == old_id
        assert queries.get_definition_by_id(connection, old_id) is not None
    everything = {run.id for run in runs.list_runs(platform, limit=50).items}
    assert {old_run, new_run} <= everything
    assert [run.id for run in runs.list_runs(platform, definition="quick").items] == [new_run]
    assert operations.verify(platform, repair=False, actor="operator:test").ok
    # The old run is the old definition's: it is not rerun as the new one.
    from veritask.services import reruns

    with pytest.raises(Conflict, match="quick is deleted") as refused:
        reruns.rerun(platform, old_run, actor="operator:test")
    assert refused.value.current_state == "deleted"
    # Its latest version is its own, not the new definition's (which has a second one).
    definitions.apply_definition(platform, QUICK.replace("quick output", "v2"), actor="test")
    preview = reruns.rerun_preview(platform, old_run, version="latest")
    assert preview.definition_version == 1
    # Deleting the new one leaves the old one alone.
    definitions.delete_definition(platform, "quick", actor="operator:test", purge=False)
    with harness.engine.connect() as connection:
        lifecycles = {row.id: row.lifecycle for row in queries.list_definitions(connection)}
    assert lifecycles == {old_id: "deleted", new_id: "deleted"}


def test_a_name_is_held_while_its_runs_are_being_cancelled(
    harness: Harness, tmp_path: Path
) -> None:
    harness.apply(GATED.format(gate=tmp_path / "never"))
    run_id = harness.trigger("gated")
    harness.until(harness.state_is(run_id, "wait", InstanceState.RUNNING), what="the task")
    platform = _platform(harness)
    definitions.delete_definition(platform, "gated", actor="operator:test", purge=False)

    with pytest.raises(Conflict, match="gated is deleting") as refused:
        definitions.apply_definition(platform, GATED.format(gate="x"), actor="operator:test")

    assert refused.value.current_state == "deleting"


DAILY = """\
name: daily
schedule: {cron: "0 0 * * *", timezone: UTC}
tasks:
  load: {run: "true"}
"""


def test_a_backfill_waits_while_its_definition_is_disabled(harness: Harness) -> None:
    from veritask.scheduling import backfills

    harness.apply(DAILY)
    started = backfills.start_backfill(
        harness.ledger,
        backfills.Request(
            name="daily",
            start=datetime(2026, 1, 1, tzinfo=UTC),
            end=datetime(2026, 1, 3, tzinfo=UTC),
            actor="operator:test",
            parameters={},
        ),
    )
    [(first, _, _)] = harness.runs()
    assert harness.finish(first)[0] is RunExecutionState.SUCCESS
    platform = _platform(harness)
    definitions.set_enabled(platform, "daily", enabled=False, actor="operator:test")

    assert backfills.advance_backfills(harness.ledger) == 0
    assert [run_id for run_id, _, _ in harness.runs()] == [first]

    definitions.set_enabled(platform, "daily", enabled=True, actor="operator:test")
    assert backfills.advance_backfills(harness.ledger) == 1
    assert len(harness.runs()) == 2
    assert started.created

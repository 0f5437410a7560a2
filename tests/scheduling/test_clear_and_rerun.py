"""Clear and rerun through the real scheduler and the local executor (services/reruns.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.scheduling.harness import Harness
from veritask.core import new_events
from veritask.core.events import OverrideScope
from veritask.core.states import InstanceState as I
from veritask.core.states import PublicationState
from veritask.core.states import RunExecutionState as R
from veritask.ledger import dialects, queries
from veritask.scheduling import clearing
from veritask.services import reruns
from veritask.services.errors import Conflict, InvalidInput, NotFound
from veritask.services.platform import Platform

# ``flaky`` fails until the marker file exists: the operator "fixes" it by creating the file.
DAG = """\
name: dag
parameters: {table: users}
defaults: {retry: {max_retries: 0}, timeout: 30s}
tasks:
  extract: {run: "true"}
  flaky: {run: 'test -e "{marker}"', after: [extract]}
  load: {run: "true", after: [flaky]}
  side: {run: "true", after: [extract]}
"""


def _platform(harness: Harness) -> Platform:
    return Platform(harness.ledger, harness.home)


def _failed_run(harness: Harness, marker: str) -> str:
    harness.apply(DAG.replace("{marker}", marker))
    run_id = harness.trigger("dag")
    state, _ = harness.finish(run_id)
    assert state is R.FAILED
    assert harness.states(run_id) == {
        "extract": I.SUCCESS,
        "flaky": I.FAILED,
        "load": I.UPSTREAM_FAILED,
        "side": I.SUCCESS,
    }
    return run_id


def test_clear_failed_opens_a_new_attempt_in_the_same_run_and_the_run_finishes(
    harness: Harness,
) -> None:
    marker = harness.home / "fixed"
    run_id = _failed_run(harness, str(marker))
    flaky = harness.instances(run_id)["flaky"].id
    before = harness.attempts(flaky)
    marker.touch()
    cleared = reruns.clear(
        _platform(harness), run_id, failed=True, reason="disk fixed", actor="operator:alice"
    )
    assert [(c.task, c.previous_state, c.next_attempt) for c in cleared.instances] == [
        ("flaky", I.FAILED, 2),
        ("load", I.UPSTREAM_FAILED, 1),
    ]
    assert cleared.execution_state is R.RUNNING
    assert harness.run(run_id)[0] is R.RUNNING
    assert harness.states(run_id)["flaky"] is I.CREATED
    assert harness.finish(run_id)[0] is R.SUCCESS
    after = harness.attempts(flaky)
    # The first attempt is unchanged; the new one is attempt 2 of the same instance.
    assert after[0] == before[0]
    assert [(n, state) for n, state, _, _ in after] == [(1, "FAILED"), (2, "SUCCESS")]
    assert harness.states(run_id) == dict.fromkeys(("extract", "flaky", "load", "side"), I.SUCCESS)
    # The run went back to running through a recorded run-level event that says who and why.
    moves = [(a, b) for a, b, _ in harness.run_history(run_id)]
    assert moves[-3:] == [("RUNNING", "FAILED"), ("FAILED", "RUNNING"), ("RUNNING", "SUCCESS")]
    reopened = [r for a, b, r in harness.run_history(run_id) if (a, b) == ("FAILED", "RUNNING")]
    assert reopened == ["cleared by operator:alice (disk fixed): flaky, load to run again"]


def test_clear_a_task_with_and_without_downstream(harness: Harness) -> None:
    marker = harness.home / "fixed"
    marker.touch()
    harness.apply(DAG.replace("{marker}", str(marker)))
    run_id = harness.trigger("dag")
    assert harness.finish(run_id)[0] is R.SUCCESS
    platform = _platform(harness)
    alone = reruns.clear(
        platform, run_id, tasks=["extract"], downstream=False, reason="again", actor="operator:a"
    )
    assert [c.task for c in alone.instances] == ["extract"]
    assert harness.finish(run_id)[0] is R.SUCCESS
    assert len(harness.attempts(harness.instances(run_id)["flaky"].id)) == 1
    assert len(harness.attempts(harness.instances(run_id)["extract"].id)) == 2
    down = reruns.clear(platform, run_id, tasks=["flaky"], reason="again", actor="operator:a")
    assert [c.task for c in down.instances] == ["flaky", "load"]
    assert harness.finish(run_id)[0] is R.SUCCESS
    assert len(harness.attempts(harness.instances(run_id)["load"].id)) == 2
    assert len(harness.attempts(harness.instances(run_id)["side"].id)) == 1


def test_clear_refuses_bad_scopes(harness: Harness) -> None:
    run_id = _failed_run(harness, str(harness.home / "never"))
    platform = _platform(harness)
    with pytest.raises(NotFound, match="no task 'nope'"):
        reruns.clear(platform, run_id, tasks=["nope"], reason="x", actor="operator:a")
    with pytest.raises(NotFound):
        reruns.clear(platform, "no-such-run", failed=True, reason="x", actor="operator:a")
    with pytest.raises(InvalidInput, match="reason"):
        reruns.clear(platform, run_id, failed=True, reason=" ", actor="operator:a")
    with pytest.raises(InvalidInput, match="either"):
        reruns.clear(platform, run_id, failed=True, tasks=["flaky"], reason="x", actor="o:a")
    reruns.clear(platform, run_id, tasks=["flaky"], reason="x", actor="operator:a")
    harness.until(lambda: harness.states(run_id)["flaky"] in (I.SCHEDULED, I.QUEUED, I.RUNNING))
    with pytest.raises(Conflict, match="flaky"):
        reruns.clear(platform, run_id, tasks=["extract"], reason="x", actor="operator:a")


def test_rerun_is_a_new_run_with_merged_parameters_and_the_same_logical_time(
    harness: Harness,
) -> None:
    marker = harness.home / "fixed"
    marker.touch()
    harness.apply(DAG.replace("{marker}", str(marker)))
    old = harness.trigger("dag")
    assert harness.finish(old)[0] is R.SUCCESS
    platform = _platform(harness)
    new = reruns.rerun(
        platform, old, parameters={"table": "orders"}, reason="orders too", actor="operator:a"
    )
    assert new.created and new.rerun_of == old and new.run_id != old
    assert new.parameters["table"] == "orders"
    again = reruns.rerun(
        platform, old, parameters={"table": "orders"}, reason="orders too", actor="operator:a"
    )
    assert (again.run_id, again.created) == (new.run_id, False)
    assert harness.finish(new.run_id)[0] is R.SUCCESS
    # The old run is untouched: one attempt each.
    assert all(len(harness.attempts(i.id)) == 1 for i in harness.instances(old).values())
    harness.apply(DAG.replace("{marker}", str(marker)).replace('"true"}', '"true", timeout: 20s}'))
    latest = reruns.rerun(platform, old, version="latest", key="k1", actor="operator:a")
    assert harness.finish(latest.run_id)[0] is R.SUCCESS  # forbid: one run at a time
    same = reruns.rerun(platform, old, key="k2", actor="operator:a")
    assert (same.definition_version, latest.definition_version) == (1, 2)


def test_clear_scope_lists_what_the_clear_then_clears_and_records_nothing(
    harness: Harness,
) -> None:
    run_id = _failed_run(harness, str(harness.home / "never"))
    platform = _platform(harness)
    events_before = len(harness.run_history(run_id))
    preview = reruns.clear_scope(platform, run_id, failed=True)
    assert [(c.task, c.previous_state, c.next_attempt) for c in preview.instances] == [
        ("flaky", I.FAILED, 2),
        ("load", I.UPSTREAM_FAILED, 1),
    ]
    assert (preview.scope, preview.downstream) == ("failed", True)
    # A preview is no clear: nothing moved, nothing recorded.
    assert harness.run(run_id)[0] is R.FAILED
    assert harness.states(run_id)["flaky"] is I.FAILED
    assert len(harness.run_history(run_id)) == events_before
    alone = reruns.clear_scope(platform, run_id, tasks=["extract"], downstream=False)
    assert [c.task for c in alone.instances] == ["extract"]
    with pytest.raises(NotFound, match="no task 'nope'"):
        reruns.clear_scope(platform, run_id, tasks=["nope"])
    # Confirming a scope that is no longer the one shown is refused, naming the scope now.
    with pytest.raises(Conflict, match="changed since the preview; now: flaky, load"):
        reruns.clear(
            platform,
            run_id,
            failed=True,
            reason="x",
            actor="operator:a",
            expected=[preview.instances[0].instance_id],
        )
    assert harness.states(run_id)["flaky"] is I.FAILED
    cleared = reruns.clear(
        platform,
        run_id,
        failed=True,
        reason="x",
        actor="operator:a",
        expected=[c.instance_id for c in preview.instances],
    )
    assert cleared.instances == preview.instances


def test_rerun_preview_shows_the_version_and_the_parameters_the_new_run_records(
    harness: Harness,
) -> None:
    marker = harness.home / "fixed"
    marker.touch()
    harness.apply(DAG.replace("{marker}", str(marker)))
    old = harness.trigger("dag")
    assert harness.finish(old)[0] is R.SUCCESS
    platform = _platform(harness)
    preview = reruns.rerun_preview(platform, old, parameters={"table": "orders"})
    assert (preview.definition, preview.version, preview.definition_version) == ("dag", "same", 1)
    assert preview.parameters == {"table": "orders"}
    with pytest.raises(InvalidInput, match="nope"):
        reruns.rerun_preview(platform, old, parameters={"nope": 1})
    harness.apply(DAG.replace("{marker}", str(marker)).replace('"true"}', '"true", timeout: 20s}'))
    assert reruns.rerun_preview(platform, old, version="latest").definition_version == 2
    with pytest.raises(Conflict, match="version 2 now, the preview showed version 1"):
        reruns.rerun(platform, old, version="latest", actor="operator:a", expected_version=1)
    new = reruns.rerun(
        platform, old, parameters={"table": "orders"}, actor="operator:a", expected_version=1
    )
    assert (new.definition_version, new.parameters) == (1, preview.parameters)


def _another_operator_overrides(harness: Harness, instance_id: str) -> None:
    """Another operator's override lands on ``instance_id`` between judging and applying."""
    loaded = harness.ledger.snapshot(instance_id)
    assert loaded is not None
    harness.ledger.apply(
        new_events.override(
            event_id=str(uuid.uuid4()),
            instance_id=instance_id,
            attempt_no=loaded[0].epoch,
            event_time=harness.ledger.clock(),
            operator="operator:other",
            to_state=I.FAILED,
            reason="moved meanwhile",
            scope=OverrideScope.INSTANCE,
            origin_instance=instance_id,
        )
    )


def _cleared_by(harness: Harness, instance_id: str, actor: str) -> list[str]:
    return [
        r.kind for r in harness.history(instance_id) if r.kind == "cleared" and r.actor == actor
    ]


def test_a_clear_that_races_another_writer_clears_none_of_its_scope(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _failed_run(harness, str(harness.home / "never"))
    ids = {task: row.id for task, row in harness.instances(run_id).items()}
    planned = clearing._planned

    def plan_then_move_load(*args: Any) -> Any:
        # Between judging the scope and recording it, another operator moves ``load``.
        events = planned(*args)
        _another_operator_overrides(harness, ids["load"])
        return events

    monkeypatch.setattr(clearing, "_planned", plan_then_move_load)
    with pytest.raises(Conflict, match="kept changing"):
        reruns.clear(_platform(harness), run_id, failed=True, reason="x", actor="operator:alice")
    # All or nothing: ``flaky``, judged and unmoved, was not cleared either, nor the run.
    assert harness.states(run_id)["flaky"] is I.FAILED
    assert _cleared_by(harness, ids["flaky"], "operator:alice") == []
    assert _cleared_by(harness, ids["load"], "operator:alice") == []
    assert harness.run(run_id)[0] is R.FAILED


def test_a_clear_judged_again_after_a_race_clears_every_instance_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _failed_run(harness, str(harness.home / "never"))
    ids = {task: row.id for task, row in harness.instances(run_id).items()}
    planned = clearing._planned
    rounds: list[int] = []

    def move_load_once(*args: Any) -> Any:
        events = planned(*args)
        rounds.append(len(rounds))
        if len(rounds) == 1:
            _another_operator_overrides(harness, ids["load"])
        return events

    monkeypatch.setattr(clearing, "_planned", move_load_once)
    cleared = reruns.clear(
        _platform(harness), run_id, failed=True, reason="x", actor="operator:alice"
    )
    assert len(rounds) == 2
    assert [(c.task, c.next_attempt) for c in cleared.instances] == [("flaky", 2), ("load", 1)]
    for task in ("flaky", "load"):
        assert _cleared_by(harness, ids[task], "operator:alice") == ["cleared"]
        assert harness.states(run_id)[task] is I.CREATED
    assert harness.run(run_id)[0] is R.RUNNING


PUBLISHED = """\
name: published
defaults: {retry: {max_retries: 0}, timeout: 30s}
tasks:
  load: {run: "true"}
publish:
  commit: {run: "true"}
"""


def _publication(harness: Harness, run_id: str) -> PublicationState:
    with dialects.read_transaction(harness.engine) as connection:
        run = queries.get_run(connection, run_id)
    assert run is not None
    return PublicationState(run.publication_state)


def test_a_clear_of_a_published_run_reopens_it_and_its_publication_in_one_step(
    harness: Harness,
) -> None:
    harness.apply(PUBLISHED)
    run_id = harness.trigger("published")
    harness.until(lambda: _publication(harness, run_id) is PublicationState.PUBLISHED)
    cleared = reruns.clear(
        _platform(harness), run_id, tasks=["load"], reason="again", actor="operator:alice"
    )
    # The task and the publication step are cleared with the run's move, in one transaction.
    assert {c.task for c in cleared.instances} == {"load", "publish.commit"}
    assert (cleared.execution_state, cleared.publication_state) == (
        R.RUNNING,
        PublicationState.PENDING,
    )
    assert _publication(harness, run_id) is PublicationState.PENDING
    harness.until(lambda: _publication(harness, run_id) is PublicationState.PUBLISHED)
    assert len(harness.attempts(harness.instances(run_id)["publish.commit"].id)) == 2

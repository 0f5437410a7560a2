"""Wait tasks through a real scheduler, on SQLite and PostgreSQL.

The scheduler checks the condition itself (``execution/waits.py``): the tests make it hold
(or not) and read what the ledger recorded — the instance's state, the checks' reports, the
pool's slots, the alerts. A wait checks every second at the least, so each test takes a few.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import Harness, wait_for
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.execution import wire
from veritask.ledger import dialects, pools, schema
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import triggers

I = InstanceState  # noqa: E741 - a short name for the states below

pytestmark = pytest.mark.slow


def waiting_for(path: Path, extra: str = "", *, then: str = "true") -> str:
    return f"""\
name: arrivals
concurrency: allow
tasks:
  arrive:
    wait:
      path: {path}/{{{{ params.day }}}}/_SUCCESS
      every: 1s
{extra}  load: {{run: "{then}", after: [arrive]}}
parameters:
  day: {{type: string, default: d1}}
"""


def reports(harness: Harness, instance_id: str, kind: str) -> list[dict[str, object]]:
    """The evidence of the instance's recorded events of ``kind``, in order."""
    e = schema.events.c
    with dialects.read_transaction(harness.engine) as connection:
        found = connection.execute(
            sa.select(e.evidence)
            .where(e.instance_id == instance_id, e.kind == kind)
            .order_by(e.position)
        ).scalars()
        return [dict(evidence) for evidence in found]


def test_a_path_wait_succeeds_when_the_file_appears_and_records_what_it_saw(
    harness: Harness, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    harness.apply(waiting_for(data))
    run_id = harness.trigger("arrivals")
    harness.until(harness.state_is(run_id, "arrive", I.RUNNING), what="the wait to start")
    arrive = harness.instances(run_id)["arrive"].id
    harness.until(lambda: reports(harness, arrive, "progress"), what="a check recorded")
    assert harness.instances(run_id)["load"].state is I.CREATED
    (data / "d1").mkdir(parents=True)
    (data / "d1" / "_SUCCESS").write_text("")
    state, _ = harness.finish(run_id)
    assert state is RunExecutionState.SUCCESS
    seen = [r["seen"] for r in reports(harness, arrive, "progress")]
    assert seen[0] == f"no such file or directory {data}/d1/_SUCCESS"
    assert seen[-1] == f"{data}/d1/_SUCCESS exists (file)"
    (completed,) = reports(harness, arrive, "completed")
    assert completed["output"] == {
        "seen": seen[-1],
        "checks": reports(harness, arrive, "progress")[-1]["check"],
    }
    assert harness.attempts(arrive)[0][3] == f"wait:{arrive}/1"
    harness.assert_snapshots_are_folds()


def test_a_wait_fails_at_its_timeout(harness: Harness, tmp_path: Path) -> None:
    harness.apply(waiting_for(tmp_path, "      timeout: 2s\n"))
    run_id = harness.trigger("arrivals")
    state, _ = harness.finish(run_id)
    assert state is RunExecutionState.FAILED
    instances = harness.instances(run_id)
    assert instances["arrive"].state is I.FAILED
    assert instances["load"].state is I.UPSTREAM_FAILED
    (completed,) = reports(harness, instances["arrive"].id, "completed")
    message = str(completed["error_message"])
    assert message.startswith("the condition did not hold within 0:00:02")
    assert "no such file or directory" in message


def test_a_wait_that_skips_on_timeout_is_skipped(harness: Harness, tmp_path: Path) -> None:
    harness.apply(waiting_for(tmp_path, "      timeout: 2s\n      on_timeout: skip\n"))
    run_id = harness.trigger("arrivals")
    harness.finish(run_id)
    instances = harness.instances(run_id)
    assert instances["arrive"].state is I.SKIPPED
    assert instances["load"].state is I.SKIPPED  # all_success: an upstream skipped


def test_a_cancelled_wait_stops_and_the_checker_confirms_it(
    harness: Harness, tmp_path: Path
) -> None:
    harness.apply(waiting_for(tmp_path))
    run_id = harness.trigger("arrivals")
    harness.until(harness.state_is(run_id, "arrive", I.RUNNING), what="the wait to start")
    triggers.request_run_cancel(harness.ledger, run_id, actor="operator:test", reason="stop")
    state, reason = harness.finish(run_id)
    assert state is RunExecutionState.CANCELLED, reason
    arrive = harness.instances(run_id)["arrive"].id
    assert harness.instances(run_id)["arrive"].state is I.CANCELLED
    [(_, attempt_state, _, external_id)] = harness.attempts(arrive)
    assert attempt_state == "CANCELLED" and external_id is not None
    checker = harness.scheduler.dispatcher.executors["wait"]
    observed = checker.describe(external_id=external_id)
    assert observed.ended and observed.details["held"] is False
    harness.assert_snapshots_are_folds()


def test_a_wait_holds_no_pool_slot(harness: Harness, tmp_path: Path) -> None:
    with harness.ledger.engine.begin() as connection:
        pools.set_pool(
            connection, name="default", slots=1, actor="operator:test", now=harness.ledger.clock()
        )
    release = tmp_path / "release"
    busy = f"""\
name: busy
tasks:
  hold: {{run: "while [ ! -e {release} ]; do sleep 0.1; done"}}
"""
    harness.apply(busy)
    harness.apply(waiting_for(tmp_path / "data"))
    busy_run = harness.trigger("busy")
    harness.until(harness.state_is(busy_run, "hold", I.RUNNING), what="the pool's one slot taken")
    run_id = harness.trigger("arrivals")
    harness.until(harness.state_is(run_id, "arrive", I.RUNNING), what="the wait to open anyway")
    with dialects.read_transaction(harness.engine) as connection:
        assert pools.usage(connection, ["default"]) == {"default": 1}
    assert harness.instances(busy_run)["hold"].state is I.RUNNING
    release.write_text("")
    (tmp_path / "data" / "d1").mkdir(parents=True)
    (tmp_path / "data" / "d1" / "_SUCCESS").write_text("")
    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    assert harness.finish(busy_run)[0] is RunExecutionState.SUCCESS


def test_a_restarted_scheduler_resumes_the_wait(make_harness: MakeHarness, tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = make_harness()
    first.apply(waiting_for(data))
    run_id = first.trigger("arrivals")
    first.until(harness_reports(first, run_id), what="the first scheduler's first check")
    first.scheduler.close()  # its checker stops: nobody checks the wait now
    arrive = first.instances(run_id)["arrive"].id
    seen_before = [r["seen"] for r in reports(first, arrive, "progress")]
    assert seen_before == [f"no such file or directory {data}/d1/_SUCCESS"]
    second = make_harness()
    (data / "d1").mkdir(parents=True)
    (data / "d1" / "_SUCCESS").write_text("")
    assert second.finish(run_id)[0] is RunExecutionState.SUCCESS
    assert second.instances(run_id)["arrive"].state is I.SUCCESS
    # The second scheduler's checks saw the file; the attempt is the same one, resumed: it
    # was neither declared lost nor retried.
    seen_after = [r["seen"] for r in reports(second, arrive, "progress")]
    assert seen_after[-1] == f"{data}/d1/_SUCCESS exists (file)"
    assert len(second.attempts(arrive)) == 1
    assert I.LOST.value not in second.instance_states_path(arrive)


def test_a_waits_progress_goes_to_its_scheduler_in_memory_and_to_the_outbox_at_close(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    first = make_harness()
    first.apply(waiting_for(tmp_path / "data"))
    run_id = first.trigger("arrivals")
    first.until(harness_reports(first, run_id), what="the first check recorded")
    arrive = first.instances(run_id)["arrive"].id
    outbox = first.scheduler.outbox
    # Not ticking from here: the file appears, and the check that sees it reports.
    (tmp_path / "data" / "d1").mkdir(parents=True)
    (tmp_path / "data" / "d1" / "_SUCCESS").write_text("")
    wait_for(lambda: list(outbox.glob("*.json")), timeout=10, what="the completion's file")
    time.sleep(0.1)
    # The check's progress report is in the scheduler's memory, not in the outbox.
    assert [wire.decode(p.read_bytes())["kind"] for p in outbox.glob("*.json")] == ["completed"]
    first.scheduler.close()
    # What was handed over and not recorded is left in the outbox, for the next scheduler.
    left = [wire.decode(p.read_bytes())["kind"] for p in outbox.glob("*.json")]
    assert sorted(left) == ["completed", "progress"]
    second = make_harness()
    assert second.finish(run_id)[0] is RunExecutionState.SUCCESS
    seen = [r["seen"] for r in reports(second, arrive, "progress")]
    assert seen[-1] == f"{tmp_path}/data/d1/_SUCCESS exists (file)"
    second.assert_snapshots_are_folds()


def harness_reports(harness: Harness, run_id: str) -> Callable[[], bool]:
    def recorded() -> bool:
        instance = harness.instances(run_id).get("arrive")
        return instance is not None and bool(reports(harness, instance.id, "progress"))

    return recorded


def test_a_wait_past_its_expected_duration_raises_a_dependency_alert(
    harness: Harness, tmp_path: Path
) -> None:
    harness.apply(waiting_for(tmp_path, "      expected: 1s\n      timeout: 4s\n"))
    run_id = harness.trigger("arrivals")

    def alerted() -> list[tuple[str, str, str | None]]:
        return [a for a in harness.alerts() if a[0] == AlertCategory.DEPENDENCY]

    found = harness.until(alerted, what="the dependency alert")
    harness.finish(run_id)
    arrive = harness.instances(run_id)["arrive"].id
    assert len(alerted()) == 1
    _, message, instance_id = found[0]
    assert instance_id == arrive
    assert message.startswith("the wait arrive of arrivals still checks 1 s after it began")
    assert "no such file or directory" in message


def test_a_mapped_wait_checks_one_path_per_item(harness: Harness, tmp_path: Path) -> None:
    harness.apply(
        f"""\
name: files
tasks:
  names:
    run: |
      echo '["a", "b"]' > "$VERITASK_OUTPUT"
  each:
    after: [names]
    map: {{over: "{{{{ outputs.names }}}}"}}
    wait: {{path: "{tmp_path}/{{{{ map.item }}}}", every: 1s}}
"""
    )
    run_id = harness.trigger("files")
    harness.until(
        lambda: [state for _, state in mapped(harness, run_id)] == [I.RUNNING, I.RUNNING],
        what="a wait per item",
    )
    (tmp_path / "a").write_text("")
    (tmp_path / "b").mkdir()
    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    outputs = [reports(harness, i, "completed")[0]["output"] for i, _ in mapped(harness, run_id)]
    assert [str(o["seen"]) for o in outputs if isinstance(o, dict)] == [
        f"{tmp_path}/a exists (file)",
        f"{tmp_path}/b exists (directory)",
    ]


@pytest.mark.parametrize("day", ["../admin-token", "..", "d1/../../admin-token"])
def test_a_parameter_cannot_point_a_path_wait_outside_its_directory(
    harness: Harness, tmp_path: Path, day: str
) -> None:
    # What an operator must not learn: that a file beside the data exists, and its size.
    (tmp_path / "admin-token").write_text("secret")
    (tmp_path / "data" / "d1").mkdir(parents=True)
    harness.apply(waiting_for(tmp_path / "data").replace("/_SUCCESS", ""))
    run_id = triggers.trigger(
        harness.ledger,
        name="arrivals",
        kind=TriggerKind.MANUAL,
        actor="operator:test",
        parameters={"day": day},
    ).run_id
    state, _ = harness.finish(run_id)
    assert state is RunExecutionState.FAILED
    arrive = harness.instances(run_id)["arrive"].id
    assert reports(harness, arrive, "progress") == []  # never checked
    e = schema.events.c
    with dialects.read_transaction(harness.engine) as connection:
        recorded = connection.execute(
            sa.select(e.kind, e.evidence).where(e.instance_id == arrive)
        ).all()
    told = " ".join(str(evidence) for _, evidence in recorded)
    assert "a wait's path takes a value as a name" in told or "never a step up" in told, told
    assert "admin-token exists" not in told and "bytes" not in told


def mapped(harness: Harness, run_id: str) -> list[tuple[str, InstanceState]]:
    """The mapped instances of ``each``, by map index: id and state."""
    t = schema.task_instances.c
    with dialects.read_transaction(harness.engine) as connection:
        rows = connection.execute(
            sa.select(t.id, t.state)
            .where(t.run_id == run_id, t.task_key == "each", t.map_index >= 0)
            .order_by(t.map_index)
        ).all()
    return [(row.id, InstanceState(row.state)) for row in rows]

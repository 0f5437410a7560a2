"""The scheduler's own alerts, each raised by the condition it names, through the real loop.

docs/operations.md, "Alerts": an attempt the engine holds pending past the queued check
(``queue_quota``), an attempt opened and not acknowledged within the submit grace
(``scheduler_executor``), and a retry not opened when it was due (``retry_timing``) because the
attempt it replaces still runs in the engine's eyes (``engine``).
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import FAST, Harness, signal_worker, worker_of
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import errors, local, port
from veritask.ledger import dialects, schema
from veritask.ledger.ledger import Ledger, utc_now
from veritask.services import deadlines
from veritask.services.platform import Platform

I = InstanceState  # noqa: E741
pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class AlertRow:
    category: str
    message: str
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None


def _alerts(harness: Harness, category: str) -> list[AlertRow]:
    al = schema.alerts.c
    with dialects.read_transaction(harness.engine) as connection:
        rows = connection.execute(
            sa.select(al.category, al.message, al.run_id, al.instance_id, al.attempt_no).where(
                al.category == category
            )
        ).all()
    return [AlertRow(*row) for row in rows]


class OneSlotExecutor(local.LocalExecutor):
    """The local engine with a single slot: a second task waits in the supervisor's queue."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{**options, "slots": 1})


class StartingExecutor(local.LocalExecutor):
    """The local engine whose supervisor is still starting when an attempt is first submitted."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.refused: set[tuple[str, int]] = set()

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        key = (spec.instance_id, spec.attempt_no)
        if key not in self.refused:
            self.refused.add(key)
            raise errors.SupervisorUnavailable("the supervisor is starting")
        return super().submit(spec=spec)


def test_an_attempt_the_engine_holds_pending_raises_queue_quota(
    make_harness: MakeHarness,
) -> None:
    harness = make_harness(executor_class=OneSlotExecutor)
    harness.apply(
        """\
name: crowded
tasks:
  first: {run: "sleep 30"}
  second: {run: "sleep 30"}
"""
    )
    run_id = harness.trigger("crowded")

    raised = harness.until(lambda: _alerts(harness, "queue_quota"), what="a queue_quota alert")

    instances = harness.instances(run_id)
    waiting = [row for row in instances.values() if row.state is I.QUEUED]
    assert len(waiting) == 1, instances
    assert len(raised) == 1
    alert = raised[0]
    assert alert.run_id == run_id
    assert alert.instance_id == waiting[0].id
    assert alert.attempt_no == 1
    assert alert.message.startswith("attempt 1 has been QUEUED since ")
    assert alert.message.endswith("; the engine still holds it pending (supervisor)")


def test_an_attempt_nobody_acknowledged_raises_scheduler_executor(
    make_harness: MakeHarness,
) -> None:
    harness = make_harness(executor_class=StartingExecutor)
    harness.apply(
        """\
name: unanswered
tasks:
  work: {run: "true"}
"""
    )
    run_id = harness.trigger("unanswered")

    state, reason = harness.finish(run_id)

    assert state is RunExecutionState.SUCCESS, reason
    work = harness.instances(run_id)["work"]
    raised = _alerts(harness, "scheduler_executor")
    assert len(raised) == 1
    alert = raised[0]
    assert (alert.run_id, alert.instance_id, alert.attempt_no) == (run_id, work.id, 1)
    assert alert.message == (
        "attempt 1 was opened but not acknowledged within 3 s; submitting it again "
        "(the engine said: the supervisor is starting)"
    )
    assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [(1, "SUCCESS")]


def test_a_run_still_waiting_past_its_expected_finish_names_its_upstream(
    harness: Harness,
) -> None:
    harness.apply(
        """\
name: upstream
tasks:
  load: {run: "true"}
publish:
  commit: {run: "true"}
"""
    )
    harness.apply(
        """\
name: downstream
expected_finish: 1h
wait_for:
  - definition: upstream
tasks:
  report: {run: "true"}
"""
    )
    run_id = harness.trigger("downstream")
    harness.until(
        lambda: "waiting for" in harness.instance_reason(harness.instances(run_id)["report"].id),
        what="the root to wait for upstream",
    )
    assert harness.run(run_id)[0] is RunExecutionState.RUNNING
    home = harness.home
    on_time = Platform(
        Ledger(harness.engine, clock=lambda: utc_now() + timedelta(minutes=59)), home
    )
    late = Platform(Ledger(harness.engine, clock=lambda: utc_now() + timedelta(hours=2)), home)

    assert deadlines.alert_late_runs(on_time) == 0
    assert deadlines.alert_late_runs(late) == 1
    assert deadlines.alert_late_runs(late) == 0  # one alert per run

    assert _alerts(harness, "deadline") == []
    raised = _alerts(harness, "dependency")
    assert len(raised) == 1
    alert = raised[0]
    assert alert.run_id == run_id
    assert alert.message.startswith("the run was expected to finish by ")
    assert "and has not started: waiting for " in alert.message
    assert "upstream" in alert.message.split("has not started: ")[1]


class ClaimingExecutor(local.LocalExecutor):
    """The local engine, made to answer what the test says about the first attempts.

    ``verdict`` replaces the engine's answer for attempt 1: UNKNOWN lets a silent attempt be
    fenced, RUNNING keeps it alive in the engine's eyes; None gives the engine's own answer.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.verdict: port.EngineState | None = port.EngineState.UNKNOWN

    def describe(self, *, external_id: str) -> port.Observation:
        seen = super().describe(external_id=external_id)
        if self.verdict is None or not external_id.endswith("/1"):
            return seen
        return dataclasses.replace(seen, engine_state=self.verdict)


def test_a_retry_held_back_by_a_still_running_attempt_raises_retry_timing(
    make_harness: MakeHarness,
) -> None:
    settings = dataclasses.replace(
        FAST, cancel_window=timedelta(seconds=1), retry_late_after=timedelta(milliseconds=500)
    )
    harness = make_harness(executor_class=ClaimingExecutor, settings=settings)
    executor = harness.executor
    assert isinstance(executor, ClaimingExecutor)
    harness.apply(
        """\
name: held_back
concurrency: allow
tasks:
  work:
    run: "sleep 30"
    lease: 1s
    evidence_window: 1s
    on_unknown: retry
    retry: {max_retries: 1, backoff: fixed, delay: 1s, jitter: 0}
"""
    )
    run_id = harness.trigger("held_back")
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="attempt 1 to run")
    work = harness.instances(run_id)["work"]
    worker = harness.until(lambda: worker_of(executor, work.id, 1), what="attempt 1's worker")
    signal_worker(worker, signal.SIGSTOP)  # silent; the engine's answer is the test's
    harness.until(
        lambda: any(e.kind == "fenced" for e in harness.history(work.id)),
        what="attempt 1 to be fenced",
    )
    executor.verdict = port.EngineState.RUNNING  # the fenced attempt's process still runs

    late = harness.until(lambda: _alerts(harness, "retry_timing"), what="a retry_timing alert")

    assert harness.instances(run_id)["work"].epoch == 1, "attempt 2 opened beside attempt 1"
    assert [(a.instance_id, a.attempt_no) for a in late] == [(work.id, 1)]
    assert late[0].message.startswith("UP_FOR_RETRY since ")
    held = harness.until(lambda: _alerts(harness, "engine"), what="an engine alert")
    assert [a.message for a in held] == [
        "attempt 1 was fenced but the engine did not confirm it stopped within 1 s "
        "(engine: running); attempt 2 waits until the engine says it ended"
    ]
    signal_worker(worker, signal.SIGCONT)  # the stop it was sent ends attempt 1
    executor.verdict = None
    harness.until(lambda: harness.instances(run_id)["work"].epoch == 2, what="attempt 2")
    assert next((n, s) for n, s, *_ in harness.attempts(work.id)) == (1, "ABANDONED")

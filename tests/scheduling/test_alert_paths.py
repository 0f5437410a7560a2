"""The scheduler's own alerts, each raised by the condition it names, through the real loop.

docs/operations.md, "Alerts": an attempt the engine holds pending past the queued check
(``queue_quota``), an attempt opened and not acknowledged within the submit grace
(``scheduler_executor``), and a retry not opened when it was due (``retry_timing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import Harness
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

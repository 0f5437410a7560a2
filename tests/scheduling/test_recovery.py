"""Restart recovery, row by row (docs/scheduling.md, section 5), with a real scheduler and engine.

A scheduler dies while an attempt runs; while it is away the engine loses every trace of the
attempt (the local executor's attempt directory is gone: its ``describe`` answers
``not_found``). The ledger still holds it RUNNING, with a lease far from lapsing. The next
scheduler's recovery must alert at once, with the engine's answer as evidence, record that
answer, and leave the decision to ``on_unknown`` after the evidence window: no kill, no
retry before. The scheduler's clock is stepped, so that the window passes without waiting.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import Harness, InstanceRow, kill_leftovers, wait_for, worker_of
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import procfs, records
from veritask.ledger import dialects, schema
from veritask.ledger.ledger import utc_now

I = InstanceState  # noqa: E741
R = RunExecutionState

pytestmark = pytest.mark.slow

DEFINITION = """\
name: vanished
concurrency: allow
tasks:
  work:
    run: '[ "$VERITASK_ATTEMPT_NO" -ge 2 ] || sleep 600'
    lease: 1h
    evidence_window: 10m
    on_unknown: {on_unknown}
    retry: {{max_retries: 1, backoff: fixed, delay: 0.2s, jitter: 0}}
"""


class SteppedClock:
    """The real time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return utc_now() + self.offset

    def step(self, by: timedelta) -> None:
        self.offset += by


def _vanish(harness: Harness, run_id: str) -> InstanceRow:
    """The scheduler stops while ``work`` runs; then the engine loses the attempt."""
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="work to run")
    work = harness.instances(run_id)["work"]
    attempt = harness.executor.home.attempt(work.id, 1)
    worker = wait_for(lambda: worker_of(harness.executor, work.id, 1), what="the worker")
    wait_for(lambda: records.read_process_record(attempt.task_record), what="the task")
    kill_leftovers(harness.executor.home)
    wait_for(
        lambda: not procfs.is_running(worker.pid, worker.start_ticks), what="the worker to die"
    )
    shutil.rmtree(attempt.path)
    for report in (harness.home / "outbox").iterdir():
        report.unlink()  # whatever the worker still said is lost with it
    assert harness.states(run_id) == {"work": I.RUNNING}
    return work


def _absence_alerts(harness: Harness, instance_id: str) -> list[tuple[str, str, object]]:
    al = schema.alerts.c
    with dialects.read_transaction(harness.engine) as connection:
        rows = connection.execute(
            sa.select(al.category, al.message, al.evidence).where(al.instance_id == instance_id)
        ).all()
    return [(r.category, r.message, r.evidence) for r in rows if "the engine answers" in r.message]


@pytest.mark.parametrize(
    ("on_unknown", "decided", "attempts"),
    [
        ("retry", I.UP_FOR_RETRY, [(1, "ABANDONED"), (2, "SUCCESS")]),
        ("fail", I.FAILED, [(1, "ABANDONED")]),
    ],
)
def test_a_running_attempt_the_engine_does_not_know_is_alerted_at_recovery_and_decided_later(
    make_harness: MakeHarness,
    on_unknown: str,
    decided: InstanceState,
    attempts: list[tuple[int, str]],
) -> None:
    first = make_harness()
    first.apply(DEFINITION.format(on_unknown=on_unknown))
    run_id = first.trigger("vanished")
    work = _vanish(first, run_id)

    clock = SteppedClock()
    restarted = make_harness(clock=clock)  # a new scheduler over the same database: it recovers
    restarted.tick()

    [(category, message, evidence)] = _absence_alerts(restarted, work.id)
    assert category == "reconciliation"
    assert message == (
        "attempt 1 is RUNNING in the ledger but the engine answers not_found (attempt_dir); "
        "on_unknown decides after the 600 s evidence window"
    )
    assert isinstance(evidence, dict)
    assert evidence["engine"]["engine_state"] == "not_found"
    assert evidence["engine"]["source"] == "attempt_dir"
    observed = [e for e in restarted.history(work.id) if e.kind == "engine_observed"]
    assert [(e.actor, e.attempt_no, e.to_state) for e in observed] == [("reconciler", 1, "RUNNING")]
    assert restarted.states(run_id) == {"work": I.RUNNING}

    clock.step(timedelta(minutes=9))  # inside the window: nothing is decided, nothing killed
    restarted.tick()
    assert restarted.states(run_id) == {"work": I.RUNNING}
    assert [(n, s) for n, s, *_ in restarted.attempts(work.id)] == [(1, "RUNNING")]
    kinds = [e.kind for e in restarted.history(work.id)]
    assert kinds.count("engine_observed") == 1  # the window runs from the first answer
    assert "fenced" not in kinds and "lease_expired" not in kinds

    clock.step(timedelta(minutes=2))  # past the window: on_unknown decides
    restarted.until(restarted.state_is(run_id, "work", decided, I.SUCCESS), what="the decision")
    fenced = [e for e in restarted.history(work.id) if e.kind == "fenced"]
    assert [(e.actor, e.attempt_no, e.from_state, e.to_state) for e in fenced] == [
        ("reconciler", 1, "RUNNING", decided.value)
    ]
    assert "lease_expired" not in [e.kind for e in restarted.history(work.id)]
    state, reason = restarted.finish(run_id)
    assert state is (R.SUCCESS if on_unknown == "retry" else R.FAILED), reason
    assert [(n, s) for n, s, *_ in restarted.attempts(work.id)] == attempts
    restarted.assert_snapshots_are_folds()

"""Faults of Celery workers under a real scheduler: a pool process frozen by SIGSTOP.

The scheduler (a harness ticked by the test, on SQLite and PostgreSQL) sends attempts to real
Veritask Celery workers; a test freezes the pool process running one, so that only the
worker's main process still answers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution.celery.conftest import Hosts
from tests.scheduling.harness import FAST, Harness, wait_for
from tests.scheduling.workload import exclusive, executions, marked, overlapped
from veritask.core.states import PROCESSES_ENDED, InstanceState, RunExecutionState
from veritask.execution import errors, layout, port, records
from veritask.execution.celery import executor as celery_executor
from veritask.scheduling.settings import Settings

pytestmark = pytest.mark.slow

I = InstanceState  # noqa: E741
R = RunExecutionState
MakeHosts = Callable[..., Hosts]
#: Frozen-pool-process iterations in the default suite; ``make soak`` runs more.
FREEZE_ITERATIONS = int(os.environ.get("VERITASK_FREEZE_ITERATIONS", "3"))
QUICK_GRACE = timedelta(seconds=0.3)


class QuickStopCelery(celery_executor.CeleryExecutor):
    """The Celery executor with a short grace period between a stop's signals."""

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        return super().submit(spec=dataclasses.replace(spec, grace_period=QUICK_GRACE))

    def submit_many(
        self, *, specs: Sequence[port.AttemptSpec]
    ) -> list[port.Submission | errors.ExecutorError]:
        quick = [dataclasses.replace(spec, grace_period=QUICK_GRACE) for spec in specs]
        return super().submit_many(specs=quick)


MakeHarness = Callable[..., Harness]


@pytest.fixture
def make_harness(make_hosts: MakeHosts, database_url: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """A scheduler harness whose ``celery`` executor sends to one worker host, ``host-a``."""
    made: list[Harness] = []

    def make(settings: Settings = FAST) -> Harness:
        hosts = make_hosts()
        # Two pool processes: a retry runs beside the frozen one.
        hosts.start("host-a", concurrency=2)
        executor = QuickStopCelery(hosts.settings)
        hosts.executors.append(executor)
        made.append(
            Harness(database_url, tmp_path / "home", settings=settings, others={"celery": executor})
        )
        return made[-1]

    yield make
    for harness in made:
        harness.close()


def _pool_process(tmp_path: Path, instance_id: str) -> records.ProcessRecord:
    """The pool process of host-a that runs attempt 1 of the instance."""
    attempt = layout.ExecutorHome((tmp_path / "host-a" / "executor").resolve()).attempt(
        instance_id, 1
    )
    return wait_for(
        lambda: records.read_process_record(attempt.worker_record),
        what="the pool process of attempt 1",
    )


def test_a_pool_process_frozen_past_its_lease_and_the_cancel_window_is_never_run_beside(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Frozen longer than its lease, the evidence window and the cancel window together while
    its task runs: the worker's main process says the task runs, so no other attempt opens
    beside it, and the attempt ends with its own result once the pool process is thawed."""
    harness = make_harness(dataclasses.replace(FAST, cancel_window=timedelta(seconds=1)))
    marker, lock = tmp_path / "marker", tmp_path / "lock"
    harness.apply(
        f"""\
name: frozen_celery_lease
concurrency: allow
tasks:
  work:
    executor: celery
    run: {json.dumps(marked(marker, exclusive(lock, "sleep 5")))}
    lease: 1s
    evidence_window: 0.5s
    on_unknown: retry
    retry: {{max_retries: 2, backoff: fixed, delay: 0.1s, jitter: 0}}
"""
    )
    for _ in range(FREEZE_ITERATIONS):
        run_id = harness.trigger("frozen_celery_lease")
        harness.until(harness.state_is(run_id, "work", I.RUNNING), what="attempt 1 to run")
        work = harness.instances(run_id)["work"]
        pool = _pool_process(tmp_path, work.id)
        os.kill(pool.pid, signal.SIGSTOP)
        try:
            # Its Celery lease (3 s) lapses too: only the main process can say the task runs.
            thaw_at = time.monotonic() + 3.5
            while time.monotonic() < thaw_at:
                harness.tick()
                assert harness.instances(run_id)["work"].epoch == 1
        finally:
            os.kill(pool.pid, signal.SIGCONT)
        state, reason = harness.finish(run_id)

        assert state is R.SUCCESS, reason
        assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [(1, "SUCCESS")]
        assert not [e for e in harness.history(work.id) if e.kind == "fenced"]
        assert executions(marker)[(work.id, 1)].ends == 1
    assert not overlapped(lock), "a second attempt ran beside the first"
    harness.assert_snapshots_are_folds()


def test_a_timeout_on_a_frozen_pool_process_stops_its_task_group_before_the_retry(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """The pool process running attempt 1, frozen, never acts on the stop: the worker's main
    process stops the task's group when the cancel is repeated past the grace period, the
    executor sees no process of it left, the stop is confirmed and the retry starts once the
    old task ended."""
    harness = make_harness()
    marker, lock = tmp_path / "marker", tmp_path / "lock"
    body = 'if [ "$VERITASK_ATTEMPT_NO" = 1 ]; then sleep 30; else sleep 0.1; fi'
    harness.apply(
        f"""\
name: frozen_celery
concurrency: allow
tasks:
  work:
    executor: celery
    run: {json.dumps(marked(marker, exclusive(lock, body)))}
    timeout: 1s
    lease: 10s
    retry: {{max_retries: 1, backoff: fixed, delay: 0.1s, jitter: 0}}
"""
    )
    for _ in range(FREEZE_ITERATIONS):
        run_id = harness.trigger("frozen_celery")
        harness.until(harness.state_is(run_id, "work", I.RUNNING), what="attempt 1 to run")
        work = harness.instances(run_id)["work"]
        pool = _pool_process(tmp_path, work.id)
        os.kill(pool.pid, signal.SIGSTOP)
        try:
            state, reason = harness.finish(run_id)
        finally:
            os.kill(pool.pid, signal.SIGCONT)

        assert state is R.SUCCESS, reason
        assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [
            (1, "TIMEOUT"),
            (2, "SUCCESS"),
        ]
        [engine] = harness.engine_details(work.id, "cancel_confirmed")
        assert engine[PROCESSES_ENDED] is True and engine["delivery_stopped"] is True
        ran = executions(marker)
        assert ran[(work.id, 1)].starts == ran[(work.id, 2)].starts == 1
    assert not overlapped(lock), "a retry ran beside its old task"
    harness.assert_snapshots_are_folds()

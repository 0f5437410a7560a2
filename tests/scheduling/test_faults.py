"""Faults with real processes: stopped workers, lost submissions, late news, killed schedulers.

docs/scheduling.md (sections 4 and 5) and guarantees 5, 6 and 10 of
docs/outcomes-and-fencing.md: a silent worker is LOST, not failed; the reconciler
decides on the engine's evidence; an attempt the engine never had is submitted again; news from
a fenced attempt is kept and changes nothing; a scheduler killed at any point is replaced by
one that converges to the engine's truth without running anything twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import SQLITE
from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import (
    FAST,
    Harness,
    Ledgers,
    kill_leftovers,
    scheduler_command,
    scheduler_env,
    scheduler_processes,
    signal_worker,
    start_scheduler,
    wait_for,
    worker_of,
)
from tests.scheduling.workload import (
    assert_converged,
    exclusive,
    executions,
    marked,
    mixed_definition,
    overlapped,
)
from veritask.core.states import PROCESSES_ENDED, InstanceState, RunExecutionState, TriggerKind
from veritask.execution import layout, local, port, procfs, records
from veritask.execution.worker import is_worked_on
from veritask.ledger import dialects, schema
from veritask.scheduling import sharing, triggers

I = InstanceState  # noqa: E741
R = RunExecutionState

pytestmark = pytest.mark.slow

#: Kill-and-restart iterations in the default suite; ``make soak`` runs many more.
KILL_ITERATIONS = int(os.environ.get("VERITASK_SOAK_ITERATIONS", "20"))
#: Frozen-worker iterations in the default suite; ``make soak`` runs more.
FREEZE_ITERATIONS = int(os.environ.get("VERITASK_FREEZE_ITERATIONS", "3"))
#: A quick grace period for the frozen-worker tests: the escalation takes two of them.
QUICK_GRACE = timedelta(seconds=0.3)


class ForgetfulExecutor(local.LocalExecutor):
    """An engine that acknowledges attempt 1 of every instance and never receives it."""

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        if spec.attempt_no == 1:
            return port.Submission(local.external_id(spec.instance_id, 1), created=True)
        return super().submit(spec=spec)


class DeafExecutor(local.LocalExecutor):
    """An engine that takes stop requests and does nothing with them."""

    def cancel(self, *, external_id: str) -> None:
        return None


class QuickStopExecutor(local.LocalExecutor):
    """The local engine with a short grace period between a stop's signals."""

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        return super().submit(spec=dataclasses.replace(spec, grace_period=QUICK_GRACE))


class SilencingExecutor(QuickStopExecutor):
    """The quick-stop local engine, made to answer ``unknown`` where it sees attempt 1 run,
    until ``silenced`` is cleared: a silent attempt is fenced though its task runs, as one
    on a host its engine cannot see into would be."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.silenced = True

    def describe(self, *, external_id: str) -> port.Observation:
        seen = super().describe(external_id=external_id)
        running = seen.engine_state is port.EngineState.RUNNING
        if self.silenced and running and external_id.endswith("/1"):
            return dataclasses.replace(seen, engine_state=port.EngineState.UNKNOWN)
        return seen


def _stop_worker(harness: Harness, instance_id: str, attempt_no: int) -> records.ProcessRecord:
    worker = wait_for(
        lambda: worker_of(harness.executor, instance_id, attempt_no),
        what=f"the worker of {instance_id}/{attempt_no}",
    )
    signal_worker(worker, signal.SIGSTOP)
    return worker


def test_a_stopped_worker_goes_lost_and_its_late_success_is_accepted(harness: Harness) -> None:
    harness.apply(
        """\
name: stopped
concurrency: allow
tasks:
  work:
    run: "sleep 5"
    lease: 2s
    evidence_window: 3s
    on_unknown: retry
    retry: {max_retries: 1, backoff: fixed, delay: 0.2s, jitter: 0}
"""
    )
    run_id = harness.trigger("stopped")
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="work to run")
    work = harness.instances(run_id)["work"]
    worker = _stop_worker(harness, work.id, 1)

    harness.until(harness.state_is(run_id, "work", I.LOST), what="the silent worker to be LOST")
    signal_worker(worker, signal.SIGCONT)
    state, reason = harness.finish(run_id)

    assert state is R.SUCCESS, reason
    assert harness.states(run_id) == {"work": I.SUCCESS}
    path = harness.instance_states_path(work.id)
    assert path[-4:] == ["RUNNING", "LOST", "RUNNING", "SUCCESS"], path
    assert "FAILED" not in path
    assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [(1, "SUCCESS")]
    kinds = [(e.kind, e.actor) for e in harness.history(work.id)]
    assert ("lease_expired", "monitor") in kinds
    assert ("fenced", "reconciler") not in kinds
    assert any(c == "reconciliation" and i == work.id for c, _, i in harness.alerts())
    harness.assert_snapshots_are_folds()


def test_an_attempt_the_engine_never_received_is_submitted_again(
    make_harness: MakeHarness,
) -> None:
    harness = make_harness(executor_class=ForgetfulExecutor)
    harness.apply(
        """\
name: forgotten
concurrency: allow
tasks:
  work: {run: "true"}
"""
    )
    run_id = harness.trigger("forgotten")
    harness.until(harness.state_is(run_id, "work", I.QUEUED), what="the acknowledgement")

    state, reason = harness.finish(run_id)

    assert state is R.SUCCESS, reason
    work = harness.instances(run_id)["work"]
    assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [
        (1, "NOT_RECEIVED"),
        (2, "SUCCESS"),
    ]
    decisions = [e for e in harness.history(work.id) if e.kind == "never_received"]
    assert [(e.actor, e.attempt_no, e.to_state) for e in decisions] == [
        ("reconciler", 1, "UP_FOR_RETRY")
    ]
    # The engine holds attempt 2 only: attempt 1 never reached it.
    assert not harness.executor.home.attempt(work.id, 1).path.exists()
    assert harness.executor.home.attempt(work.id, 2).exit_record.exists()
    harness.assert_snapshots_are_folds()


def test_a_fenced_attempts_late_success_is_stale_and_the_next_attempt_decides(
    make_harness: MakeHarness,
) -> None:
    harness = make_harness(executor_class=DeafExecutor)
    harness.apply(
        """\
name: fenced
concurrency: allow
tasks:
  work:
    run: 'if [ "$VERITASK_ATTEMPT_NO" = 1 ]; then sleep 2; else sleep 1; fi'
    lease: 2s
    evidence_window: 1s
    on_unknown: retry
    retry: {max_retries: 2, backoff: fixed, delay: 0.2s, jitter: 0}
"""
    )
    run_id = harness.trigger("fenced")
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="attempt 1 to run")
    work = harness.instances(run_id)["work"]
    first_worker = _stop_worker(harness, work.id, 1)

    # LOST; the engine says the task runs, which renews the lease, until the task ends under
    # the frozen worker. Then nothing of attempt 1 runs: fenced after the evidence window,
    # and attempt 2 opens and starts at once.
    def second_running() -> bool:
        row = harness.instances(run_id)["work"]
        return row.epoch == 2 and row.state is I.RUNNING

    harness.until(second_running, what="attempt 2 to run")
    signal_worker(first_worker, signal.SIGCONT)
    harness.until(
        lambda: any(e.kind == "completed" and e.attempt_no == 1 for e in harness.history(work.id)),
        what="attempt 1's completion",
    )
    state, reason = harness.finish(run_id)

    assert state is R.SUCCESS, reason
    history = harness.history(work.id)
    late = [e for e in history if e.kind == "completed" and e.attempt_no == 1]
    assert [(e.outcome, e.from_state, e.to_state) for e in late] == [
        ("stale", "RUNNING", "RUNNING")
    ]
    assert [(n, s, code) for n, s, code, _ in harness.attempts(work.id)] == [
        (1, "ABANDONED", 0),
        (2, "SUCCESS", 0),
    ]
    path = harness.instance_states_path(work.id)
    assert path[-7:] == [
        "RUNNING",
        "LOST",
        "UP_FOR_RETRY",
        "SCHEDULED",
        "QUEUED",
        "RUNNING",
        "SUCCESS",
    ], path
    fenced = [e for e in history if e.kind == "fenced"]
    assert [(e.actor, e.attempt_no) for e in fenced] == [("reconciler", 1)]
    # The late success arrived after attempt 2 had started.
    kinds = [(e.kind, e.attempt_no) for e in history]
    assert kinds.index(("completed", 1)) > kinds.index(("started", 2))
    assert not [m for c, m, i in harness.alerts() if c == "engine" and i == work.id]
    harness.assert_snapshots_are_folds()


def test_a_stop_the_engine_does_not_confirm_is_cancel_failed(make_harness: MakeHarness) -> None:
    harness = make_harness(executor_class=DeafExecutor)
    harness.apply(SLEEPY)
    run_id = harness.trigger("sleepy")
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="work to run")

    triggers.request_run_cancel(harness.ledger, run_id, actor="operator:test", reason="stop")
    harness.until(harness.state_is(run_id, "work", I.CANCEL_FAILED), what="CANCEL_FAILED")

    work = harness.instances(run_id)["work"]
    assert harness.instance_states_path(work.id)[-3:] == ["RUNNING", "CANCELLING", "CANCEL_FAILED"]
    unconfirmed = [e for e in harness.history(work.id) if e.kind == "cancel_unconfirmed"]
    assert [e.actor for e in unconfirmed] == ["reconciler"]
    assert any(c == "engine" and i == work.id for c, _, i in harness.alerts())
    assert harness.run(run_id)[0] is R.CANCELLING  # the run waits for the engine
    # CANCEL_FAILED is still reconciled: once the engine does stop it, the stop is confirmed.
    [(_, _, _, external_id)] = harness.attempts(work.id)
    assert external_id is not None
    local.LocalExecutor.cancel(harness.executor, external_id=external_id)
    assert harness.finish(run_id)[0] is R.CANCELLED
    assert harness.instances(run_id)["work"].state is I.CANCELLED
    harness.assert_snapshots_are_folds()


def test_a_task_that_ignores_sigterm_is_cancel_failed_until_it_is_killed(
    harness: Harness,
) -> None:
    harness.apply(
        """\
name: stubborn
concurrency: allow
tasks:
  work: {run: "trap '' TERM; sleep 30"}
"""
    )
    run_id = harness.trigger("stubborn")
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="work to run")

    triggers.request_run_cancel(harness.ledger, run_id, actor="operator:test", reason="stop")
    harness.until(harness.state_is(run_id, "work", I.CANCEL_FAILED), what="CANCEL_FAILED")
    # The worker kills the group after its grace period (10 s); the engine then confirms.
    state, _ = harness.finish(run_id)

    assert state is R.CANCELLED
    work = harness.instances(run_id)["work"]
    assert harness.instance_states_path(work.id)[-4:] == [
        "RUNNING",
        "CANCELLING",
        "CANCEL_FAILED",
        "CANCELLED",
    ]


SLEEPY = """\
name: sleepy
concurrency: allow
tasks:
  work: {run: "sleep 30"}
"""


# -- scheduler processes ---------------------------------------------------------------------


@pytest.mark.parametrize("database_kind", [SQLITE], indirect=True)
def test_a_second_scheduler_on_sqlite_refuses_to_start(database_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = Ledgers(dialects.create_engine(database_url))
    try:
        with scheduler_processes() as started:
            first = start_scheduler(started, home, database_url, tmp_path / "first.log")
            wait_for(lambda: _scheduler_pids(db) == [first.pid], what="the first scheduler")

            second = subprocess.run(
                scheduler_command(home, database_url, "--no-migrate"),
                env=scheduler_env(),
                capture_output=True,
                timeout=30,
                check=False,
            )

            assert second.returncode == 4
            message = second.stderr.decode()
            assert "another scheduler is running on this SQLite database" in message
            assert f"process {first.pid}" in message
            assert first.poll() is None

            # Killed with SIGKILL, it leaves its row behind; its successor starts at once.
            first.kill()
            first.wait(timeout=10)
            third = start_scheduler(started, home, database_url, tmp_path / "third.log")
            wait_for(lambda: _scheduler_pids(db) == [third.pid], what="the successor")
            third.send_signal(signal.SIGTERM)
            assert third.wait(timeout=30) == 0
            assert _scheduler_pids(db) == []
    finally:
        kill_leftovers(layout.ExecutorHome(home / "executor"))
        db.engine.dispose()


def test_killing_the_scheduler_at_random_points_converges_without_duplicates(
    database_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    marker = tmp_path / "marker"
    db = Ledgers(dialects.create_engine(database_url))
    seed = int(os.environ.get("VERITASK_SOAK_SEED", "20260501"))
    print(f"kill points from seed {seed}, {KILL_ITERATIONS} iterations")  # shown on failure
    rng = random.Random(seed)
    triggers.apply_definition(db.ledger, mixed_definition("mixed", marker))
    try:
        with scheduler_processes() as started:
            for iteration in range(KILL_ITERATIONS):
                if iteration % 2 == 0:
                    triggers.trigger(
                        db.ledger, name="mixed", kind=TriggerKind.MANUAL, actor="operator:test"
                    )
                process = start_scheduler(started, home, database_url, tmp_path / "scheduler.log")
                if iteration % 5 != 4:
                    # Most deaths come while it works; some while it is still starting.
                    _wait_registered(db, process)
                time.sleep(rng.uniform(0.0, 0.8))  # the random point at which it dies
                process.kill()
                process.wait(timeout=10)
            final = start_scheduler(started, home, database_url, tmp_path / "scheduler.log")
            _wait_registered(db, final)
            wait_for(
                lambda: all(state not in _ACTIVE for _, state, _ in db.runs()),
                timeout=90,
                what="every run to finish",
                interval=0.1,
            )
            final.send_signal(signal.SIGTERM)
            assert final.wait(timeout=30) == 0
        checked = assert_converged(db, layout.ExecutorHome(home / "executor"), marker)
        assert checked == len(db.runs()) * 9
    finally:
        local.LocalExecutor(home=home).shutdown_supervisor()
        kill_leftovers(layout.ExecutorHome(home / "executor"))
        db.engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_two_schedulers_share_postgres_and_one_dies_mid_flight(
    database_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    marker = tmp_path / "marker"
    db = Ledgers(dialects.create_engine(database_url))
    schedule = 'schedule:\n  cron: "* * * * *"\n  catchup: {enabled: true, max_runs: 3}\n'
    triggers.apply_definition(db.ledger, mixed_definition("shared", marker, extra=schedule))
    # Applied ten minutes ago: both schedulers find the same three runs due at once.
    with db.engine.begin() as connection:
        connection.execute(
            sa.update(schema.definitions).values(
                created_at=db.ledger.clock() - timedelta(minutes=10)
            )
        )
    try:
        with scheduler_processes() as started:
            first = start_scheduler(started, home, database_url, tmp_path / "first.log")
            second = start_scheduler(started, home, database_url, tmp_path / "second.log")
            wait_for(
                lambda: sorted(_scheduler_pids(db)) == sorted([first.pid, second.pid]),
                what="both schedulers",
            )
            for _ in range(5):
                triggers.trigger(
                    db.ledger, name="shared", kind=TriggerKind.MANUAL, actor="operator:test"
                )
            wait_for(lambda: len(db.runs()) >= 8, what="the scheduled runs")
            wait_for(lambda: _count_attempts(db) >= 20, what="work in flight", interval=0.02)
            assert first.poll() is None and second.poll() is None
            assert _count_active_instances(db) > 0
            first.kill()  # mid-flight: attempts opened, submitted, running
            first.wait(timeout=10)
            wait_for(
                lambda: all(state not in _ACTIVE for _, state, _ in db.runs()),
                timeout=90,
                what="every run to finish",
                interval=0.1,
            )
            assert second.poll() is None, "the surviving scheduler must carry on"
        runs = db.runs()
        keys = [key for _, _, key in runs]
        assert len(keys) == len(set(keys))
        scheduled = [key for key in keys if "@" in key]
        assert len(scheduled) >= 3  # one run per due minute, fired by both, created once
        assert len(runs) == len(scheduled) + 5
        checked = assert_converged(db, layout.ExecutorHome(home / "executor"), marker)
        assert checked == len(runs) * 9
        assert not [a for a in db.alerts() if a[0] == "platform"]
    finally:
        local.LocalExecutor(home=home).shutdown_supervisor()
        kill_leftovers(layout.ExecutorHome(home / "executor"))
        db.engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_the_share_of_a_scheduler_killed_mid_fan_out_is_taken_over(
    database_url: str, tmp_path: Path
) -> None:
    """Two scheduler processes, one home (one executor, one outbox), divide a fan-out spread
    over eight runs (docs/scheduling.md, section 6). One is killed with SIGKILL while its
    attempts run: its workers keep reporting into the shared outbox, which the survivor
    records; once its heartbeat is stale the survivor owns its runs and finishes them.
    Every task runs once, and no instance runs two attempts or succeeds twice."""
    home = tmp_path / "home"
    marker = tmp_path / "marker"
    db = Ledgers(dialects.create_engine(database_url))
    tasks = "\n".join(
        f"  t{index:02d}: {{run: {json.dumps(marked(marker, 'sleep 0.3'))}}}" for index in range(12)
    )
    triggers.apply_definition(db.ledger, f"name: spread\nconcurrency: allow\ntasks:\n{tasks}\n")
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    try:
        with scheduler_processes() as started:
            first, second = (start_scheduler(started, home, database_url, log) for log in logs)
            wait_for(
                lambda: sorted(_scheduler_pids(db)) == sorted([first.pid, second.pid]),
                what="both schedulers",
            )
            wait_for(
                lambda: all("sharing work with 2 schedulers" in log.read_text() for log in logs),
                what="both to share the work",
            )
            ids = _scheduler_ids(db)
            run_ids: list[str] = []
            killed_runs: list[str] = []
            # At least eight runs, and three of them the first one's (it dies) and the second's.
            while len(run_ids) < 8 or not 3 <= len(killed_runs) <= len(run_ids) - 3:
                run_ids.append(
                    triggers.trigger(
                        db.ledger, name="spread", kind=TriggerKind.MANUAL, actor="operator:test"
                    ).run_id
                )
                if sharing.owner(run_ids[-1], ids.values()) == ids[first.pid]:
                    killed_runs.append(run_ids[-1])
            wait_for(lambda: _count_attempts(db) >= 16, what="work in flight", interval=0.02)
            first.kill()  # mid-fan-out: its attempts queued and running, its runs unfinished
            first.wait(timeout=10)
            killed_at = time.monotonic()
            unfinished = [r for r in killed_runs if db.run(r)[0] in _ACTIVE]
            wait_for(
                lambda: all(db.run(r)[0] not in _ACTIVE for r in run_ids),
                timeout=60,
                what="every run to finish",
                interval=0.1,
            )
            assert second.poll() is None, "the surviving scheduler must carry on"
            # The dead one's runs waited for its heartbeat to go stale, then moved.
            assert unfinished
            assert time.monotonic() - killed_at >= 5
        assert "sharing work with 1 schedulers" in logs[1].read_text()
        ran = executions(marker)
        for run_id in run_ids:
            assert db.run(run_id)[0] is R.SUCCESS
            for task, instance in db.instances(run_id).items():
                assert instance.state is I.SUCCESS, (run_id, task)
                attempts = db.attempts(instance.id)
                assert [(n, state) for n, state, *_ in attempts] == [(1, "SUCCESS")], attempts
                execution = ran[(instance.id, 1)]
                assert (execution.starts, execution.ends) == (1, 1), (run_id, task)
        assert len(ran) == len(run_ids) * 12
        assert not [a for a in db.alerts() if a[0] == "platform"]
        db.assert_snapshots_are_folds()
    finally:
        local.LocalExecutor(home=home).shutdown_supervisor()
        kill_leftovers(layout.ExecutorHome(home / "executor"))
        db.engine.dispose()


_ACTIVE = (R.RUNNING, R.QUEUED, R.CANCELLING)


def _wait_registered(db: Ledgers, process: subprocess.Popen[bytes]) -> None:
    wait_for(lambda: process.pid in _scheduler_pids(db), what=f"scheduler {process.pid} to start")


def _scheduler_ids(db: Ledgers) -> dict[int, str]:
    """The registered schedulers' ids by their process ids."""
    s = schema.schedulers.c
    with dialects.read_transaction(db.engine) as connection:
        return {row.pid: row.id for row in connection.execute(sa.select(s.pid, s.id))}


def _scheduler_pids(db: Ledgers) -> list[int]:
    with dialects.read_transaction(db.engine) as connection:
        return list(connection.execute(sa.select(schema.schedulers.c.pid)).scalars())


def _count_active_instances(db: Ledgers) -> int:
    t = schema.task_instances.c
    active = [I.SCHEDULED.value, I.QUEUED.value, I.RUNNING.value]
    with dialects.read_transaction(db.engine) as connection:
        return int(
            connection.execute(
                sa.select(sa.func.count())
                .select_from(schema.task_instances)
                .where(t.state.in_(active))
            ).scalar_one()
        )


def _count_attempts(db: Ledgers) -> int:
    with dialects.read_transaction(db.engine) as connection:
        return int(
            connection.execute(sa.select(sa.func.count()).select_from(schema.attempts)).scalar_one()
        )


def test_recovery_takes_the_engines_word_for_attempts_that_ended_unheard(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Restart table (docs/scheduling.md): RUNNING + succeeded -> SUCCESS; + failed -> retry.

    The scheduler stops while two tasks run; they end, and their reports are lost (the outbox
    is emptied). A new scheduler starts: its recovery asks the engine, whose exit records
    decide.
    """
    harness = make_harness()
    harness.apply(
        """\
name: unheard
concurrency: allow
defaults:
  retry: {max_retries: 1, backoff: fixed, delay: 0.2s, jitter: 0}
tasks:
  good: {run: 'sleep 0.5'}
  bad: {run: 'sleep 0.5; [ "$VERITASK_ATTEMPT_NO" -ge 2 ]'}
"""
    )
    run_id = harness.trigger("unheard")
    harness.until(lambda: set(harness.states(run_id).values()) == {I.RUNNING}, what="both to run")
    instances = harness.instances(run_id)
    for row in instances.values():
        _wait_worker_gone(harness, row.id)
        assert harness.executor.home.attempt(row.id, 1).exit_record.exists()
    for report in (harness.home / "outbox").iterdir():
        report.unlink()  # the callbacks are lost
    assert harness.states(run_id) == {"good": I.RUNNING, "bad": I.RUNNING}

    restarted = make_harness()  # a new scheduler on the same database and engine: it recovers

    assert restarted.states(run_id) == {"good": I.SUCCESS, "bad": I.UP_FOR_RETRY}
    observed = [e for e in restarted.history(instances["good"].id) if e.kind == "engine_observed"]
    assert [(e.actor, e.to_state) for e in observed] == [("reconciler", "SUCCESS")]
    assert restarted.finish(run_id)[0] is R.SUCCESS
    assert [(n, s) for n, s, *_ in restarted.attempts(instances["bad"].id)] == [
        (1, "FAILED"),
        (2, "SUCCESS"),
    ]
    restarted.assert_snapshots_are_folds()


def _wait_worker_gone(harness: Harness, instance_id: str) -> None:
    wait_for(lambda: worker_of(harness.executor, instance_id, 1), what="the worker")
    attempt = harness.executor.home.attempt(instance_id, 1)
    wait_for(
        lambda: not is_worked_on(attempt),
        what=f"the worker of {instance_id} to deliver and leave the attempt",
    )


def test_a_fenced_attempt_is_stopped_before_its_successor_starts(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Fencing stops a stale commit; only a stop keeps two copies from running side by side.

    Attempt 1 is fenced while its task runs (its engine could not see it), and its worker is
    frozen: the successor waits while the engine says the task runs, the stop asked again on
    every round reaches the task's group, and only then does attempt 2 open."""
    harness = make_harness(executor_class=SilencingExecutor)
    executor = harness.executor
    assert isinstance(executor, SilencingExecutor)
    marker, lock = tmp_path / "marker", tmp_path / "lock"
    body = 'if [ "$VERITASK_ATTEMPT_NO" = 1 ]; then sleep 30; else sleep 0.1; fi'
    harness.apply(
        f"""\
name: replaced_attempt
concurrency: allow
tasks:
  work:
    run: {json.dumps(marked(marker, exclusive(lock, body)))}
    lease: 1s
    evidence_window: 0.5s
    on_unknown: retry
    retry: {{max_retries: 2, backoff: fixed, delay: 0.1s, jitter: 0}}
"""
    )
    run_id = harness.trigger("replaced_attempt")
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="attempt 1 to run")
    work = harness.instances(run_id)["work"]
    first_worker = _stop_worker(harness, work.id, 1)
    try:
        harness.until(
            lambda: any(e.kind == "fenced" for e in harness.history(work.id)),
            what="attempt 1 to be fenced",
        )
        executor.silenced = False  # the engine now says what it sees: the task runs
        harness.until(
            lambda: harness.instances(run_id)["work"].epoch == 2, what="attempt 2 to open"
        )
        state, reason = harness.finish(run_id)
        # The stop reached the task's group with its worker still frozen.
        assert procfs.is_stopped(first_worker.pid, first_worker.start_ticks)
    finally:
        signal_worker(first_worker, signal.SIGCONT)

    assert state is R.SUCCESS, reason
    ran = executions(marker)
    assert ran[(work.id, 1)].starts == ran[(work.id, 2)].starts == 1
    assert not overlapped(lock), "attempt 2 ran beside attempt 1"
    assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [(1, "ABANDONED"), (2, "SUCCESS")]
    harness.until(
        lambda: any(e.kind == "completed" and e.attempt_no == 1 for e in harness.history(work.id)),
        what="attempt 1's late completion",
    )
    late = [e for e in harness.history(work.id) if e.kind == "completed" and e.attempt_no == 1]
    assert [e.outcome for e in late] == ["stale"]


# -- frozen workers ------------------------------------------------------------------------


def test_a_worker_frozen_past_its_lease_and_the_cancel_window_is_never_run_beside(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """Frozen longer than its lease, the evidence window and the cancel window together while
    its task runs: the engine says the task runs, so no other attempt opens beside it, and the
    attempt ends with its own result once the worker is thawed."""
    window = timedelta(seconds=1)
    harness = make_harness(
        executor_class=QuickStopExecutor, settings=dataclasses.replace(FAST, cancel_window=window)
    )
    marker, lock = tmp_path / "marker", tmp_path / "lock"
    harness.apply(
        f"""\
name: frozen_lease
concurrency: allow
tasks:
  work:
    run: {json.dumps(marked(marker, exclusive(lock, "sleep 4")))}
    lease: 1s
    evidence_window: 0.5s
    on_unknown: retry
    retry: {{max_retries: 2, backoff: fixed, delay: 0.1s, jitter: 0}}
"""
    )
    for _ in range(FREEZE_ITERATIONS):
        run_id = harness.trigger("frozen_lease")
        harness.until(harness.state_is(run_id, "work", I.RUNNING), what="attempt 1 to run")
        work = harness.instances(run_id)["work"]
        worker = _stop_worker(harness, work.id, 1)
        try:
            # Lease (1 s), evidence window (0.5 s) and cancel window (1 s) all run out.
            thaw_at = time.monotonic() + 3.0
            while time.monotonic() < thaw_at:
                harness.tick()
                assert harness.instances(run_id)["work"].epoch == 1
        finally:
            signal_worker(worker, signal.SIGCONT)
        state, reason = harness.finish(run_id)

        assert state is R.SUCCESS, reason
        assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [(1, "SUCCESS")]
        assert "LOST" in harness.instance_states_path(work.id)
        assert not [e for e in harness.history(work.id) if e.kind == "fenced"]
        assert executions(marker)[(work.id, 1)].ends == 1
    assert not overlapped(lock), "a second attempt ran beside the first"
    harness.assert_snapshots_are_folds()


def test_a_timeout_on_a_frozen_worker_stops_its_task_group_before_the_retry(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    """The worker, frozen, never acts on the stop: the repeated cancel stops the task's group
    past the grace period, the engine sees no process of it left, the stop is confirmed and
    the retry starts once the old task ended."""
    harness = make_harness(executor_class=QuickStopExecutor)
    marker, lock = tmp_path / "marker", tmp_path / "lock"
    body = 'if [ "$VERITASK_ATTEMPT_NO" = 1 ]; then sleep 30; else sleep 0.1; fi'
    harness.apply(
        f"""\
name: frozen_timeout
concurrency: allow
tasks:
  work:
    run: {json.dumps(marked(marker, exclusive(lock, body)))}
    timeout: 1s
    lease: 10s
    retry: {{max_retries: 1, backoff: fixed, delay: 0.1s, jitter: 0}}
"""
    )
    for _ in range(FREEZE_ITERATIONS):
        run_id = harness.trigger("frozen_timeout")
        harness.until(harness.state_is(run_id, "work", I.RUNNING), what="attempt 1 to run")
        work = harness.instances(run_id)["work"]
        worker = _stop_worker(harness, work.id, 1)
        try:
            state, reason = harness.finish(run_id)
        finally:
            signal_worker(worker, signal.SIGCONT)

        assert state is R.SUCCESS, reason
        assert [(n, s) for n, s, *_ in harness.attempts(work.id)] == [
            (1, "TIMEOUT"),
            (2, "SUCCESS"),
        ]
        confirmed = [e for e in harness.history(work.id) if e.kind == "cancel_confirmed"]
        assert [(e.actor, e.attempt_no) for e in confirmed] == [("reconciler", 1)]
        [engine] = harness.engine_details(work.id, "cancel_confirmed")
        assert engine["worker_stopped"] is True and engine[PROCESSES_ENDED] is True
        ran = executions(marker)
        assert ran[(work.id, 1)].starts == ran[(work.id, 2)].starts == 1
        assert ran[(work.id, 2)].started_ns > ran[(work.id, 1)].started_ns
    assert not overlapped(lock), "a retry ran beside its old task"
    harness.assert_snapshots_are_folds()

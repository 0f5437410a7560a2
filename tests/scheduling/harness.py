"""A scheduler over a real ledger and a real local executor, and ways to look at what it did.

Everything runs for real: the supervisor daemon, one worker process per attempt, the task's
own process, SQLite or PostgreSQL. Nothing sleeps to wait: tests tick the scheduler (or poll a
scheduler process) until a condition holds, with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from veritask.core.events import Event
from veritask.core.fold import fold
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.execution import layout, local, port, procfs, records
from veritask.ledger import dialects, schema
from veritask.ledger.ledger import Ledger, utc_now
from veritask.scheduling import sharing, triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET = "scheduling-tests-secret-0123456789"
DEADLINE = 30.0
_T = TypeVar("_T")

#: Short timings, so that leases, windows and retries play out in seconds.
FAST = Settings(
    idle_sleep=timedelta(milliseconds=5),
    monitor_every=timedelta(milliseconds=200),
    reconcile_every=timedelta(milliseconds=300),
    full_scan_every=timedelta(milliseconds=500),
    submit_grace=timedelta(seconds=3),
    queued_check=timedelta(seconds=1),
    cancel_window=timedelta(seconds=3),
)

#: The same timings as command-line options of ``python -m veritask.scheduling``.
FAST_FLAGS = [
    "--idle-sleep=0.005",
    "--monitor-every=0.2",
    "--reconcile-every=0.3",
    "--full-scan-every=0.5",
    "--submit-grace=3",
    "--queued-check=1",
    "--cancel-window=3",
]


def wait_for(
    condition: Callable[[], _T | None],
    *,
    timeout: float = DEADLINE,
    what: str = "",
    step: Callable[[], object] | None = None,
    interval: float = 0.01,
) -> _T:
    """Call ``step`` (a scheduler tick) and poll ``condition`` until it is truthy."""
    give_up_at = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        value = condition()
        if value:
            return value
        if time.monotonic() >= give_up_at:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        if step is None:
            time.sleep(interval)


@dataclass(frozen=True)
class InstanceRow:
    id: str
    task_key: str
    state: InstanceState
    epoch: int


@dataclass(frozen=True)
class Recorded:
    """One recorded event of an instance, as its history shows it."""

    kind: str
    attempt_no: int | None
    actor: str
    from_state: str | None
    to_state: str | None
    outcome: str
    reason: str | None
    position: int


class Ledgers:
    """Read helpers over a database, for assertions."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.engine = engine
        self.ledger = Ledger(engine, clock=clock)

    def run(self, run_id: str) -> tuple[RunExecutionState, str]:
        r = schema.runs.c
        with dialects.read_transaction(self.engine) as connection:
            row = connection.execute(
                sa.select(r.execution_state, r.execution_reason).where(r.id == run_id)
            ).one()
        return RunExecutionState(row.execution_state), row.execution_reason or ""

    def runs(self) -> list[tuple[str, RunExecutionState, str]]:
        r = schema.runs.c
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(
                sa.select(r.id, r.execution_state, r.idempotency_key).order_by(r.created_at, r.id)
            ).all()
        return [
            (row.id, RunExecutionState(row.execution_state), row.idempotency_key) for row in rows
        ]

    def instances(self, run_id: str) -> dict[str, InstanceRow]:
        t = schema.task_instances.c
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(
                sa.select(t.id, t.task_key, t.state, t.epoch).where(t.run_id == run_id)
            ).all()
        return {
            row.task_key: InstanceRow(row.id, row.task_key, InstanceState(row.state), row.epoch)
            for row in rows
        }

    def states(self, run_id: str) -> dict[str, InstanceState]:
        return {key: row.state for key, row in self.instances(run_id).items()}

    def engine_details(self, instance_id: str, kind: str) -> list[dict[str, object]]:
        """The engine's details in the evidence of the instance's events of ``kind``."""
        e = schema.events.c
        with dialects.read_transaction(self.engine) as connection:
            found = connection.execute(
                sa.select(e.evidence)
                .where(e.instance_id == instance_id, e.kind == kind)
                .order_by(e.position)
            ).scalars()
            return [dict(evidence["details"]) for evidence in found]

    def history(self, instance_id: str) -> list[Recorded]:
        e = schema.events.c
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(
                sa.select(
                    e.kind,
                    e.attempt_no,
                    e.actor,
                    e.from_state,
                    e.to_state,
                    e.outcome,
                    e.reason,
                    e.position,
                )
                .where(e.instance_id == instance_id)
                .order_by(e.position)
            ).all()
        return [Recorded(*row) for row in rows]

    def run_history(self, run_id: str) -> list[tuple[str | None, str | None, str | None]]:
        e = schema.events.c
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(
                sa.select(e.from_state, e.to_state, e.reason)
                .where(e.subject_type == "run", e.subject_id == run_id)
                .order_by(e.position)
            ).all()
        return [(row.from_state, row.to_state, row.reason) for row in rows]

    def instance_states_path(self, instance_id: str) -> list[str]:
        """The successive instance states of the applied events (changes only)."""
        path: list[str] = []
        for event in self.history(instance_id):
            if event.outcome != "applied" or event.to_state is None:
                continue
            if not path or path[-1] != event.to_state:
                path.append(event.to_state)
        return path

    def attempts(self, instance_id: str) -> list[tuple[int, str, int | None, str | None]]:
        a = schema.attempts.c
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(
                sa.select(a.attempt_no, a.state, a.exit_code, a.external_id)
                .where(a.instance_id == instance_id)
                .order_by(a.attempt_no)
            ).all()
        return [(row.attempt_no, row.state, row.exit_code, row.external_id) for row in rows]

    def alerts(self) -> list[tuple[str, str, str | None]]:
        al = schema.alerts.c
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(sa.select(al.category, al.message, al.instance_id)).all()
        return [(row.category, row.message, row.instance_id) for row in rows]

    def instance_reason(self, instance_id: str) -> str:
        """The reason of the instance's stored snapshot (the phrase in English)."""
        loaded = Ledger(self.engine).snapshot(instance_id)
        assert loaded is not None
        return loaded[0].reason

    def all_instance_ids(self) -> list[str]:
        with dialects.read_transaction(self.engine) as connection:
            return list(connection.execute(sa.select(schema.task_instances.c.id)).scalars())

    def assert_snapshots_are_folds(self) -> int:
        """Every instance's stored snapshot equals the pure fold of its recorded events."""
        fresh = Ledger(self.engine)  # no cache: the snapshot as stored
        checked = 0
        for instance_id in self.all_instance_ids():
            loaded = fresh.snapshot(instance_id)
            policy = fresh.policy_of(instance_id)
            assert loaded is not None and policy is not None
            events: list[Event] = fresh.recorded_events(instance_id)
            folded = fold(instance_id, events, policy)
            assert loaded[0] == folded, f"instance {instance_id}: snapshot is not the fold"
            checked += 1
        return checked


class Harness(Ledgers):
    """A scheduler in this process, ticked by the test, over a real executor."""

    def __init__(
        self,
        url: str,
        home: Path,
        *,
        executor: local.LocalExecutor | None = None,
        settings: Settings = FAST,
        clock: Callable[[], datetime] = utc_now,
        others: Mapping[str, port.Executor] | None = None,
        membership: sharing.Membership | None = None,
    ) -> None:
        """``others``: executors beside the local one, by the name a task chooses them by;
        ``membership``: who shares the runs with this scheduler (several on PostgreSQL)."""
        super().__init__(dialects.create_engine(url), clock=clock)
        self.url = url
        self.home = home
        self.executor = executor or local.LocalExecutor(
            home=home, slots=4, idle_exit_after=timedelta(seconds=60)
        )
        self.scheduler = Scheduler(
            self.ledger,
            executors={"local": self.executor, **(others or {})},
            tokens=AttemptTokens(SECRET.encode()),
            outbox=home / "outbox",
            settings=settings,
            membership=membership,
        )
        self.scheduler.recover()

    def apply(self, text: str) -> None:
        triggers.apply_definition(self.ledger, text)

    def trigger(self, name: str, *, key: str | None = None) -> str:
        return triggers.trigger(
            self.ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:test", key=key
        ).run_id

    def tick(self) -> None:
        self.scheduler.tick()

    def until(
        self, condition: Callable[[], _T | None], *, timeout: float = DEADLINE, what: str = ""
    ) -> _T:
        """Tick until ``condition`` holds."""

        def step() -> None:
            report = self.scheduler.tick()
            if report.work == 0:
                time.sleep(0.005)

        return wait_for(condition, timeout=timeout, what=what, step=step)

    def finish(self, run_id: str, *, timeout: float = DEADLINE) -> tuple[RunExecutionState, str]:
        """Tick until the run has left RUNNING and CANCELLING."""
        active = (RunExecutionState.RUNNING, RunExecutionState.CANCELLING, RunExecutionState.QUEUED)

        def done() -> tuple[RunExecutionState, str] | None:
            state = self.run(run_id)
            return None if state[0] in active else state

        return self.until(done, timeout=timeout, what=f"run {run_id} to finish")

    def state_is(self, run_id: str, task: str, *states: InstanceState) -> Callable[[], bool]:
        return lambda: self.instances(run_id)[task].state in states

    def close(self) -> None:
        try:
            self.scheduler.close()
        finally:
            self.executor.shutdown_supervisor()
            kill_leftovers(self.executor.home)
            self.engine.dispose()


def kill_leftovers(executor_home: layout.ExecutorHome) -> None:
    """Kill every worker and task process that the attempts under ``executor_home`` recorded."""
    for record_path in executor_home.attempts.glob("*/*/*.json"):
        if record_path.name not in ("worker.json", "task.json"):
            continue
        with contextlib.suppress(ValueError, OSError):
            process = records.read_process_record(record_path)
            if process is None:
                continue
            if process.pgid is not None and procfs.is_running(process.pid, process.start_ticks):
                procfs.signal_group(process.pgid, signal.SIGKILL)
                procfs.signal_process(process.pid, process.start_ticks, signal.SIGCONT)
            procfs.signal_process(process.pid, process.start_ticks, signal.SIGKILL)
            procfs.signal_process(process.pid, process.start_ticks, signal.SIGCONT)


def worker_of(
    executor: local.LocalExecutor, instance_id: str, attempt_no: int
) -> records.ProcessRecord | None:
    """The worker process of an attempt, once the supervisor has recorded it."""
    attempt = executor.home.attempt(instance_id, attempt_no)
    with contextlib.suppress(ValueError, OSError):
        return records.read_process_record(attempt.worker_record)
    return None


def signal_worker(process: records.ProcessRecord, signum: signal.Signals) -> None:
    assert procfs.signal_process(process.pid, process.start_ticks, signum), "the worker is gone"


def attempt_dirs(executor_home: layout.ExecutorHome) -> dict[str, set[int]]:
    """The attempt directories the engine holds: instance -> attempt numbers."""
    found: dict[str, set[int]] = {}
    for path in executor_home.attempts.glob("*/*"):
        if path.is_dir() and path.name.isdigit():
            found.setdefault(path.parent.name, set()).add(int(path.name))
    return found


# -- scheduler processes ------------------------------------------------------------------


def scheduler_command(home: Path, url: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "veritask.scheduling",
        "--home",
        str(home),
        "--url",
        url,
        "--slots",
        "4",
        *FAST_FLAGS,
        *extra,
    ]


def scheduler_env() -> dict[str, str]:
    env = dict(os.environ)
    env["VERITASK_SECRET"] = SECRET
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


@contextlib.contextmanager
def scheduler_processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Scheduler processes started by the test; all killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()


def start_scheduler(
    started: list[subprocess.Popen[bytes]], home: Path, url: str, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as output:
        process = subprocess.Popen(
            scheduler_command(home, url, "--no-migrate", *extra),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            env=scheduler_env(),
        )
    started.append(process)
    return process


def count_by(values: Mapping[str, InstanceState]) -> dict[InstanceState, int]:
    counts: dict[InstanceState, int] = {}
    for value in values.values():
        counts[value] = counts.get(value, 0) + 1
    return counts

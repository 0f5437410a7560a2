"""The scheduler end to end, beside what the machine does without it: ``make bench``.

For each database (SQLite in a temporary directory, PostgreSQL at 127.0.0.1:5432 when it
answers), with the local executor and the outbox transport:

(a) **fan-out**: one run of ``--tasks`` independent tasks ``true``, from the trigger until every
    instance is durably SUCCESS in the ledger, in tasks per second;
(b) **chain**: one run of ``--chain`` tasks ``true`` each after the previous one; per hop, the
    latency from the upstream's SUCCESS (the ``observed_at`` of the event that made it SUCCESS)
    to the downstream's RUNNING (the ``observed_at`` of its ``started``), p50 and p99.

Baselines measured in the same run: the same ``true`` commands through the LocalExecutor alone
(no ledger, no scheduler: submit, wait for the exit records) and through plain
``subprocess.Popen`` with as many in flight as the executor has slots; for the chain, one
attempt alone through the executor (submit until its task has started, the part of a hop the
engine owns). The ratios say what the scheduler costs on top of them.

Every home is removed when the bench ends, not when its part does: on a file system that
makes creating a file dearer after many deletions (ext4 without a journal), one part's
clean-up would otherwise tax the next part's measurement. Each database's line says what
creating a file cost just before its fan-out.

    python -m bench.scheduler                       # both databases
    python -m bench.scheduler --only sqlite --tasks 1000 --chain 50 --profile /tmp/sched.prof
    python -m bench.scheduler --executor-dir /dev/shm   # attempt directories on a tmpfs
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import itertools
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import sqlalchemy as sa
from psycopg import sql

from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.execution import layout, local, port
from veritask.ledger import dialects, migrate, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import collector, triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

POSTGRES_DSN = "host=127.0.0.1 user=postgres dbname=postgres connect_timeout=3"
DEADLINE_SECONDS = 300.0


@dataclass(frozen=True)
class Figures:
    database: str
    fanout_per_s: float
    fanout_seconds: float
    hop_p50_ms: float
    hop_p99_ms: float
    hop_max_ms: float
    #: CPU per fan-out task: this process (scheduler, submission threads, the bench's polling)
    #: and the local engine (supervisor, workers, the tasks' processes).
    scheduler_cpu_ms: float
    engine_cpu_ms: float
    #: CPU to create one file where the attempt directories are, just before the fan-out.
    file_create_us: float


class _Homes:
    """Temporary homes, all removed when the bench ends (see the module's docstring)."""

    def __init__(self, parent: Path | None) -> None:
        self._parent = parent
        self._made: list[Path] = []

    def new(self) -> Path:
        home = Path(tempfile.mkdtemp(prefix="veritask-bench-", dir=self._parent))
        self._made.append(home)
        return home

    def remove_all(self) -> None:
        # Workers may still be delivering into an outbox while it is removed: no matter.
        for home in self._made:
            shutil.rmtree(home, ignore_errors=True)


# -- definitions ---------------------------------------------------------------------------


def _fanout_yaml(name: str, tasks: int) -> str:
    lines = [f"name: {name}", "concurrency: allow", "tasks:"]
    lines += [f"  t{n:05d}: {{run: 'true'}}" for n in range(tasks)]
    return "\n".join(lines) + "\n"


def _chain_yaml(name: str, tasks: int) -> str:
    lines = [f"name: {name}", "concurrency: allow", "tasks:", "  c000: {run: 'true'}"]
    lines += [f"  c{n:03d}: {{run: 'true', after: [c{n - 1:03d}]}}" for n in range(1, tasks)]
    return "\n".join(lines) + "\n"


# -- the scheduler -------------------------------------------------------------------------


class _Loop:
    """A scheduler ticking in a thread, as ``python -m veritask.scheduling`` does."""

    def __init__(self, scheduler: Scheduler, profile: cProfile.Profile | None) -> None:
        self.scheduler = scheduler
        self.stop = threading.Event()
        self.profile = profile
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.profile is None:
            self.scheduler.run(self.stop)
        else:
            self.profile.runcall(self.scheduler.run, self.stop)

    def __enter__(self) -> _Loop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def _wait_run(ledger: Ledger, run_id: str) -> None:
    """Until the run is no longer RUNNING. The looks are made in the measured process, so each
    is one statement on a DBAPI connection of its own: through SQLAlchemy (a pooled connection,
    a transaction, a compiled select) they cost 0.3 ms of CPU per task of the Celery bench,
    which the figures then charged to Veritask."""
    # The drivers' parameter styles: qmark for sqlite3, format for psycopg.
    marker = "?" if ledger.engine.dialect.paramstyle == "qmark" else "%s"
    query = f"SELECT execution_state FROM runs WHERE id = {marker}"
    connection = ledger.engine.raw_connection()
    give_up_at = time.monotonic() + DEADLINE_SECONDS
    try:
        while True:
            cursor = connection.cursor()
            try:
                cursor.execute(query, (run_id,))
                row = cursor.fetchone()
            finally:
                cursor.close()
            connection.rollback()  # no snapshot held between looks (psycopg opens one)
            if row is None:
                raise LookupError(f"no run {run_id}")
            if RunExecutionState(row[0]) is not RunExecutionState.RUNNING:
                return
            if time.monotonic() > give_up_at:
                raise TimeoutError(f"run {run_id} still RUNNING after {DEADLINE_SECONDS}s")
            time.sleep(0.025)
    finally:
        connection.close()


def _all_success(ledger: Ledger, run_id: str) -> None:
    t = schema.task_instances.c
    with dialects.read_transaction(ledger.engine) as connection:
        states = connection.execute(
            sa.select(t.state, sa.func.count()).where(t.run_id == run_id).group_by(t.state)
        ).all()
    if [s for s, _ in states] != [InstanceState.SUCCESS.value]:
        raise RuntimeError(f"run {run_id} did not succeed everywhere: {states}")


def _cpu_seconds_of_tree(pid: int | None) -> float:
    """User + system CPU of a process, of its live children and of every descendant reaped
    (the supervisor reaps its workers, and each worker its tasks), from /proc: contention on
    the machine does not change it, so it says what one task costs, where wall-clock rates
    only say what one run got. Warm workers live on between attempts: their CPU is counted
    live, and a worker's whole life once it is reaped."""
    if pid is None:
        return 0.0
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if stat.parent.name == str(pid) or fields[1] == str(pid):
                total += sum(int(v) for v in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def _fanout(ledger: Ledger, tasks: int) -> tuple[float, float]:
    name = f"fanout-{uuid.uuid4().hex[:6]}"
    triggers.apply_definition(ledger, _fanout_yaml(name, tasks))
    started = time.perf_counter()
    run = triggers.trigger(ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench")
    _wait_run(ledger, run.run_id)
    elapsed = time.perf_counter() - started
    _all_success(ledger, run.run_id)
    return tasks / elapsed, elapsed


def _chain(ledger: Ledger, tasks: int) -> list[float]:
    name = f"chain-{uuid.uuid4().hex[:6]}"
    triggers.apply_definition(ledger, _chain_yaml(name, tasks))
    run = triggers.trigger(ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench")
    _wait_run(ledger, run.run_id)
    _all_success(ledger, run.run_id)
    e, t = schema.events.c, schema.task_instances.c
    with dialects.read_transaction(ledger.engine) as connection:
        rows = connection.execute(
            sa.select(t.task_key, e.kind, e.to_state, e.observed_at)
            .join(schema.task_instances, t.id == e.instance_id)
            .where(t.run_id == run.run_id, e.outcome == "applied")
        ).all()
    success = {r.task_key: r.observed_at for r in rows if r.to_state == "SUCCESS"}
    started = {r.task_key: r.observed_at for r in rows if r.kind == "started"}
    keys = sorted(success)
    return [
        (started[down] - success[up]).total_seconds()
        for up, down in itertools.pairwise(keys)
        if down in started
    ]


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(database: str, url: str, args: argparse.Namespace, homes: _Homes) -> Figures:
    migrate.upgrade(url)
    engine = dialects.create_engine(url)
    home = homes.new()
    ledger = Ledger(engine)
    executor = local.LocalExecutor(home=home, slots=args.slots)
    executor.ensure_supervisor()

    def scheduler() -> Scheduler:
        return Scheduler(
            ledger,
            executors={"local": executor},
            tokens=AttemptTokens(b"bench-secret-0123456789"),
            outbox=home / "outbox",
            settings=Settings(),
            submit_threads=args.submit_threads,
        )

    profile = cProfile.Profile() if args.profile else None
    try:
        with _Loop(scheduler(), None):
            _fanout(ledger, 20)  # warm up: imports, the supervisor, the page cache
        create_us = _file_cost(home / "file-cost")
        with _Loop(scheduler(), profile):
            own_before = time.process_time()
            engine_before = _cpu_seconds_of_tree(executor.supervisor_pid())
            per_s, seconds = _fanout(ledger, args.tasks)
            own_cpu = (time.process_time() - own_before) / args.tasks
            engine_cpu = (_cpu_seconds_of_tree(executor.supervisor_pid()) - engine_before) / (
                args.tasks
            )
            hops = _chain(ledger, args.chain)
    finally:
        executor.shutdown_supervisor()
        engine.dispose()
    if profile is not None:
        profile.dump_stats(f"{args.profile}.{database}")
    return Figures(
        database,
        per_s,
        seconds,
        statistics.median(hops) * 1000,
        _percentile(hops, 0.99) * 1000,
        max(hops) * 1000,
        own_cpu * 1000,
        engine_cpu * 1000,
        create_us,
    )


# -- baselines -----------------------------------------------------------------------------


def _popen_baseline(count: int, in_flight: int) -> float:
    started = time.perf_counter()
    running: list[subprocess.Popen[bytes]] = []
    for _ in range(count):
        if len(running) >= in_flight:
            running.pop(0).wait()
        running.append(subprocess.Popen(["true"]))
    for process in running:
        process.wait()
    return count / (time.perf_counter() - started)


def _spec(outbox: Path) -> port.AttemptSpec:
    return port.AttemptSpec(
        instance_id=f"bench-{uuid.uuid4().hex[:12]}",
        attempt_no=1,
        attempt_token="bench",
        task=port.ShellCommand("true"),
        callback=port.OutboxCallback(outbox),
    )


def _wait(paths: list[Path]) -> None:
    waiting = list(paths)
    while waiting:
        waiting = [p for p in waiting if not p.exists()]
        if waiting:
            time.sleep(0.001)


@dataclass(frozen=True)
class FileCost:
    #: CPU to create one empty file where the homes are, in microseconds.
    create_us: float
    #: Files and directories the executor creates per attempt of ``true``.
    per_attempt: float


def _file_cost(directory: Path, count: int = 300) -> float:
    """CPU microseconds to create one file in ``directory``. Left in place: deleting them
    would make the next creations dearer on ext4 without a journal, which skips inodes freed
    in the last seconds and scans past them."""
    directory.mkdir()
    began = time.process_time()
    for n in range(count):
        os.close(os.open(directory / f"f{n}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
    return (time.process_time() - began) / count * 1e6


def _inodes_under(directory: Path) -> int:
    """Files and directories, each counted once however many names it has."""
    seen = set()
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            seen.add(os.lstat(os.path.join(root, name)).st_ino)
    return len(seen)


def _executor_baseline(args: argparse.Namespace, homes: _Homes) -> tuple[float, float, FileCost]:
    """Attempts/s of the executor alone, its median submit -> task started in ms, and what
    files cost there."""
    home = homes.new()
    create_us = _file_cost(home / "file-cost")
    outbox = home / "outbox"
    executor = local.LocalExecutor(home=home, slots=args.slots)
    executor.ensure_supervisor()
    try:
        attempts: list[layout.AttemptDir] = []
        specs = [_spec(outbox) for _ in range(args.tasks)]
        started = time.perf_counter()
        for spec in specs:
            executor.submit(spec=spec)
            attempts.append(executor.home.attempt(spec.instance_id, 1))
        _wait([a.exit_record for a in attempts])
        per_s = args.tasks / (time.perf_counter() - started)
        files = FileCost(create_us, _inodes_under(executor.home.attempts) / args.tasks)
        latencies = []
        for _ in range(args.chain):
            spec = _spec(outbox)
            began = time.perf_counter()
            executor.submit(spec=spec)
            _wait([executor.home.attempt(spec.instance_id, 1).task_record])
            latencies.append(time.perf_counter() - began)
            _wait([executor.home.attempt(spec.instance_id, 1).exit_record])
    finally:
        executor.shutdown_supervisor()
    return per_s, statistics.median(latencies) * 1000, files


# -- databases -----------------------------------------------------------------------------


@contextmanager
def _databases(args: argparse.Namespace) -> Iterator[list[tuple[str, str]]]:
    found: list[tuple[str, str]] = []
    pg_name: str | None = None
    with tempfile.TemporaryDirectory(prefix="veritask-bench-db-", dir=args.dir) as tmp:
        if args.only in (None, "sqlite"):
            found.append(("sqlite", f"sqlite:///{Path(tmp) / 'veritask.db'}"))
        if args.only in (None, "postgres"):
            try:
                pg_name = f"vt_bench_{uuid.uuid4().hex[:8]}"
                with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
                    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(pg_name)))
                url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{pg_name}"
                found.append(("postgres", url))
            except psycopg.OperationalError as exc:
                print(f"PostgreSQL skipped: {exc}")
                pg_name = None
        try:
            yield found
        finally:
            if pg_name is not None:
                with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
                    admin.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(pg_name)
                        )
                    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler", description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--chain", type=int, default=50)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--submit-threads", type=int, default=4)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument("--dir", type=Path, default=None, help="where homes go ($TMPDIR)")
    parser.add_argument(
        "--executor-dir",
        type=Path,
        default=None,
        help="where the executor's homes go instead (say a tmpfs; the ledger stays in --dir)",
    )
    parser.add_argument("--profile", default=None, help="write cProfile stats to PATH.<db>")
    args = parser.parse_args(argv)

    popen = _popen_baseline(args.tasks, args.slots)
    collector.tune()  # as a scheduler's process does once it has started
    homes = _Homes(args.executor_dir or args.dir)
    try:
        executor_per_s, executor_start_ms, files = _executor_baseline(args, homes)
        results = []
        with _databases(args) as databases:
            for database, url in databases:
                results.append(measure(database, url, args, homes))
    finally:
        homes.remove_all()

    print(f"scheduler bench: {args.tasks} fan-out tasks, a chain of {args.chain}, ", end="")
    print(f"{args.slots} executor slots, `true` everywhere")
    print(f"baseline plain Popen(['true']), {args.slots} in flight: {popen:8.1f} processes/s")
    print(f"baseline LocalExecutor alone (no ledger):   {executor_per_s:8.1f} attempts/s")
    print(f"baseline LocalExecutor, submit -> task started, median: {executor_start_ms:.1f} ms")
    print(
        "file system of the attempt directories: "
        f"creating a file costs {files.create_us:.0f} us of CPU; "
        f"an attempt creates {files.per_attempt:.1f} files and directories "
        f"(~{files.create_us * files.per_attempt / 1000:.1f} ms of CPU per task)"
    )
    for f in results:
        print(f"-- {f.database} (creating a file cost {f.file_create_us:.0f} us just before)")
        print(
            f"  fan-out: {f.fanout_per_s:8.1f} tasks/s ({f.fanout_seconds:.2f} s)   "
            f"x{f.fanout_per_s / executor_per_s:.2f} of the executor alone, "
            f"x{f.fanout_per_s / popen:.3f} of Popen   (target >= 200/s on SQLite)"
        )
        print(
            f"  CPU per fan-out task: scheduler process {f.scheduler_cpu_ms:5.2f} ms, "
            f"local engine {f.engine_cpu_ms:5.2f} ms  (2 cores: at most "
            f"{2000 / (f.scheduler_cpu_ms + f.engine_cpu_ms):.0f} tasks/s with both busy)"
        )
        print(
            f"  chain hop SUCCESS -> next RUNNING: p50 {f.hop_p50_ms:6.1f} ms  "
            f"p99 {f.hop_p99_ms:6.1f} ms  max {f.hop_max_ms:6.1f} ms   "
            f"x{f.hop_p50_ms / executor_start_ms:.2f} of the executor's own start   "
            "(target p50 <= 20 ms)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

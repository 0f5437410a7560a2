"""Two schedulers beside one on PostgreSQL: how much the share divides (``make bench``).

One workload, ``--runs`` runs of ``--tasks`` independent ``true`` tasks each (the runs are the
unit of sharing), is run by one ``python -m veritask.scheduling`` process and then by two on
the same database and the same home (one local executor, one outbox), each time on a fresh
database, ``--rounds`` times alternated; the medians are printed with the ratio two/one.

For each: tasks per second from the first trigger until every run is durably SUCCESS, and
the CPU per task, split by who spent it, read from /proc (user + system, reaped children
included): the scheduler processes, PostgreSQL (the postmaster's tree: every backend, live or
exited), the local engine (supervisor, workers and the tasks' own processes), and the share
of the machine's cores that was busy. Two schedulers can do twice the work of one only where
one scheduler is what bounds the rate; the split says what does.

    python -m bench.schedulers
    python -m bench.schedulers --runs 20 --tasks 100 --rounds 3 --slots 8
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from bench import scheduler as scheduler_bench
from veritask.core.states import RunExecutionState, TriggerKind
from veritask.execution import local
from veritask.ledger import dialects, migrate, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers

START_SECONDS = 60.0
DEADLINE_SECONDS = 300.0
SECRET = "bench-schedulers-secret-0123456789"
#: How long the schedulers' CPU is read while they have nothing to do.
IDLE_SECONDS = 3.0


@dataclass(frozen=True)
class Figures:
    schedulers: int
    per_s: float
    seconds: float
    #: CPU per task, in ms: the scheduler processes together, and each of them.
    scheduler_cpu_ms: float
    each_scheduler_ms: tuple[float, ...]
    postgres_cpu_ms: float
    engine_cpu_ms: float
    #: The machine's cores busy over the measurement (1.0: every core all the time).
    busy: float
    #: What one scheduler process spends with nothing to do, as a share of one core.
    idle_share: float


def _ticks(pid: int) -> float:
    """User + system CPU seconds of a process and of its children it reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of every core since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    total = sum(values[:8])
    hz = os.sysconf("SC_CLK_TCK")
    return (total - idle) / hz, total / hz


def _postmaster_pid(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        backend = int(connection.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
    return int(Path(f"/proc/{backend}/stat").read_text().rpartition(")")[2].split()[1])


@contextlib.contextmanager
def _schedulers(
    count: int, home: Path, url: str, slots: int
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` scheduler processes on ``url`` and ``home``, each sharing the work with the
    others before it is handed over; stopped with SIGTERM after."""
    env = {**os.environ, "VERITASK_SECRET": SECRET}
    logs = [home / f"scheduler-{n}.log" for n in range(count)]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for log in logs:
            with open(log, "ab") as output:
                processes.append(
                    subprocess.Popen(
                        [
                            *(sys.executable, "-m", "veritask.scheduling", "--home", str(home)),
                            *("--url", url, "--slots", str(slots), "--no-migrate"),
                        ],
                        stdin=subprocess.DEVNULL,
                        stdout=output,
                        stderr=output,
                        env=env,
                    )
                )
        give_up = time.monotonic() + START_SECONDS
        ready = f"sharing work with {count} schedulers" if count > 1 else "recovery done"
        while not all(ready in log.read_text() for log in logs):
            if any(p.poll() is not None for p in processes):
                raise RuntimeError(f"a scheduler exited: see {home}")
            if time.monotonic() > give_up:
                raise TimeoutError(f"the schedulers did not start in {START_SECONDS:g}s")
            time.sleep(0.05)
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_settled(ledger: Ledger, run_ids: list[str]) -> None:
    for run_id in run_ids:
        scheduler_bench._wait_run(ledger, run_id)
    r = schema.runs.c
    with dialects.read_transaction(ledger.engine) as connection:
        states = connection.execute(sa.select(r.execution_state).where(r.id.in_(run_ids))).scalars()
        ended = [RunExecutionState(s) for s in states]
    if ended != [RunExecutionState.SUCCESS] * len(run_ids):
        raise RuntimeError(f"runs did not all succeed: {ended}")
    for run_id in run_ids:
        scheduler_bench._all_success(ledger, run_id)


def _trigger(ledger: Ledger, name: str, runs: int) -> list[str]:
    return [
        triggers.trigger(ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench").run_id
        for _ in range(runs)
    ]


def measure(count: int, url: str, args: argparse.Namespace) -> Figures:
    migrate.upgrade(url)
    engine = dialects.create_engine(url)
    ledger = Ledger(engine)
    postmaster = _postmaster_pid(engine)
    with tempfile.TemporaryDirectory(prefix="veritask-bench-schedulers-", dir=args.dir) as tmp:
        home = Path(tmp)
        executor = local.LocalExecutor(home=home, slots=args.slots)
        supervisor = executor.ensure_supervisor()
        try:
            triggers.apply_definition(ledger, scheduler_bench._fanout_yaml("warmup", 20))
            name = f"spread-{uuid.uuid4().hex[:6]}"
            triggers.apply_definition(ledger, scheduler_bench._fanout_yaml(name, args.tasks))
            with _schedulers(count, home, url, args.slots) as processes:
                # Warm up: imports, the supervisor's workers, the page cache, every scheduler.
                _wait_settled(ledger, _trigger(ledger, "warmup", 2 * count))
                idle_before = [_ticks(p.pid) for p in processes]
                time.sleep(IDLE_SECONDS)
                idle = [
                    (_ticks(p.pid) - b) / IDLE_SECONDS
                    for p, b in zip(processes, idle_before, strict=True)
                ]
                mine_before = [_ticks(p.pid) for p in processes]
                pg_before = scheduler_bench._cpu_seconds_of_tree(postmaster)
                engine_before = scheduler_bench._cpu_seconds_of_tree(supervisor)
                busy_before, total_before = _machine()
                started = time.perf_counter()
                _wait_settled(ledger, _trigger(ledger, name, args.runs))
                seconds = time.perf_counter() - started
                busy_after, total_after = _machine()
                each = [_ticks(p.pid) - b for p, b in zip(processes, mine_before, strict=True)]
                pg = scheduler_bench._cpu_seconds_of_tree(postmaster) - pg_before
                eng = scheduler_bench._cpu_seconds_of_tree(supervisor) - engine_before
        finally:
            executor.shutdown_supervisor()
            engine.dispose()
    tasks = args.runs * args.tasks
    return Figures(
        count,
        tasks / seconds,
        seconds,
        sum(each) / tasks * 1000,
        tuple(e / tasks * 1000 for e in each),
        pg / tasks * 1000,
        eng / tasks * 1000,
        (busy_after - busy_before) / (total_after - total_before),
        statistics.mean(idle),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.schedulers", description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=100, help="tasks per run")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="(one, two) pairs alternated")
    parser.add_argument("--dir", type=Path, default=None, help="where homes go ($TMPDIR)")
    args = parser.parse_args(argv)

    measured: dict[int, list[Figures]] = {1: [], 2: []}
    for round_no in range(args.rounds):
        for count in (1, 2):
            with scheduler_bench._databases(
                argparse.Namespace(only="postgres", dir=args.dir)
            ) as found:
                if not found:
                    print("PostgreSQL is not reachable: nothing measured")
                    return 0
                measured[count].append(measure(count, found[0][1], args))
        print(f"round {round_no + 1} of {args.rounds} done", file=sys.stderr)

    print(
        f"schedulers bench: PostgreSQL, {args.runs} runs x {args.tasks} `true` tasks, "
        f"{args.slots} executor slots, one home; {os.cpu_count()} cores; "
        f"{args.rounds} alternated pairs (medians, range)"
    )
    rates: dict[int, float] = {}
    for count, figures in measured.items():
        rates[count] = statistics.median(f.per_s for f in figures)
        sched = statistics.median(f.scheduler_cpu_ms for f in figures)
        pg = statistics.median(f.postgres_cpu_ms for f in figures)
        eng = statistics.median(f.engine_cpu_ms for f in figures)
        busy = statistics.median(f.busy for f in figures)
        each = " + ".join(
            f"{statistics.median(f.each_scheduler_ms[n] for f in figures):.2f}"
            for n in range(count)
        )
        print(f"-- {count} scheduler{'s' if count > 1 else ''}")
        print(
            f"  {rates[count]:7.1f} tasks/s ({_spread([f.per_s for f in figures])}), "
            f"{statistics.median(f.seconds for f in figures):.2f} s"
        )
        print(
            f"  CPU per task: schedulers {sched:5.2f} ms ({each}), PostgreSQL {pg:5.2f} ms, "
            f"engine and tasks {eng:5.2f} ms; total {sched + pg + eng:5.2f} ms "
            f"(the cores can do {1000 * (os.cpu_count() or 1) / (sched + pg + eng):.0f} tasks/s "
            f"at that cost); cores busy {busy:.0%}"
        )
        idle = statistics.median(f.idle_share for f in figures)
        print(
            f"  a scheduler process with nothing to do: {idle:.0%} of a core, "
            f"{idle * 1000 / rates[count]:.2f} ms per task at this rate, each"
        )

    def ratio(field: str) -> float:
        def median(count: int) -> float:
            return float(statistics.median(getattr(f, field) for f in measured[count]))

        return median(2) / median(1)

    print(
        f"two / one: x{rates[2] / rates[1]:.2f} tasks/s   (ideal x2.00); CPU per task: "
        f"schedulers x{ratio('scheduler_cpu_ms'):.2f}, PostgreSQL x{ratio('postgres_cpu_ms'):.2f}, "
        f"engine and tasks x{ratio('engine_cpu_ms'):.2f}"
    )
    busy_one = statistics.median(f.busy for f in measured[1])
    if busy_one >= 0.9:
        print(
            f"  with one scheduler the cores were already {busy_one:.0%} busy: the machine, "
            "not the scheduler, bounds the rate; a second scheduler can only add its own cost"
        )
    return 0


def _spread(values: Sequence[float]) -> str:
    return "–".join(f"{v:.1f}" for v in (min(values), max(values))) if values else "none"


if __name__ == "__main__":
    raise SystemExit(main())

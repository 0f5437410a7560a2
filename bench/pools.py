"""Whether a pool stays full while work waits for it: ``make bench`` (never a test).

One run of ``--tasks`` independent tasks ``true`` in a pool of ``--slots`` slots, with the
real scheduler (in a thread, as ``python -m veritask.scheduling`` runs it) and the local
executor (as many slots as the pool, so the pool is what limits). A sampler with its own
connection reads, every ``--every`` seconds while tasks are still waiting for the pool, the
pool's attempts by state. It prints:

- **held**: the mean of the pool's slots held (attempts SCHEDULED, QUEUED, RUNNING) over the
  slots: 1.00 means that no slot was ever free while a task waited;
- **running**: the same for attempts the worker reported RUNNING (a ``true`` task runs for a
  millisecond: most of a slot's life is its opening, submission and report; ``--sleep``
  gives the tasks real work);
- the share of samples with every slot held, and the run time from trigger to the last
  SUCCESS.

    python -m bench.pools
    python -m bench.pools --tasks 1000 --slots 8 --only postgres --sleep 0.05
"""

from __future__ import annotations

import argparse
import cProfile
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import sqlalchemy as sa
from psycopg import sql

from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.execution import local
from veritask.ledger import dialects, migrate, pools, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

POSTGRES_DSN = "host=127.0.0.1 user=postgres dbname=postgres connect_timeout=3"
POOL = "bench"
_HELD = ("SCHEDULED", "QUEUED", "RUNNING")


@dataclass
class Samples:
    held: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds each task sleeps")
    parser.add_argument("--every", type=float, default=0.01, help="seconds between samples")
    parser.add_argument("--only", choices=["sqlite", "postgres"], default=None)
    parser.add_argument("--profile", default=None, help="write the scheduler's cProfile here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        if args.only in (None, "sqlite"):
            measure("sqlite", f"sqlite:///{root / 'bench.db'}", root / "sqlite", args)
        if args.only in (None, "postgres"):
            with _postgres() as url:
                if url is None:
                    print("postgres: not reachable at 127.0.0.1:5432, skipped")
                else:
                    measure("postgres", url, root / "postgres", args)


def measure(database: str, url: str, home: Path, args: argparse.Namespace) -> None:
    migrate.upgrade(url)
    engine = dialects.create_engine(url)
    ledger = Ledger(engine)
    executor = local.LocalExecutor(home=home, slots=args.slots)
    executor.ensure_supervisor()
    work = "true" if args.sleep <= 0 else f"sleep {args.sleep:g}"
    lines = ["name: pooled", "concurrency: allow", "tasks:"]
    lines += [f"  t{n:05d}: {{run: '{work}', pool: {POOL}}}" for n in range(args.tasks)]
    triggers.apply_definition(ledger, "\n".join(lines) + "\n")
    with engine.begin() as connection:
        pools.set_pool(connection, name=POOL, slots=args.slots, actor="bench", now=ledger.clock())
    scheduler = Scheduler(
        ledger,
        executors={"local": executor},
        tokens=AttemptTokens(b"bench-secret-0123456789"),
        outbox=home / "outbox",
        settings=Settings(),
    )
    stop = threading.Event()
    profile = cProfile.Profile() if args.profile else None

    def run() -> None:
        if profile is None:
            scheduler.run(stop)
        else:
            profile.runcall(scheduler.run, stop)

    loop = threading.Thread(target=run, daemon=True)
    loop.start()
    try:
        began = time.perf_counter()
        run_id = triggers.trigger(
            ledger, name="pooled", kind=TriggerKind.MANUAL, actor="bench"
        ).run_id
        samples = _sample(url, run_id, args.every)
        _wait_run(ledger, run_id)
        seconds = time.perf_counter() - began
    finally:
        stop.set()
        loop.join(timeout=30)
        if profile is not None:
            profile.dump_stats(f"{args.profile}.{database}")
        executor.shutdown_supervisor()
        engine.dispose()
    slots = args.slots
    held = statistics.fmean(samples.held) / slots if samples.held else 0.0
    running = statistics.fmean(samples.running) / slots if samples.running else 0.0
    full = sum(h == slots for h in samples.held) / max(1, len(samples.held))
    most = max(samples.held, default=0)
    print(
        f"{database}: pool of {slots}, {args.tasks} x {work!r}: held {held:.3f}, "
        f"running {running:.3f}, every slot held in {full:.1%} of {len(samples.held)} "
        f"samples (most held at once: {most}); run time {seconds:.1f} s "
        f"({args.tasks / seconds:.0f} tasks/s)"
    )


def _sample(url: str, run_id: str, every: float) -> Samples:
    """Sample the pool while tasks of the run still wait for it (CREATED)."""
    samples = Samples()
    engine = dialects.create_engine(url)
    a, i = schema.attempts.c, schema.task_instances.c
    by_state = (
        sa.select(a.state, sa.func.count())
        .where(a.pool == POOL, a.state.in_(_HELD))
        .group_by(a.state)
    )
    waiting = sa.select(sa.func.count()).where(
        i.run_id == run_id, i.state == InstanceState.CREATED.value
    )
    started = False
    try:
        while True:
            with dialects.read_transaction(engine) as connection:
                counts = {str(s): int(n) for s, n in connection.execute(by_state)}
                left = connection.execute(waiting).scalar_one()
            held = sum(counts.values())
            started = started or held > 0
            if started and left == 0:
                return samples
            if started:
                samples.held.append(held)
                samples.running.append(counts.get("RUNNING", 0))
            time.sleep(every)
    finally:
        engine.dispose()


def _wait_run(ledger: Ledger, run_id: str) -> None:
    r = schema.runs.c
    give_up = time.monotonic() + 600
    while time.monotonic() < give_up:
        with dialects.read_transaction(ledger.engine) as connection:
            state = connection.execute(
                sa.select(r.execution_state).where(r.id == run_id)
            ).scalar_one()
        if state != RunExecutionState.RUNNING.value:
            return
        time.sleep(0.05)
    raise TimeoutError(f"run {run_id} did not finish")


@contextmanager
def _postgres() -> Iterator[str | None]:
    name = f"veritask_bench_pools_{int(time.time())}"
    try:
        admin = psycopg.connect(POSTGRES_DSN, autocommit=True)
    except psycopg.OperationalError:
        yield None
        return
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
        finally:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    main()

"""``apply()`` throughput beside the raw baseline, on SQLite and PostgreSQL: ``make bench``.

For each database: events per second through ``Ledger.apply`` with 1 and 8 writers (each
writer heartbeats its own RUNNING attempt, so the worker's token is checked and the fold runs
on every event), the raw baseline with the same driver (INSERT one event row + one
compare-and-set UPDATE per transaction), their ratio, the batch path, and the single-writer
rate again once the events table holds ``--rows`` old events (10 million by default).

    python -m bench.ledger                 # both databases, 10 million rows
    python -m bench.ledger --rows 1000000 --seconds 3 --only sqlite
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import Engine

from bench import ledger_baseline
from veritask import ids
from veritask.core import judge
from veritask.core.events import Event, EventKind
from veritask.core.policy import TaskPolicy
from veritask.ledger import dialects, migrate
from veritask.ledger.ledger import Ledger

POSTGRES_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
_ids = itertools.count()


def _event_id() -> str:
    return ids.time_ordered_id()  # as the platform's senders make them


def _running_instances(ledger: Ledger, count: int) -> list[str]:
    """``count`` instances whose attempt 1 is RUNNING, ready for heartbeats."""
    run_id = ledger_baseline._run_of(
        ledger.engine, ledger_baseline._bench_instances(ledger.engine, 1)[0]
    )
    now = datetime.now(UTC)
    instance_ids = []
    for n in range(count):
        instance_id, _ = ledger.create_instance(
            run_id=run_id,
            task_key=f"hb-{next(_ids)}-{n}",
            policy=TaskPolicy(),
            event_id=_event_id(),
        )
        opened = Event(
            _event_id(),
            instance_id,
            1,
            EventKind.ATTEMPT_OPENED,
            "scheduler",
            now,
            {
                "token_hash": judge.hash_token(instance_id),
                "reason": "first",
                "retry_index": 0,
                "resubmit_index": 0,
            },
        )
        ledger.apply(opened)
        instance_ids.append(instance_id)
    return instance_ids


#: Heartbeats' event times, one second apart from here: the ledger records at most one
#: heartbeat a second per attempt (``core.reports``), whatever the rate they arrive at.
_BEATS_FROM = datetime.now(UTC) - timedelta(days=30)


def _heartbeat(instance_id: str, seq: int) -> Event:
    return Event(
        _event_id(),
        instance_id,
        1,
        EventKind.HEARTBEAT if seq > 1 else EventKind.STARTED,
        "worker",
        _BEATS_FROM + timedelta(seconds=seq),
        {} if seq > 1 else {"worker": "bench:1"},
        seq=seq,
        attempt_token=instance_id,
    )


def apply_rate(engine: Engine, *, writers: int, seconds: float) -> float:
    """Events per second through ``Ledger.apply``, one event per transaction."""
    ledger = Ledger(engine)
    instance_ids = _running_instances(ledger, writers)
    counts = [0] * writers
    start = threading.Barrier(writers + 1)
    deadline = [0.0]
    failures: list[BaseException] = []

    def write(slot: int) -> None:
        try:
            start.wait()
            seq = 0
            while time.perf_counter() < deadline[0]:
                seq += 1
                result = ledger.apply(_heartbeat(instance_ids[slot], seq))
                if result.outcome is not judge.Outcome.APPLIED:
                    raise RuntimeError(f"heartbeat {seq} was {result.outcome}: {result.reason}")
                counts[slot] += 1
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(slot,)) for slot in range(writers)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return sum(counts) / (time.perf_counter() - began)


def batch_rate(engine: Engine, *, seconds: float, batch: int = 200, instances: int = 20) -> float:
    """Events per second through ``apply_batch``, ``batch`` heartbeats per transaction."""
    ledger = Ledger(engine)
    instance_ids = _running_instances(ledger, instances)
    seqs = dict.fromkeys(instance_ids, 0)
    done = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        events = []
        for n in range(batch):
            instance_id = instance_ids[n % instances]
            seqs[instance_id] += 1
            events.append(_heartbeat(instance_id, seqs[instance_id]))
        results = ledger.apply_batch(events)
        if any(r.outcome is not judge.Outcome.APPLIED for r in results):
            raise RuntimeError("a batched heartbeat was not applied")
        done += len(events)
    return done / (time.perf_counter() - began)


def _measure(name: str, engine: Engine, *, seconds: float, rows: int) -> list[str]:
    lines = [f"== {name}"]
    empty_single = 0.0
    for writers in (1, 8):
        applied = apply_rate(engine, writers=writers, seconds=seconds)
        raw = ledger_baseline.raw_baseline(engine, writers=writers, seconds=seconds)
        if writers == 1:
            empty_single = applied
        lines.append(
            f"apply() {writers} writer(s): {applied:8.0f} ev/s   raw baseline: {raw:8.0f} ev/s"
            f"   ratio {applied / raw:.2f}  (target >= 0.50)"
        )
    batched = batch_rate(engine, seconds=seconds)
    lines.append(
        f"apply_batch (200/tx):   {batched:8.0f} ev/s   ({batched / empty_single:.1f}x apply)"
    )
    if rows:
        began = time.perf_counter()
        ledger_baseline.seed_events(engine, rows)
        _settle_after_bulk_load(engine)
        lines.append(f"seeded {rows:,} old events in {time.perf_counter() - began:.0f} s")
        full = apply_rate(engine, writers=1, seconds=seconds)
        raw_full = ledger_baseline.raw_baseline(engine, writers=1, seconds=seconds)
        slower = 1 - full / empty_single
        lines.append(
            f"apply() 1 writer with {rows:,} rows: {full:8.0f} ev/s   empty: {empty_single:.0f}"
            f"   {slower:+.0%} slower  (target <= 20%)   raw baseline now: {raw_full:.0f} ev/s"
            f"   ratio {full / raw_full:.2f}"
        )
    return lines


def _settle_after_bulk_load(engine: Engine) -> None:
    """Let the database absorb the synthetic bulk load before the steady state is measured.

    The seed writes millions of rows in minutes; what follows is the checkpoint and fresh
    statistics a database that grew to this size over months would already have had.
    """
    if engine.dialect.name == "sqlite":
        # Outside SQLAlchemy's transaction hook: a checkpoint cannot run inside BEGIN.
        pooled = engine.raw_connection()
        try:
            pooled.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[union-attr]
        finally:
            pooled.close()
        return
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT")
        connection.exec_driver_sql("CHECKPOINT")
        connection.exec_driver_sql("ANALYZE events")


def _postgres_database() -> tuple[str, str]:
    name = f"veritask_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name, POSTGRES_ADMIN.rsplit("/", 1)[0] + f"/{name}"


def _drop_postgres(name: str) -> None:
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as admin:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        admin.execute(statement.format(sql.Identifier(name)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    args = parser.parse_args(argv)
    report: list[str] = []
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{Path(folder) / 'bench.db'}"
            migrate.upgrade(url)
            engine = dialects.create_engine(url)
            try:
                report += _measure("SQLite", engine, seconds=args.seconds, rows=args.rows)
            finally:
                engine.dispose()
    if args.only in (None, "postgres"):
        name, url = _postgres_database()
        try:
            migrate.upgrade(url)
            engine = dialects.create_engine(url)
            try:
                report += _measure("PostgreSQL", engine, seconds=args.seconds, rows=args.rows)
            finally:
                engine.dispose()
        finally:
            _drop_postgres(name)
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

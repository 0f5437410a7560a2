"""The raw baseline that ``apply()`` is measured against, and a fast loader of old events.

The baseline is what one event costs with no ledger logic at all, through the same engine and
driver: per transaction, INSERT one event row and compare-and-set one instance snapshot
(``UPDATE … SET …, version = version + 1 WHERE id = :id AND version = :expected``). Each
writer thread owns one instance, so the figure is the database's, not contention's.

``seed_events`` bulk-loads synthetic events (COPY on PostgreSQL, big executemany
transactions on SQLite) for the "10 million rows already in the table" measurement.

    python -m bench.ledger_baseline --url postgresql://postgres@127.0.0.1/bench --seed 10000000
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from veritask import ids
from veritask.core import states
from veritask.ledger import definitions, dialects, migrate, runs, schema, vocabulary

#: Rows per transaction (SQLite) or per COPY (PostgreSQL) when seeding.
SEED_BATCH: Final = 100_000
#: How densely the seed's old events sit in time (their ids carry the millisecond).
SEED_EVENTS_PER_MS: Final = 4
#: Synthetic shape of the seeded history: events per instance, instances per run.
EVENTS_PER_INSTANCE: Final = 10
INSTANCES_PER_RUN: Final = 10
EVIDENCE: Final = {"pid": 4242, "host": "worker-7", "phase": "copying", "done": 10, "total": 99}

SEED_COLUMNS: Final = (
    "event_id",
    "subject_type",
    "subject_id",
    "run_id",
    "instance_id",
    "attempt_no",
    "kind",
    "actor",
    "event_time",
    "observed_at",
    "evidence",
    "outcome",
    "fingerprint",
)


def _bench_instances(engine: Engine, count: int) -> list[str]:
    """A definition, a run and ``count`` instances that the writers will update."""
    now = datetime.now(UTC)
    tag = uuid.uuid4().hex[:12]
    with engine.begin() as connection:
        definition_id, version, _ = definitions.save_definition_version(
            connection,
            name=f"bench-{tag}",
            spec={"name": f"bench-{tag}"},
            source="",
            content_hash=tag,
            now=now,
        )
        run_id, _ = runs.create_run(
            connection,
            idempotency_key=f"bench-{tag}",
            definition_id=definition_id,
            definition_version=version,
            trigger_kind=states.TriggerKind.API,
            execution_state=states.RunExecutionState.RUNNING,
            publication_state=states.PublicationState.NOT_REQUIRED,
            created_at=now,
        )
        return [
            runs.create_instance(
                connection,
                run_id=run_id,
                task_key=f"task-{n}",
                state=states.InstanceState.RUNNING,
                policy={},
            )[0]
            for n in range(count)
        ]


def raw_baseline(engine: Engine, *, writers: int, seconds: float) -> float:
    """Events per second of INSERT event + compare-and-set UPDATE, one per transaction."""
    instance_ids = _bench_instances(engine, writers)
    run_id = _run_of(engine, instance_ids[0])
    insert_event = schema.events.insert()
    instances = schema.task_instances
    update_instance = (
        instances.update()
        .where(instances.c.id == sa.bindparam("b_id"), instances.c.version == sa.bindparam("b_v"))
        .values(
            state=sa.bindparam("b_state"),
            fold=sa.bindparam("b_fold", type_=instances.c.fold.type),
            updated_observed_at=sa.bindparam("b_at", type_=instances.c.updated_observed_at.type),
            version=instances.c.version + 1,
        )
    )
    counts = [0] * writers
    failures: list[BaseException] = []
    start = threading.Barrier(writers + 1)
    deadline = [0.0]

    def write(slot: int) -> None:
        instance_id = instance_ids[slot]
        version = 0
        try:
            start.wait()
            while time.perf_counter() < deadline[0]:
                now = datetime.now(UTC)
                with engine.begin() as connection:
                    connection.execute(insert_event, _event_row(run_id, instance_id, now))
                    updated = connection.execute(
                        update_instance,
                        {
                            "b_id": instance_id,
                            "b_v": version,
                            "b_state": "RUNNING",
                            "b_fold": {"epoch": 1, "last_heartbeat": now.isoformat()},
                            "b_at": now,
                        },
                    )
                    if updated.rowcount != 1:
                        raise RuntimeError(f"compare-and-set lost on {instance_id}")
                version += 1
                counts[slot] += 1
        except BaseException as exc:  # reported by the caller
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(slot,)) for slot in range(writers)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise failures[0]
    return sum(counts) / elapsed


def _run_of(engine: Engine, instance_id: str) -> str:
    with engine.connect() as connection:
        run_id = connection.execute(
            sa.select(schema.task_instances.c.run_id).where(
                schema.task_instances.c.id == instance_id
            )
        ).scalar_one()
    return str(run_id)


def _event_row(run_id: str, instance_id: str, now: datetime) -> dict[str, object]:
    event_id = ids.time_ordered_id()
    return {
        "event_id": event_id,
        "subject_type": vocabulary.SubjectType.INSTANCE.value,
        "subject_id": instance_id,
        "run_id": run_id,
        "instance_id": instance_id,
        "attempt_no": 1,
        "kind": "heartbeat",
        "actor": "worker",
        "seq": 1,
        "from_state": "RUNNING",
        "to_state": "RUNNING",
        "event_time": now,
        "observed_at": now,
        "evidence": EVIDENCE,
        "outcome": vocabulary.EventOutcome.APPLIED.value,
        "reason": None,
        "fingerprint": event_id.replace("-", "") * 2,
    }


def _seed_rows(first: int, count: int, tag: str, when: datetime) -> Iterator[tuple[object, ...]]:
    """Synthetic events with the platform's ids (time-ordered, as if sent a few per
    millisecond from ``when`` on), grouped by instance and run."""
    evidence = json.dumps(EVIDENCE)
    start_ms = int(when.timestamp() * 1000)
    for offset in range(count):
        n = first + offset
        instance_id = f"{tag}-i{n // EVENTS_PER_INSTANCE}"
        event_id = ids.time_ordered_id(unix_ms=start_ms + n // SEED_EVENTS_PER_MS)
        yield (
            event_id,
            vocabulary.SubjectType.INSTANCE.value,
            instance_id,
            f"{tag}-r{n // (EVENTS_PER_INSTANCE * INSTANCES_PER_RUN)}",
            instance_id,
            1,
            "heartbeat",
            "worker",
            when,
            when,
            evidence,
            vocabulary.EventOutcome.APPLIED.value,
            event_id.replace("-", "") * 2,
        )


def seed_events(engine: Engine, n: int) -> float:
    """Append ``n`` synthetic event rows as fast as the database takes them; return seconds."""
    tag = uuid.uuid4().hex[:8]
    when = datetime.now(UTC) - timedelta(days=30)
    began = time.perf_counter()
    if engine.dialect.name == "postgresql":
        _seed_postgres(engine, n, tag, when)
    else:
        _seed_sqlite(engine, n, tag, when)
    return time.perf_counter() - began


def _seed_postgres(engine: Engine, n: int, tag: str, when: datetime) -> None:
    copy_sql = f"COPY events ({', '.join(SEED_COLUMNS)}) FROM STDIN"
    pooled = engine.raw_connection()
    try:
        driver = pooled.driver_connection
        if not isinstance(driver, psycopg.Connection):
            raise TypeError("seeding PostgreSQL needs the psycopg driver")
        for first in range(0, n, SEED_BATCH):
            with driver.cursor() as cursor, cursor.copy(copy_sql) as copy:
                for row in _seed_rows(first, min(SEED_BATCH, n - first), tag, when):
                    copy.write_row(row)
            driver.commit()
    finally:
        pooled.close()


def _seed_sqlite(engine: Engine, n: int, tag: str, when: datetime) -> None:
    insert_sql = (
        f"INSERT INTO events ({', '.join(SEED_COLUMNS)}) "
        f"VALUES ({', '.join('?' for _ in SEED_COLUMNS)})"
    )
    stored_when = when.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
    pooled = engine.raw_connection()
    try:
        driver = pooled.driver_connection
        if not isinstance(driver, sqlite3.Connection):
            raise TypeError("seeding SQLite needs the sqlite3 driver")
        # A bulk load may trade durability for speed: a crash loses only synthetic rows.
        driver.execute("PRAGMA synchronous = OFF")
        driver.execute("PRAGMA cache_size = -262144")
        try:
            for first in range(0, n, SEED_BATCH):
                rows = [
                    (*row[:8], stored_when, stored_when, *row[10:])
                    for row in _seed_rows(first, min(SEED_BATCH, n - first), tag, when)
                ]
                driver.execute("BEGIN IMMEDIATE")
                driver.executemany(insert_sql, rows)
                driver.execute("COMMIT")
        finally:
            driver.execute("PRAGMA synchronous = NORMAL")
    finally:
        pooled.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the raw baseline (and optionally seed first) on the database at ``--url``."""
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_baseline")
    parser.add_argument("--url", default=dialects.default_database_url())
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0, help="events to load before measuring")
    arguments = parser.parse_args(argv)
    migrate.upgrade(arguments.url)
    engine = dialects.create_engine(arguments.url)
    try:
        if arguments.seed:
            elapsed = seed_events(engine, arguments.seed)
            rate = arguments.seed / elapsed
            print(f"seeded {arguments.seed:,} events in {elapsed:.1f} s ({rate:,.0f}/s)")
        for writers in arguments.writers:
            rate = raw_baseline(engine, writers=writers, seconds=arguments.seconds)
            print(f"raw baseline, {writers} writer(s): {rate:,.0f} events/s")
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

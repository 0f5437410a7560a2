"""What one task costs the ledger on disk: ``python -m bench.ledger_size``.

Runs of ``--tasks`` independent tasks ``true`` (one attempt each, all SUCCESS) go through
the real Scheduler and LocalExecutor, as in ``bench.scheduler``, one after another (``--runs``,
default 2). The ledger is measured just before each trigger (the definition is applied
already: it is paid once, not per run) and again once the run has finished; the difference,
divided by the tasks, is the figure, broken down by table and index so that the reader sees
where the bytes go. The last run's is the figure: the first run into an empty ledger also
pays for the pages that the snapshots' updates leave free, which the next runs fill (the
first's total is printed beside it).

- SQLite: the pages each table and index holds, from the ``dbstat`` virtual table, after a
  ``wal_checkpoint(TRUNCATE)`` (no VACUUM: the file as it is in use). Pages are 4 KiB and
  filled as the B-trees fill them, so a page's free space counts. The file's own size is
  printed beside the sum.
- PostgreSQL: ``pg_total_relation_size`` per table (heap, indexes, TOAST, free-space and
  visibility maps) and ``pg_relation_size`` per index, after a plain ``VACUUM`` (which frees
  the dead tuples that the snapshots' updates leave for autovacuum to reclaim anyway, and
  never shrinks a file).

    python -m bench.ledger_size                    # both databases, 1,000 tasks
    python -m bench.ledger_size --only sqlite --tasks 200
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg
import sqlalchemy as sa

from bench import scheduler as scheduler_bench
from veritask.core.states import TriggerKind
from veritask.execution import local
from veritask.ledger import dialects, migrate
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

#: The target: what a no-op task may cost the ledger, on each database.
TARGET_BYTES_PER_TASK: Final = 2048


@dataclass(frozen=True)
class Relation:
    table: str
    #: The relation itself: the table, one of its indexes, or its TOAST.
    name: str
    size: int


@dataclass(frozen=True)
class Figures:
    database: str
    tasks: int
    #: Bytes per relation, the difference between after and before the run.
    grown: list[Relation]
    #: How the total was measured, for the printout.
    method: str
    #: SQLite: the file's growth, beside the pages' sum.
    file_grown: int | None

    @property
    def total(self) -> int:
        return sum(r.size for r in self.grown)

    @property
    def per_task(self) -> float:
        return self.total / self.tasks


def _sqlite_sizes(path: Path) -> tuple[dict[tuple[str, str], int], int]:
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = connection.execute(
            "SELECT s.name, coalesce(m.tbl_name, s.name), sum(s.pgsize) "
            "FROM dbstat AS s LEFT JOIN sqlite_schema AS m ON m.name = s.name "
            "GROUP BY s.name"
        ).fetchall()
    finally:
        connection.close()
    return {(table, name): size for name, table, size in rows}, path.stat().st_size


def _postgres_sizes(url: str) -> dict[tuple[str, str], int]:
    dsn = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM")
        sizes: dict[tuple[str, str], int] = {}
        tables = connection.execute(
            "SELECT c.oid, c.relname, c.reltoastrelid FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r'"
        ).fetchall()
        for oid, table, toast in tables:
            heap = connection.execute(
                "SELECT pg_relation_size(%s, 'main') + pg_relation_size(%s, 'fsm') "
                "+ pg_relation_size(%s, 'vm')",
                (oid, oid, oid),
            ).fetchone()
            sizes[(table, table)] = heap[0] if heap else 0
            if toast:
                toasted = connection.execute(
                    "SELECT pg_total_relation_size(%s)", (toast,)
                ).fetchone()
                sizes[(table, f"{table} (TOAST)")] = toasted[0] if toasted else 0
            for index, size in connection.execute(
                "SELECT i.relname, pg_relation_size(i.oid) FROM pg_index x "
                "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = %s",
                (oid,),
            ).fetchall():
                sizes[(table, index)] = size
            total = connection.execute("SELECT pg_total_relation_size(%s)", (oid,)).fetchone()
            counted = sum(v for (t, _), v in sizes.items() if t == table)
            if total and total[0] != counted:
                sizes[(table, f"{table} (other forks)")] = total[0] - counted
    return sizes


def _grown(before: dict[tuple[str, str], int], after: dict[tuple[str, str], int]) -> list[Relation]:
    grown = [
        Relation(table, name, after[(table, name)] - before.get((table, name), 0))
        for table, name in after
    ]
    return sorted((r for r in grown if r.size), key=lambda r: (r.table, r.name != r.table, r.name))


def _sizes(database: str, url: str) -> tuple[dict[tuple[str, str], int], int | None]:
    if database == "sqlite":
        path = Path(sa.make_url(url).database or "")
        return _sqlite_sizes(path)
    return _postgres_sizes(url), None


def measure(database: str, url: str, args: argparse.Namespace, home: Path) -> list[Figures]:
    """The figures of each of ``args.runs`` runs of the same definition, one after another."""
    migrate.upgrade(url)
    engine = dialects.create_engine(url)
    ledger = Ledger(engine)
    executor = local.LocalExecutor(home=home, slots=args.slots)
    executor.ensure_supervisor()
    name = f"size-{uuid.uuid4().hex[:6]}"
    if database == "sqlite":
        method = "dbstat pages after wal_checkpoint(TRUNCATE), no VACUUM"
    else:
        method = "pg_total_relation_size after VACUUM (heap+TOAST+indexes+maps)"
    figures = []
    try:
        triggers.apply_definition(ledger, scheduler_bench._fanout_yaml(name, args.tasks))
        loop = Scheduler(
            ledger,
            executors={"local": executor},
            tokens=AttemptTokens(b"bench-secret-0123456789"),
            outbox=home / "outbox",
            settings=Settings(),
            submit_threads=args.submit_threads,
        )
        for _ in range(args.runs):
            engine.dispose()  # SQLite: no connection holds the WAL while it is checkpointed
            before, file_before = _sizes(database, url)
            with scheduler_bench._Loop(loop, None):
                run = triggers.trigger(
                    ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench"
                )
                scheduler_bench._wait_run(ledger, run.run_id)
            scheduler_bench._all_success(ledger, run.run_id)
            engine.dispose()
            after, file_after = _sizes(database, url)
            file_grown = None
            if file_after is not None and file_before is not None:
                file_grown = file_after - file_before
            figures.append(Figures(database, args.tasks, _grown(before, after), method, file_grown))
    finally:
        executor.shutdown_supervisor()
        engine.dispose()
    return figures


def _print(figures: Figures, label: str) -> None:
    verdict = "met" if figures.per_task <= TARGET_BYTES_PER_TASK else "NOT met"
    print(
        f"-- {figures.database}, {label}: {figures.per_task:6.0f} bytes per task "
        f"(target <= {TARGET_BYTES_PER_TASK}: {verdict}); {figures.method}"
    )
    if figures.file_grown is not None:
        print(f"   the file grew {figures.file_grown / figures.tasks:.0f} bytes per task")
    for relation in figures.grown:
        name = relation.name if relation.name == relation.table else f"  {relation.name}"
        print(f"   {name:<58} {relation.size / figures.tasks:8.0f} B/task")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_size", description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument(
        "--runs", type=int, default=2, help="runs one after another; the last is the figure"
    )
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--submit-threads", type=int, default=4)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument("--dir", type=Path, default=None, help="where homes go ($TMPDIR)")
    args = parser.parse_args(argv)
    results = []
    with scheduler_bench._databases(args) as databases:
        for database, url in databases:
            with tempfile.TemporaryDirectory(prefix="veritask-size-", dir=args.dir) as home:
                results.append(measure(database, url, args, Path(home)))
    print(
        f"ledger size bench: {args.runs} runs of {args.tasks} tasks `true` one after another, "
        "one attempt each"
    )
    for runs in results:
        first, last = runs[0], runs[-1]
        print(
            f"-- {first.database}: the first run into an empty ledger cost "
            f"{first.per_task:.0f} bytes per task"
        )
        _print(last, f"run {len(runs)} (what a ledger in service pays)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

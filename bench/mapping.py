"""Dynamic task mapping against a static fan-out of the same size: ``make bench`` (never a test).

On SQLite in a temporary directory (and PostgreSQL at 127.0.0.1:5432 with ``--postgres``), with
the local executor and the outbox transport, one run of each, in the same sitting:

(a) **static**: a task ``list`` that writes a list of ``--items`` numbers, then ``--items``
    tasks ``true``, each after ``list``;
(b) **mapped**: the same ``list``, then one task ``true`` mapped over its output.

For each, the rate in tasks per second from the trigger until the run ends (every instance
SUCCESS); the ratio mapped / static (the target is 0.8 or more). For the mapped run, the
expansion time: from the upstream's SUCCESS being recorded to the ``map_expanded`` event
that created the instances (the target is under one second), and the ledger's
``expand_map`` alone for as many items (one transaction).

    python -m bench.mapping
    python -m bench.mapping --items 1000 --postgres
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from bench.scheduler import _all_success, _Homes, _Loop, _wait_run
from veritask import ids
from veritask.core import new_events
from veritask.core.jsontypes import JSONValue
from veritask.core.policy import TaskPolicy
from veritask.core.states import TriggerKind
from veritask.execution import local
from veritask.ledger import dialects, migrate, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

RATIO_TARGET = 0.8
EXPAND_TARGET_SECONDS = 1.0
LIST = (
    'list: {run: \'python3 -c "import json; print(json.dumps(list(range(%d))))"'
    ' > "$VERITASK_OUTPUT"\'}'
)


@dataclass(frozen=True)
class Figures:
    database: str
    static_per_s: float
    mapped_per_s: float
    expand_seconds: float
    first_open_seconds: float
    expand_alone_seconds: float

    @property
    def ratio(self) -> float:
        return self.mapped_per_s / self.static_per_s


def _static_yaml(name: str, items: int) -> str:
    lines = [f"name: {name}", "concurrency: allow", "tasks:", "  " + LIST % items]
    lines += [f"  t{n:05d}: {{run: 'true', after: [list]}}" for n in range(items)]
    return "\n".join(lines) + "\n"


def _mapped_yaml(name: str, items: int) -> str:
    return (
        f"name: {name}\nconcurrency: allow\ntasks:\n  {LIST % items}\n"
        "  each:\n    run: 'true'\n"
        '    map: {over: "{{ outputs.list }}", max_map: %d}\n'
        "    after: [list]\n" % max(items, 1)
    )


def _run(ledger: Ledger, source: str, name: str, tasks: int) -> tuple[float, str]:
    triggers.apply_definition(ledger, source)
    started = time.perf_counter()
    run = triggers.trigger(ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench")
    _wait_run(ledger, run.run_id)
    elapsed = time.perf_counter() - started
    _all_success(ledger, run.run_id)
    return tasks / elapsed, run.run_id


def _expansion_seconds(ledger: Ledger, run_id: str) -> tuple[float, float]:
    """From the upstream's SUCCESS recorded to the expansion decided, and to the first item's
    attempt opened (the instances were created and committed by then)."""
    e, t = schema.events.c, schema.task_instances.c
    with dialects.read_transaction(ledger.engine) as connection:
        rows = connection.execute(
            sa.select(t.task_key, t.map_index, e.kind, e.to_state, e.observed_at)
            .join(schema.task_instances, t.id == e.instance_id)
            .where(t.run_id == run_id, e.outcome == "applied")
        ).all()
    listed = min(r.observed_at for r in rows if r.task_key == "list" and r.to_state == "SUCCESS")
    expanded = min(r.observed_at for r in rows if r.kind == "map_expanded")
    opened = min(r.observed_at for r in rows if r.kind == "attempt_opened" and r.map_index >= 0)
    return (expanded - listed).total_seconds(), (opened - listed).total_seconds()


def _expand_alone(ledger: Ledger, items: int) -> float:
    """The ledger's ``expand_map`` of ``items`` instances, timed alone."""
    name = f"alone-{uuid.uuid4().hex[:6]}"
    triggers.apply_definition(ledger, _mapped_yaml(name, items))
    run = triggers.trigger(ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench")
    t = schema.task_instances.c
    with dialects.read_transaction(ledger.engine) as connection:
        parent = connection.execute(
            sa.select(t.id).where(t.run_id == run.run_id, t.task_key == "each")
        ).scalar_one()
    loaded = ledger.snapshot(parent)
    assert loaded is not None
    values: list[JSONValue] = list(range(items))
    event = new_events.map_expanded(
        event_id=ids.time_ordered_id(),
        instance_id=parent,
        epoch=0,
        event_time=ledger.clock(),
        over="list",
        upstream_instance_id="",
        upstream_attempt_no=1,
        items=values,
    )
    began = time.perf_counter()
    ledger.expand_map(
        event,
        expected_version=loaded[1],
        run_id=run.run_id,
        task_key="each",
        policy=TaskPolicy(),
        new_id=ids.time_ordered_id,
    )
    # The run stays as it is: the scheduler is stopped and the bench's ledger is thrown away.
    return time.perf_counter() - began


def measure(database: str, url: str, args: argparse.Namespace, homes: _Homes) -> Figures:
    migrate.upgrade(url)
    engine = dialects.create_engine(url)
    home = homes.new()
    ledger = Ledger(engine)
    executor = local.LocalExecutor(home=home, slots=args.slots)
    executor.ensure_supervisor()
    scheduler = Scheduler(
        ledger,
        executors={"local": executor},
        tokens=AttemptTokens(b"bench-secret-0123456789"),
        outbox=home / "outbox",
        settings=Settings(),
    )
    n = args.items
    try:
        with _Loop(scheduler, None):
            warm = f"warm-{uuid.uuid4().hex[:6]}"
            _run(ledger, _mapped_yaml(warm, 20), warm, 21)
            static_rates, mapped_rates, expansions = [], [], []
            for _ in range(args.rounds):  # alternated, so both see the same machine
                name = f"static-{uuid.uuid4().hex[:6]}"
                static_rates.append(_run(ledger, _static_yaml(name, n), name, n + 1)[0])
                name = f"mapped-{uuid.uuid4().hex[:6]}"
                rate, run_id = _run(ledger, _mapped_yaml(name, n), name, n + 1)
                mapped_rates.append(rate)
                expansions.append(_expansion_seconds(ledger, run_id))
        alone = _expand_alone(ledger, n)
    finally:
        executor.shutdown_supervisor()
        engine.dispose()
    decided, opened = min(expansions)
    return Figures(database, max(static_rates), max(mapped_rates), decided, opened, alone)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2, help="alternated; the best of each")
    parser.add_argument("--slots", type=int, default=None)
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL")
    args = parser.parse_args(argv)
    homes = _Homes(None)
    databases = []
    dropped: Callable[[], None] | None = None
    try:
        sqlite_home = homes.new()
        databases.append(("sqlite", f"sqlite:///{sqlite_home / 'bench.db'}"))
        if args.postgres:
            database = f"bench_mapping_{uuid.uuid4().hex[:8]}"
            admin = sa.create_engine(
                "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
                isolation_level="AUTOCOMMIT",
            )
            with admin.connect() as connection:
                connection.exec_driver_sql(f'CREATE DATABASE "{database}"')

            def dropped() -> None:
                with admin.connect() as connection:
                    connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" (FORCE)')
                admin.dispose()

            databases.append(("postgresql", f"postgresql+psycopg://postgres@127.0.0.1/{database}"))
        failed = False
        for name, url in databases:
            found = measure(name, url, args, homes)
            ok = found.ratio >= RATIO_TARGET and found.first_open_seconds < EXPAND_TARGET_SECONDS
            failed |= not ok
            print(
                f"mapping {name}: {args.items} items: static fan-out {found.static_per_s:.0f}/s,"
                f" mapped {found.mapped_per_s:.0f}/s, ratio {found.ratio:.2f}"
                f" (target >= {RATIO_TARGET}); after the upstream's success: expansion decided"
                f" in {found.expand_seconds * 1000:.0f} ms, {args.items} instances created and"
                f" the first opened in {found.first_open_seconds * 1000:.0f} ms"
                f" (target < {EXPAND_TARGET_SECONDS:g} s); expand_map alone"
                f" {found.expand_alone_seconds * 1000:.0f} ms"
                f" {'ok' if ok else 'MISSED'}",
                flush=True,
            )
        return 1 if failed else 0
    finally:
        homes.remove_all()
        if dropped is not None:
            dropped()


if __name__ == "__main__":
    raise SystemExit(main())

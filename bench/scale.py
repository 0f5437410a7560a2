"""The scheduler and a run's read as the ledger grows: ``make bench`` (never a test).

For each database (SQLite in a temporary directory, PostgreSQL at 127.0.0.1:5432 when it
answers), with the local executor and the outbox transport, at each of ``--sizes`` (finished
task instances already in the ledger):

- **fan-out**: one run of ``--tasks`` independent tasks ``true`` of the same definition, from
  the trigger until every instance is durably SUCCESS, in tasks per second, and the CPU of this
  process (the scheduler's loop and submissions, the bench's look for the run's end) per task;
  the median of ``--rounds``;
- **show**: ``services.runs.get_run`` (what ``veritask show`` and ``GET /api/v2/runs/{id}``
  read) of the new run and of an old one: cold (the first read in a fresh Platform: a new
  engine, its connection and statement cache; the median of three) and warm (the median of
  fifteen in one Platform);
- **runs list**: ``services.run_lists.list_runs`` with no filter, 50 a page (``GET
  /api/v2/runs?limit=50``), cold and warm; fifty one-task runs made at the start keep its page
  full at every size.

Each figure is taken on the grown ledger and, in turn, on a copy of the ledger made while it
was empty, which grows only by the bench's own runs: the ratio of the two is read in the same
minutes, because this shared host's speed moves more than the 20 % target allows. At size 0
both are empty, and their ratios show the noise.

The history is not run but copied (``bench/history.py``): a first fan-out on the empty
ledger is the template (with ``--run-size``, a run of a definition of that many tasks, so that
the history has more runs), and each loaded run is a copy of all its rows with new ids and
times.
After the first two copies, the platform's own ``verify`` checks the whole ledger; after each
load, the database is checkpointed (SQLite) or vacuumed and analyzed (PostgreSQL), as one
grown over months would have been. A million instances take about 9 GB on SQLite.

    python -m bench.scale                                   # both databases, 0 and 100,000
    python -m bench.scale --sizes 0,100000,1000000          # the full curve
    python -m bench.scale --only sqlite --sizes 0,10000 --rounds 1
    python -m bench.scale --sizes 0,1000000 --run-size 10        # 100,000 runs of 10
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psycopg
import sqlalchemy as sa
from psycopg import sql as pg_sql
from sqlalchemy.engine import Engine

from bench import history
from bench.scheduler import (
    POSTGRES_DSN,
    _all_success,
    _databases,
    _fanout,
    _fanout_yaml,
    _Homes,
    _Loop,
    _wait_run,
)
from veritask.core.states import TriggerKind
from veritask.execution import local
from veritask.ledger import dialects, migrate, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import collector, triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens
from veritask.services import operations, run_lists, runs
from veritask.services.platform import Platform

TARGET: Final = 0.20
DEFINITION: Final = "scale-fanout"
COLD_READS: Final = 3
WARM_READS: Final = 15
LIST_PAGE: Final = 50
#: Copies loaded before ``verify`` checks the whole ledger (cheap while it is small).
VERIFIED_COPIES: Final = 2


def _verify(url: str, home: Path) -> None:
    platform = Platform.open(url, home)
    try:
        report = operations.verify(platform, repair=False, actor="operator:bench")
    finally:
        platform.close()
    if not report.ok:
        problems = [*report.mismatches, *report.violations]
        raise RuntimeError(f"verify failed on the loaded ledger: {problems[:5]}")
    print(f"  verify: {report.instances} instances and {report.runs} runs agree with their events")


# -- measuring -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reads:
    cold_ms: float
    warm_ms: float


@dataclass(frozen=True)
class Side:
    """One ledger's figures at one size."""

    fanout_per_s: float
    scheduler_cpu_ms: float
    show_new: Reads
    show_old: Reads
    runs_list: Reads


@dataclass(frozen=True)
class Point:
    """The grown ledger beside the empty one, measured in turn at the same time."""

    size: int
    load_seconds: float
    ledger_bytes: int
    grown: Side
    empty: Side


def _paired_reads(
    grown: _Ledger, empty: _Ledger, reads: tuple[Callable[[Platform], object], ...]
) -> tuple[Reads, Reads]:
    """A read on each ledger: cold, the first read in a fresh Platform (a new engine, its
    connection and statement cache), the median of COLD_READS; warm, the median of WARM_READS
    more in one Platform. One ledger then the other, the first changing each time: the
    process's caches (a definition's order, keyed by its id, which both ledgers share) would
    otherwise favour the second."""
    sides = (grown, empty)
    cold: list[list[float]] = [[], []]
    for round_no in range(COLD_READS):
        for side in (0, 1) if round_no % 2 == 0 else (1, 0):
            platform = Platform.open(sides[side].url, sides[side].home)
            try:
                cold[side].append(_timed(reads[side], platform))
            finally:
                platform.close()
    warm: list[list[float]] = [[], []]
    platforms = [Platform.open(side.url, side.home) for side in sides]
    try:
        for round_no in range(WARM_READS):
            for side in (0, 1) if round_no % 2 == 0 else (1, 0):
                warm[side].append(_timed(reads[side], platforms[side]))
    finally:
        for platform in platforms:
            platform.close()
    grown_reads, empty_reads = (
        Reads(statistics.median(cold[side]) * 1000, statistics.median(warm[side]) * 1000)
        for side in (0, 1)
    )
    return grown_reads, empty_reads


def _timed(read: Callable[[Platform], object], platform: Platform) -> float:
    began = time.perf_counter()
    read(platform)
    return time.perf_counter() - began


def _show(run_id: str, tasks: int) -> Callable[[Platform], object]:
    def read(platform: Platform) -> object:
        detail = runs.get_run(platform, run_id)
        if len(detail.instances) != tasks:
            raise RuntimeError(f"run {run_id} shows {len(detail.instances)} instances")
        return detail

    return read


def _runs_list(platform: Platform) -> object:
    page = run_lists.list_runs(platform, run_lists.RunFilters(), limit=LIST_PAGE)
    if len(page.items) != LIST_PAGE:
        raise RuntimeError(f"the runs list read {len(page.items)} runs, not {LIST_PAGE}")
    return page


class _Ledger:
    """A database with its own scheduler's executor (its own home and outbox)."""

    def __init__(self, url: str, args: argparse.Namespace, homes: _Homes) -> None:
        self.url, self.args = url, args
        self.engine = dialects.create_engine(url)
        self.ledger = Ledger(self.engine)
        self.home = homes.new()
        self.executor = local.LocalExecutor(home=self.home, slots=args.slots)
        self.executor.ensure_supervisor()

    def close(self) -> None:
        self.executor.shutdown_supervisor()
        self.engine.dispose()

    def scheduler(self) -> Scheduler:
        return Scheduler(
            self.ledger,
            executors={"local": self.executor},
            tokens=AttemptTokens(b"bench-secret-0123456789"),
            outbox=self.home / "outbox",
            settings=Settings(),
            submit_threads=self.args.submit_threads,
        )

    def fanout(self) -> tuple[str, float, float]:
        """A new run's id, its tasks per second and this process's CPU seconds per task."""
        with _Loop(self.scheduler(), None):
            cpu_before = time.process_time()
            began = time.perf_counter()
            run = triggers.trigger(
                self.ledger, name=DEFINITION, kind=TriggerKind.MANUAL, actor="operator:bench"
            )
            _wait_run(self.ledger, run.run_id)
            elapsed = time.perf_counter() - began
            cpu = time.process_time() - cpu_before
        _all_success(self.ledger, run.run_id)
        return run.run_id, self.args.tasks / elapsed, cpu / self.args.tasks


class _Sizes:
    """One database's ledger grown from empty through the sizes, beside a copy of it taken
    while empty: every figure of the grown one is read with the empty one's of the same
    minutes, because this shared host's speed moves more than the targets allow."""

    def __init__(
        self, database: str, url: str, args: argparse.Namespace, homes: _Homes, scratch: Path
    ) -> None:
        self.database, self.url, self.args, self.homes = database, url, args, homes
        self.scratch = scratch
        self.copies = 0
        self.loaded_run: str | None = None
        self.empty_url: str | None = None

    def run(self) -> list[Point]:
        migrate.upgrade(self.url)
        grown = _Ledger(self.url, self.args, self.homes)
        empty: _Ledger | None = None
        try:
            with _Loop(grown.scheduler(), None):
                _fanout(grown.ledger, 20)  # warm up: imports, the supervisor, the page cache
                self._fill_the_first_page(grown.ledger)
            applied = triggers.apply_definition(
                grown.ledger, _fanout_yaml(DEFINITION, self.args.tasks)
            )
            template_run, _, _ = grown.fanout()
            history_run, history_definition = self._history_template(
                grown, template_run, applied.definition_id
            )
            template = history.template_of(grown.engine, history_run, history_definition)
            # The first read in the process parses the definition's order, kept from then on.
            _paired_reads(grown, grown, (_show(template_run, self.args.tasks),) * 2)
            empty = self._empty_copy(grown)
            points = []
            for size in self.args.sizes:
                load_seconds = self._grow(grown, template, size, history_definition, history_run)
                history.settle(grown.engine)
                history.settle(empty.engine)
                old = self.loaded_run or history_run
                sides = self._sides(grown, empty, old=old, empty_old=history_run)
                point = Point(
                    size, load_seconds, history.ledger_bytes(grown.engine, self.url), *sides
                )
                print(f"  {self.database} {_line(point)}", flush=True)
                points.append(point)
            return points
        finally:
            grown.close()
            if empty is not None:
                empty.close()
            self._drop_empty_copy()

    def _history_template(
        self, grown: _Ledger, template_run: str, definition_id: str
    ) -> tuple[str, str]:
        """The run whose copies are the history, and its definition's id: the first fan-out,
        or with ``--run-size``, a run of a definition of that many tasks."""
        if self.args.run_size == self.args.tasks:
            return template_run, definition_id
        name = "scale-history"
        applied = triggers.apply_definition(grown.ledger, _fanout_yaml(name, self.args.run_size))
        with _Loop(grown.scheduler(), None):
            run_id = triggers.trigger(
                grown.ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench"
            ).run_id
            _wait_run(grown.ledger, run_id)
        _all_success(grown.ledger, run_id)
        return run_id, applied.definition_id

    def _fill_the_first_page(self, ledger: Ledger) -> None:
        """Runs of one task each, so that the runs list reads a whole page at every size: on
        an empty ledger it would read the few runs there are, and the ratio would compare
        pages of different lengths."""
        triggers.apply_definition(ledger, _fanout_yaml("scale-filler", 1))
        filled = [
            triggers.trigger(
                ledger, name="scale-filler", kind=TriggerKind.MANUAL, actor="operator:bench"
            ).run_id
            for _ in range(LIST_PAGE)
        ]
        for run_id in filled:
            _wait_run(ledger, run_id)

    def _empty_copy(self, grown: _Ledger) -> _Ledger:
        history.settle(grown.engine)
        if grown.engine.dialect.name == "sqlite":
            path = self.scratch / "empty.db"
            source = grown.engine.raw_connection()
            try:
                with sqlite3.connect(path) as target:
                    source.driver_connection.backup(target)  # type: ignore[union-attr]
            finally:
                source.close()
            self.empty_url = f"sqlite:///{path}"
        else:
            grown.engine.dispose()  # a template database must have no other session
            source_name = sa.make_url(self.url).database
            name = f"{source_name}_empty"
            with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
                admin.execute(
                    pg_sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        pg_sql.Identifier(name), pg_sql.Identifier(str(source_name))
                    )
                )
            self.empty_url = str(sa.make_url(self.url).set(database=name))
        return _Ledger(self.empty_url, self.args, self.homes)

    def _drop_empty_copy(self) -> None:
        if self.empty_url is None or not self.empty_url.startswith("postgresql"):
            return
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
            name = str(sa.make_url(self.empty_url).database)
            admin.execute(
                pg_sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    pg_sql.Identifier(name)
                )
            )

    def _sides(self, grown: _Ledger, empty: _Ledger, *, old: str, empty_old: str) -> list[Side]:
        """Each figure taken on one ledger, then the other, in alternating order."""
        tasks = self.args.tasks
        both = (grown, empty)
        rates: list[list[float]] = [[], []]
        cpus: list[list[float]] = [[], []]
        new_runs = ["", ""]
        for round_no in range(self.args.rounds):
            order = (0, 1) if round_no % 2 == 0 else (1, 0)
            for side in order:
                new_runs[side], per_s, cpu = both[side].fanout()
                rates[side].append(per_s)
                cpus[side].append(cpu)
        show_new = _paired_reads(
            grown, empty, (_show(new_runs[0], tasks), _show(new_runs[1], tasks))
        )
        olds = (_show(old, self.args.run_size), _show(empty_old, self.args.run_size))
        show_old = _paired_reads(grown, empty, olds)
        listed = _paired_reads(grown, empty, (_runs_list, _runs_list))
        return [
            Side(
                statistics.median(rates[side]),
                statistics.median(cpus[side]) * 1000,
                show_new[side],
                show_old[side],
                listed[side],
            )
            for side in (0, 1)
        ]

    def _grow(
        self,
        grown: _Ledger,
        template: history.Template,
        size: int,
        definition_id: str,
        template_run: str,
    ) -> float:
        wanted = -(-size // self.args.run_size)
        if wanted <= self.copies:
            return 0.0
        engine = grown.engine
        began = time.perf_counter()
        if self.copies < VERIFIED_COPIES <= wanted:
            history.load(engine, template, self.copies, VERIFIED_COPIES - self.copies)
            self.copies = VERIFIED_COPIES
            verify_began = time.perf_counter()
            _verify(self.url, grown.home)
            began += time.perf_counter() - verify_began  # not part of the load
        history.load(engine, template, self.copies, wanted - self.copies)
        self.copies = wanted
        history.settle(engine)
        elapsed = time.perf_counter() - began
        if self.loaded_run is None:
            self.loaded_run = _first_copy(engine, definition_id, template_run)
        return elapsed


def _first_copy(engine: Engine, definition_id: str, template_run: str) -> str:
    """The newest copy: one SPACING before the template run."""
    r = schema.runs.c
    with dialects.read_transaction(engine) as connection:
        template_created = connection.execute(
            sa.select(r.created_at).where(r.id == template_run)
        ).scalar_one()
        return str(
            connection.execute(
                sa.select(r.id)
                .where(
                    r.definition_id == definition_id,
                    r.created_at < template_created - history.SPACING / 2,
                )
                .order_by(r.created_at.desc())
                .limit(1)
            ).scalar_one()
        )


def _line(p: Point) -> str:
    g, e = p.grown, p.empty
    return (
        f"size {p.size:,}: loaded in {p.load_seconds:.0f} s,"
        f" ledger {p.ledger_bytes / 2**20:,.0f} MiB; grown / empty:"
        f" fan-out {g.fanout_per_s:.0f} / {e.fanout_per_s:.0f} tasks/s,"
        f" CPU {g.scheduler_cpu_ms:.2f} / {e.scheduler_cpu_ms:.2f} ms a task;"
        f" show cold ms: new run {g.show_new.cold_ms:.0f} / {e.show_new.cold_ms:.0f},"
        f" old run {g.show_old.cold_ms:.0f} / {e.show_old.cold_ms:.0f};"
        f" runs list cold {g.runs_list.cold_ms:.1f} / {e.runs_list.cold_ms:.1f} ms"
    )


def _report(database: str, points: list[Point], tasks: int) -> None:
    print(
        f"-- {database}: a fan-out of {tasks} `true` tasks and its reads as the ledger grows;"
        " each figure of the grown ledger (x its ratio to the empty ledger's, measured in turn"
        " with it); reads warm"
    )
    print(
        f"  {'size':>10} {'load s':>7} {'MiB':>7} {'tasks/s':>14} {'CPU ms/task':>14}"
        f" {'show new ms':>14} {'show old ms':>14} {'runs list ms':>14}"
    )
    for p in points:
        g, e = p.grown, p.empty
        print(
            f"  {p.size:>10,} {p.load_seconds:>7.0f} {p.ledger_bytes / 2**20:>7,.0f}"
            f" {_ratio(g.fanout_per_s, e.fanout_per_s):>14}"
            f" {_ratio(g.scheduler_cpu_ms, e.scheduler_cpu_ms, digits=2):>14}"
            f" {_ratio(g.show_new.warm_ms, e.show_new.warm_ms):>14}"
            f" {_ratio(g.show_old.warm_ms, e.show_old.warm_ms):>14}"
            f" {_ratio(g.runs_list.warm_ms, e.runs_list.warm_ms):>14}"
        )
    print(
        f"  target: tasks/s at least x{1 - TARGET:.2f} of the empty ledger's, reads at most"
        f" x{1 + TARGET:.2f}; at size 0 both are empty, and the ratios show the noise"
    )


def _ratio(value: float, base: float, *, digits: int = 1) -> str:
    return f"{value:.{digits}f} (x{value / base:.2f})"


def _sizes(text: str) -> list[int]:
    sizes = sorted({int(part.replace("_", "")) for part in text.split(",")} | {0})
    if sizes[0] < 0:
        raise argparse.ArgumentTypeError("sizes are counts of finished instances")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=_sizes("0,100000"),
        help="finished instances loaded before each measurement, comma-separated (0 is "
        "always measured first: its run is copied)",
    )
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument(
        "--run-size",
        type=int,
        default=None,
        help="instances per loaded run (default: --tasks); fewer make more runs",
    )
    parser.add_argument("--rounds", type=int, default=3, help="fan-outs per size and ledger")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--submit-threads", type=int, default=4)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument("--dir", type=Path, default=None, help="where homes go ($TMPDIR)")
    args = parser.parse_args(argv)
    if args.run_size is None:
        args.run_size = args.tasks

    collector.tune()  # as a scheduler's process does once it has started
    homes = _Homes(args.dir)
    results: list[tuple[str, list[Point]]] = []
    try:
        with _databases(args) as databases:
            for database, url in databases:
                scratch = homes.new()
                results.append((database, _Sizes(database, url, args, homes, scratch).run()))
    finally:
        homes.remove_all()
    print(
        f"scale bench: sizes {', '.join(f'{s:,}' for s in args.sizes)} finished instances,"
        f" loaded as runs of {args.run_size:,}"
    )
    for database, points in results:
        _report(database, points, args.tasks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

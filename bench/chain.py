"""What the hash chain costs: ``python -m bench.chain`` (in ``make bench``).

For each database, in the same run:

- events per second through ``Ledger.apply`` (one writer, one event per transaction) and
  through ``apply_batch`` (200 per transaction), with the chain's hashing beside the same
  path with hashing replaced by a constant of the same length (the same bytes are written;
  only the encoding and SHA-256 differ). Rounds alternate, so drift hits both alike; the
  figure is the median round's ratio (target >= 0.9);
- the bytes one no-op task costs the ledger (``bench.ledger_size``: the real scheduler and
  local executor, the last of ``--runs`` runs) without the chain's columns filled (no hash,
  no head: what the ledger stored before 0016) and with them;
- how fast migration 0016 hashes a ledger recorded before it (``--migrate-rows`` synthetic
  events, 200,000 by default).

Hashing is switched off here only, by replacing ``ledger.chain.link``: no setting turns it
off in the product.

    python -m bench.chain
    python -m bench.chain --only sqlite --seconds 2 --tasks 200
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from sqlalchemy.engine import Engine

from bench import ledger as ledger_bench
from bench import ledger_baseline, ledger_size
from bench import scheduler as scheduler_bench
from veritask.ledger import chain, dialects, migrate

TARGET_RATIO: Final = 0.9
ROUNDS: Final = 5
_CONSTANT: Final = "0" * 64


@contextmanager
def _linking(
    replacement: Callable[[Mapping[str, object], str | None], str | None] | None,
) -> Iterator[None]:
    """``chain.link`` replaced for the block (``None``: the real one)."""
    real = chain.link
    if replacement is not None:
        chain.link = replacement  # type: ignore[assignment]
    try:
        yield
    finally:
        chain.link = real


def _constant(row: Mapping[str, object], prev: str | None) -> str:
    del row, prev
    return _CONSTANT


def _nothing(row: Mapping[str, object], prev: str | None) -> str | None:
    del row, prev
    return None


def _timed(measure: Callable[[], float]) -> tuple[float, float]:
    """A rate (events per second, wall clock) and this process's CPU seconds per event."""
    wall, cpu = time.perf_counter(), time.process_time()
    rate = measure()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return rate, cpu / (rate * wall)


def _rates(engine: Engine, seconds: float) -> list[str]:
    paths: dict[str, Callable[[], float]] = {
        "apply": lambda: ledger_bench.apply_rate(engine, writers=1, seconds=seconds),
        "apply_batch": lambda: ledger_bench.batch_rate(engine, seconds=seconds),
    }
    ratios: dict[str, list[float]] = {path: [] for path in paths}
    rates: dict[tuple[str, bool], list[float]] = {}
    cpu: dict[tuple[str, bool], list[float]] = {}
    for _ in range(ROUNDS):
        for hashing in (True, False):
            with _linking(None if hashing else _constant):
                for path, measure in paths.items():
                    rate, per_event = _timed(measure)
                    rates.setdefault((path, hashing), []).append(rate)
                    cpu.setdefault((path, hashing), []).append(per_event)
        for path in ratios:
            ratios[path].append(rates[(path, True)][-1] / rates[(path, False)][-1])
    lines = []
    for path, found in ratios.items():
        ratio = statistics.median(found)
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        hashed_cpu = statistics.median(cpu[(path, True)]) * 1e6
        plain_cpu = statistics.median(cpu[(path, False)]) * 1e6
        lines.append(
            f"{path:<12} hashed {statistics.median(rates[(path, True)]):8.0f} ev/s   "
            f"unhashed {statistics.median(rates[(path, False)]):8.0f} ev/s   ratio {ratio:.2f} "
            f"(target >= {TARGET_RATIO}: {verdict}; rounds {', '.join(f'{r:.2f}' for r in found)})"
        )
        lines.append(
            f"{'':<12} this process's CPU per event: hashed {hashed_cpu:.0f} us, unhashed "
            f"{plain_cpu:.0f} us (ratio {plain_cpu / hashed_cpu:.2f}; steadier on a shared machine)"
        )
    return lines


def _sizes(database: str, args: argparse.Namespace) -> list[str]:
    per_task = {}
    for label, replacement in (("without the chain", _nothing), ("with the chain", None)):
        with (
            scheduler_bench._databases(
                argparse.Namespace(only=database, dir=args.dir)
            ) as databases,
            tempfile.TemporaryDirectory(prefix="veritask-chain-", dir=args.dir) as home,
            _linking(replacement),
        ):
            ((_, url),) = databases
            figures = ledger_size.measure(database, url, args, Path(home))
        per_task[label] = figures[-1].per_task
    before, after = per_task["without the chain"], per_task["with the chain"]
    return [
        f"bytes per no-op task: {before:.0f} without the chain, {after:.0f} with it "
        f"({after - before:+.0f} B, {after / before - 1:+.1%})"
    ]


def _migration(database: str, args: argparse.Namespace) -> list[str]:
    """How fast 0016 hashes a ledger recorded before it (``--migrate-rows`` synthetic events)."""
    if not args.migrate_rows:
        return []
    with scheduler_bench._databases(argparse.Namespace(only=database, dir=args.dir)) as found:
        ((_, url),) = found
        migrate.upgrade(url, "0015")
        engine = dialects.create_engine(url)
        try:
            ledger_baseline.seed_events(engine, args.migrate_rows)
        finally:
            engine.dispose()
        began = time.perf_counter()
        migrate.upgrade(url)
        took = time.perf_counter() - began
    return [
        f"migration 0016 hashed {args.migrate_rows:,} events in {took:.1f} s "
        f"({args.migrate_rows / took:,.0f} events/s)"
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="per round and path")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--submit-threads", type=int, default=4)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument("--dir", type=Path, default=None, help="where homes go ($TMPDIR)")
    parser.add_argument(
        "--migrate-rows", type=int, default=200_000, help="events 0016 hashes (0: skip)"
    )
    args = parser.parse_args(argv)
    report: list[str] = []
    for database in ("sqlite", "postgres"):
        if args.only not in (None, database):
            continue
        report.append(f"== {database}")
        with scheduler_bench._databases(argparse.Namespace(only=database, dir=args.dir)) as found:
            if not found:
                continue
            ((_, url),) = found
            migrate.upgrade(url)
            engine = dialects.create_engine(url)
            try:
                report += _rates(engine, args.seconds)
            finally:
                engine.dispose()
        report += _sizes(database, args)
        report += _migration(database, args)
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

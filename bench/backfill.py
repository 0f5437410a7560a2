"""How fast a backfill of a year of daily intervals is recorded: ``make bench`` (never a test).

Migrates a SQLite database in a temporary directory, applies a daily definition and asks the
backfill service for ``--days`` intervals with ``max_active_runs`` as large, so that every run
is created by the request itself; then asks again, which must create nothing. The target is
under five seconds for the first call.

    python -m bench.backfill
    python -m bench.backfill --days 365
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from veritask.ledger import migrate
from veritask.services import backfills, definitions, runs
from veritask.services.platform import Platform

TARGET_SECONDS = 5.0

DAILY = """\
name: bench_daily
concurrency: allow
schedule: {cron: "0 0 * * *", timezone: UTC}
tasks:
  load: {run: "true"}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        home = Path(directory)
        url = f"sqlite:///{home / 'bench.db'}"
        migrate.upgrade(url)
        platform = Platform.open(url, home)
        try:
            definitions.apply_definition(platform, DAILY, actor="bench")
            start = datetime(2025, 1, 1, tzinfo=UTC)
            end = start + timedelta(days=args.days)
            most = min(args.days, backfills.MAX_ACTIVE_RUNS)
            began = time.perf_counter()
            first = backfills.request_backfill(
                platform, "bench_daily", start=start, end=end, actor="bench", max_active_runs=most
            )
            first_seconds = time.perf_counter() - began
            before = _count_runs(platform)
            began = time.perf_counter()
            second = backfills.request_backfill(
                platform, "bench_daily", start=start, end=end, actor="bench", max_active_runs=most
            )
            second_seconds = time.perf_counter() - began
            after = _count_runs(platform)
        finally:
            platform.close()
    made = first.backfill.progress.created
    print(
        f"backfill of {args.days} daily intervals: {made} runs in {first_seconds:.2f} s "
        f"(target {TARGET_SECONDS:.0f} s, ratio {first_seconds / TARGET_SECONDS:.2f})"
    )
    print(
        f"the same backfill again: {'no new backfill' if not second.created else 'NEW'}, "
        f"{after - before} new runs in {second_seconds:.3f} s "
        f"(ratio {second_seconds / TARGET_SECONDS:.3f}); runs in the ledger: {after}"
    )


def _count_runs(platform: Platform) -> int:
    count, cursor = 0, None
    while True:
        page = runs.list_runs(platform, definition="bench_daily", cursor=cursor, limit=200)
        count += len(page.items)
        if page.next_cursor is None:
            return count
        cursor = page.next_cursor


if __name__ == "__main__":
    main()

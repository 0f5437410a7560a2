"""``python -m veritask.scheduling``: one scheduler process with the local executor.

The CLI's ``veritask scheduler`` and ``veritask up`` start the same loop; this entry point is
what the fault-injection tests kill and restart. Exit status: 0 after SIGTERM or SIGINT, 4 when
it refuses to start because another scheduler holds the SQLite database.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from veritask.execution import engines, task_user, wait_http
from veritask.execution.local import LocalExecutor
from veritask.ledger import dialects, errors, migrate
from veritask.ledger.ledger import Ledger
from veritask.scheduling import collector, sharing
from veritask.scheduling.lease import SchedulerAlreadyRunning, SchedulerLease
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

EXIT_REFUSED = 4
log = logging.getLogger("veritask.scheduling")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m veritask.scheduling")
    parser.add_argument(
        "--home", type=Path, default=Path(os.environ.get("VERITASK_HOME", ".veritask"))
    )
    parser.add_argument("--url", default=os.environ.get("VERITASK_DATABASE_URL"))
    parser.add_argument("--slots", type=int, default=None, help="attempts running at once")
    parser.add_argument("--commit-url", default=os.environ.get("VERITASK_URL"))
    defaults = Settings()
    seconds = _seconds_option(parser)
    seconds("--idle-sleep", defaults.idle_sleep)
    seconds("--monitor-every", defaults.monitor_every)
    seconds("--reconcile-every", defaults.reconcile_every)
    seconds("--full-scan-every", defaults.full_scan_every)
    seconds("--leaf-settle", defaults.leaf_settle)
    seconds("--gather-window", defaults.gather_window)
    parser.add_argument(
        "--gather-from",
        type=int,
        default=defaults.gather_from,
        help=f"attempts in flight from which reports are gathered (default {defaults.gather_from})",
    )
    seconds("--submit-grace", defaults.submit_grace)
    seconds("--queued-check", defaults.queued_check)
    seconds("--retry-late-after", defaults.retry_late_after)
    seconds("--pool-aging", defaults.pool_aging)
    seconds("--pool-full-alert-after", defaults.pool_full_alert_after)
    parser.add_argument(
        "--cancel-window",
        type=float,
        default=None,
        help="seconds; overrides every task's cancel window",
    )
    parser.add_argument("--no-migrate", action="store_true", help="do not upgrade the schema")
    args = parser.parse_args(argv)
    # Checked before anything starts: a bad timing is a usage error, not a crash after the
    # migration and the lease (Settings names the option's field and what is wrong).
    try:
        settings = Settings(
            idle_sleep=timedelta(seconds=args.idle_sleep),
            monitor_every=timedelta(seconds=args.monitor_every),
            reconcile_every=timedelta(seconds=args.reconcile_every),
            full_scan_every=timedelta(seconds=args.full_scan_every),
            leaf_settle=timedelta(seconds=args.leaf_settle),
            gather_window=timedelta(seconds=args.gather_window),
            gather_from=args.gather_from,
            submit_grace=timedelta(seconds=args.submit_grace),
            queued_check=timedelta(seconds=args.queued_check),
            retry_late_after=timedelta(seconds=args.retry_late_after),
            pool_aging=timedelta(seconds=args.pool_aging),
            pool_full_alert_after=timedelta(seconds=args.pool_full_alert_after),
            cancel_window=None
            if args.cancel_window is None
            else timedelta(seconds=args.cancel_window),
        )
        # Read once, here: the wait checker is handed it (``execution/wait_http``).
        wait_http_allow = wait_http.HttpAllow.from_environment(os.environ)
        home: Path = args.home.resolve()
        task_user.secure_home(home, os.environ)
    except ValueError as exc:  # task_user.TaskUserError among them
        parser.error(str(exc))
    # Installed first: a SIGTERM during start-up ends the process cleanly too.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    url = args.url or f"sqlite:///{home / 'veritask.db'}"
    if not args.no_migrate:
        migrate.upgrade(url)
    engine = dialects.create_engine(url)
    ledger = Ledger(engine)
    lease = SchedulerLease(ledger)
    try:
        lease.acquire()
    except SchedulerAlreadyRunning as exc:
        print(f"veritask scheduler: refusing to start: {exc}", file=sys.stderr)
        engine.dispose()
        return EXIT_REFUSED
    scheduler = Scheduler(
        ledger,
        executors={
            engines.LOCAL_EXECUTOR: LocalExecutor(home=home, slots=args.slots),
            **engines.from_environment(os.environ),
        },
        tokens=AttemptTokens.from_home(home),
        outbox=home / "outbox",
        settings=settings,
        commit_base_url=args.commit_url,
        membership=sharing.membership_for(ledger, lease.id),
        wait_http_allow=wait_http_allow,
    )
    collector.tune()
    log.info("scheduler %s started on %s (home %s)", lease.id, engine.url, home)
    beating = threading.Thread(target=_beat, args=(lease, stop), daemon=True)
    beating.start()
    try:
        scheduler.run(stop)
    finally:
        try:
            lease.release()
        except errors.LedgerError as exc:
            log.warning("could not remove this scheduler's row: %s", exc)
        engine.dispose()
    return 0


def _seconds_option(parser: argparse.ArgumentParser) -> Callable[[str, timedelta], None]:
    def add(flag: str, default: timedelta) -> None:
        parser.add_argument(
            flag, type=float, default=default.total_seconds(), help="seconds (%(default)s)"
        )

    return add


def _beat(lease: SchedulerLease, stop: threading.Event) -> None:
    while not stop.wait(5):
        try:
            lease.beat()
        except errors.LedgerError as exc:  # the database is away; the loop notices too
            log.warning("scheduler heartbeat failed: %s", exc)


if __name__ == "__main__":
    raise SystemExit(main())

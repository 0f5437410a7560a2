"""The scheduler process: the lease, the scheduler loop with the local executor, housekeeping.

``veritask up`` runs it in a thread beside the API; ``veritask scheduler`` runs it alone. It
keeps nothing in memory that a restart would need: on start the scheduler reconciles every
active instance with its engine (``Scheduler.recover``), which is how a second ``up`` takes
over the attempts that were running when the first one stopped.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

import httpx

from veritask.definitions import durations
from veritask.execution import engines, local, port, wait_http
from veritask.ledger import errors, permits
from veritask.scheduling import collector, sharing
from veritask.scheduling.lease import SchedulerAlreadyRunning, SchedulerLease
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens
from veritask.services import alert_delivery, deadlines, definitions, metrics, operations
from veritask.services.errors import SchedulerRefused
from veritask.services.platform import Platform

log = logging.getLogger(__name__)

OUTBOX: Final = "outbox"
RESTART_DELAY_SECONDS: Final = 1.0
#: How often the lease's heartbeat is written and deletions are moved on.
HOUSEKEEPING_SECONDS: Final = 5.0
#: ``VERITASK_RETENTION``: how long the daily retention purge keeps finished runs' history
#: and logs, of every definition (each one's newest run stays); ``off`` keeps everything.
RETENTION_VARIABLE: Final = "VERITASK_RETENTION"
#: Without it, the ledger is bounded: about 90 days of tasks (docs/operations.md, sizing).
DEFAULT_RETENTION: Final = timedelta(days=90)
RETENTION_OFF: Final = "off"
#: ``VERITASK_DELETED_RETENTION=7d`` (the default): how long a deleted definition's attempts,
#: logs and results are kept before they are purged.
DELETED_RETENTION_VARIABLE: Final = "VERITASK_DELETED_RETENTION"
HOUSEKEEPING_ACTOR: Final = "housekeeping"
PURGE_EVERY: Final = timedelta(days=1)
#: How long after a failed purge the housekeeping tries again.
PURGE_RETRY: Final = timedelta(hours=1)
#: ``VERITASK_SEAL_INTERVAL``: how often the chains' heads are sealed in a signed checkpoint
#: (docs/integrity.md); ``off`` never (``veritask verify --seal`` still does).
SEAL_VARIABLE: Final = "VERITASK_SEAL_INTERVAL"
DEFAULT_SEAL_INTERVAL: Final = timedelta(minutes=10)


class SchedulerRuntime:
    """One scheduler with its lease, started and stopped as a unit."""

    def __init__(
        self,
        platform: Platform,
        *,
        commit_base_url: str | None,
        slots: int | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.platform = platform
        self.commit_base_url = commit_base_url
        self.slots = slots
        self.settings = settings
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lease: SchedulerLease | None = None
        self._scheduler: Scheduler | None = None
        self.executors: dict[str, port.Executor] = {}
        self.webhooks = alert_delivery.WebhookSettings.from_environment()
        self.wait_http_allow = wait_http.HttpAllow.from_environment(os.environ)
        self.retention = _retention_from_environment()
        self.deleted_retention = _deleted_retention_from_environment()
        self._purge_failed_at: datetime | None = None
        self.seal_interval = _seal_interval_from_environment()
        self._sealed_at: datetime | None = None

    @property
    def home(self) -> Path:
        return self.platform.home

    def start(self) -> None:
        """Take the lease (``SchedulerRefused`` if another scheduler holds it), then run.

        The lease is the scheduling layer's (``python -m veritask.scheduling`` takes the same
        one): on SQLite an flock beside the database plus a row in ``schedulers``.
        """
        lease = SchedulerLease(self.platform.ledger)
        try:
            lease.acquire()
        except SchedulerAlreadyRunning as exc:
            raise SchedulerRefused(str(exc)) from None
        self._lease = lease
        collector.tune()
        executor = local.LocalExecutor(home=self.home, slots=self.slots)
        # A supervisor left by an earlier start would give new attempts its old environment
        # (PYTHONPATH, secrets): replaced now, with a warning, if its settings differ.
        executor.replace_stale_supervisor()
        self.executors = {engines.LOCAL_EXECUTOR: executor, **engines.from_environment(os.environ)}
        scheduler = Scheduler(
            self.platform.ledger,
            executors=self.executors,
            tokens=AttemptTokens.from_home(self.home),
            outbox=self.home / OUTBOX,
            settings=self.settings,
            commit_base_url=self.commit_base_url,
            membership=sharing.membership_for(self.platform.ledger, lease.id),
            wait_http_allow=self.wait_http_allow,
        )
        # The scheduler adds the executors every scheduler has (the wait checker): deletions
        # clean up after those too.
        self.executors = dict(scheduler.dispatcher.executors)
        self._scheduler = scheduler
        self._threads = [
            threading.Thread(
                target=self._guarded, args=(scheduler.run,), name="veritask-scheduler", daemon=True
            ),
            threading.Thread(
                target=self._guarded,
                args=(self._housekeeping,),
                name="veritask-housekeeping",
                daemon=True,
            ),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loops, wait for them, give the lease up. Running attempts go on running:
        the local executor's workers outlive this process, and the next start recovers them."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _guarded(self, loop: Callable[[threading.Event], None]) -> None:
        """Run ``loop`` until stopped; after an unexpected error, start it again.

        The loops keep nothing in memory that the database does not hold, so starting one
        again is what a restart of the process would do, without taking the API down with it.
        """
        while not self._stop.is_set():
            try:
                loop(self._stop)
            except Exception:
                log.exception(
                    "%s failed; starting it again in %ss",
                    threading.current_thread().name,
                    RESTART_DELAY_SECONDS,
                )
                self._stop.wait(RESTART_DELAY_SECONDS)

    def _housekeeping(self, stop: threading.Event) -> None:
        """The lease's heartbeat, deletions, and the observability steps: metrics, late runs,
        alert webhooks, the retention purge when configured. Each step fails alone."""
        with httpx.Client() as http:
            while not stop.wait(HOUSEKEEPING_SECONDS):
                steps: list[tuple[str, Callable[[], object]]] = [
                    ("lease", self._beat),
                    ("deletions", self._advance_deletions),
                    ("metrics", self._record_metrics),
                    ("deadlines", lambda: deadlines.alert_late_runs(self.platform)),
                    ("alert webhooks", lambda: self._deliver_alerts(http)),
                    ("retention", self._purge_when_due),
                    ("seal", self._seal_when_due),
                ]
                for name, step in steps:
                    try:
                        step()
                    except Exception:  # one failed step never stops the others or the next pass
                        log.exception("housekeeping: %s failed; trying again", name)

    def _beat(self) -> None:
        if self._lease is not None:
            self._lease.beat()

    def _advance_deletions(self) -> None:
        definitions.advance_deletions(
            self.platform, executors=self.executors, retention=self.deleted_retention
        )

    def _record_metrics(self) -> None:
        metrics.flush_process_counts(self.platform)
        if self._lease is not None and self._scheduler is not None:
            slots = {
                name: executor.slots
                for name, executor in self.executors.items()
                if isinstance(executor, local.LocalExecutor)
            }
            metrics.record_scheduler(
                self.platform,
                scheduler_id=self._lease.id,
                last_tick_at=self._scheduler.last_tick_at,
                slots=slots,
            )
        metrics.observe_finished_instances(self.platform)

    def _deliver_alerts(self, http: httpx.Client) -> None:
        alert_delivery.deliver_due(self.platform, self.webhooks, http)

    def _seal_when_due(self) -> None:
        """Seal the chains that moved, once per interval (each scheduler: a seal that finds
        nothing new since another one's writes nothing)."""
        if self.seal_interval is None:
            return
        now = self.platform.now()
        if self._sealed_at is not None and now - self._sealed_at < self.seal_interval:
            return
        self._sealed_at = now
        operations.seal_chains(self.platform)

    def _purge_when_due(self) -> None:
        if self.retention is None:
            return
        now = self.platform.now()
        if self._purge_failed_at is not None and now - self._purge_failed_at < PURGE_RETRY:
            return
        last = operations.last_purge_at(self.platform, actor=HOUSEKEEPING_ACTOR)
        if last is not None and now - last < PURGE_EVERY:
            return
        try:
            operations.purge(
                self.platform,
                older_than=self.retention,
                dry_run=False,
                actor=HOUSEKEEPING_ACTOR,
                live_definitions=True,
            )
        except errors.LedgerError as exc:
            # Most often a scheduler host whose permit is not the one the database enrolled:
            # said once an hour, not at every housekeeping pass.
            self._purge_failed_at = now
            log.warning(
                "the retention purge failed (%s); trying again in %s. On PostgreSQL every "
                "scheduler host needs the enrolled %s, or %s=off on all but one",
                exc,
                PURGE_RETRY,
                permits.PERMIT_ENV,
                RETENTION_VARIABLE,
            )
            return
        self._purge_failed_at = None


def _seal_interval_from_environment() -> timedelta | None:
    configured = os.environ.get(SEAL_VARIABLE)
    if not configured:
        return DEFAULT_SEAL_INTERVAL
    if configured.strip().lower() == RETENTION_OFF:
        return None
    return _period(SEAL_VARIABLE, configured)


def _retention_from_environment() -> timedelta | None:
    configured = os.environ.get(RETENTION_VARIABLE)
    if not configured:
        return DEFAULT_RETENTION
    if configured.strip().lower() == RETENTION_OFF:
        return None
    return _period(RETENTION_VARIABLE, configured)


def _deleted_retention_from_environment() -> timedelta:
    configured = os.environ.get(DELETED_RETENTION_VARIABLE)
    if not configured:
        return definitions.DEFAULT_DELETED_RETENTION
    return _period(DELETED_RETENTION_VARIABLE, configured)


def _period(variable: str, configured: str) -> timedelta:
    try:
        period = durations.parse_duration(configured)
    except durations.InvalidDuration as exc:
        raise ValueError(f"{variable}: {exc}") from None
    if period <= timedelta():
        raise ValueError(f"{variable}: must be more than 0")
    return period

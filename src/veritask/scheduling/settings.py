"""How often each part of the scheduler's loop runs and how much it takes at once."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Settings:
    """Timings of one scheduler process; the defaults suit a single machine."""

    #: How long the loop sleeps after a tick that found nothing to do. New worker reports
    #: wake it earlier (the outbox is watched), so this bounds only the idle polling cost.
    idle_sleep: timedelta = timedelta(milliseconds=5)
    #: Leases and timeouts are checked this often (and schedules fired).
    monitor_every: timedelta = timedelta(seconds=1)
    #: Instances whose fate is unknown, stopping or stale are asked about this often.
    reconcile_every: timedelta = timedelta(seconds=2)
    #: Every active run is re-read this often even when no report touched it (a safety net:
    #: retry timers, runs changed by another process, a missed wake-up).
    full_scan_every: timedelta = timedelta(seconds=1)
    #: How long the success of a task nothing waits for may wait before its run is read again.
    #: Only the run's own end depends on it, and a run of thousands read once per window
    #: instead of once per tick costs far less (the run's end is known that much later).
    leaf_settle: timedelta = timedelta(milliseconds=100)
    #: While at least ``gather_from`` attempts are in flight, a tick that did work is followed
    #: by the next one no sooner than this after it began, so that the reports that come
    #: meanwhile are recorded together (scheduling/gathering.py). Zero turns it off.
    gather_window: timedelta = timedelta(milliseconds=50)
    #: How many attempts in flight (QUEUED or RUNNING, with a report in the last seconds)
    #: make the loop gather; with fewer, each report is recorded as soon as it comes.
    gather_from: int = 16
    #: An opened attempt the engine has not acknowledged by then is submitted again.
    submit_grace: timedelta = timedelta(seconds=30)
    #: A QUEUED attempt is checked against the engine after this long.
    queued_check: timedelta = timedelta(minutes=1)
    #: When set, replaces every task's ``cancel_window`` (how long the engine has to confirm a
    #: stop before the instance is CANCEL_FAILED); definitions cannot set it yet.
    cancel_window: timedelta | None = None
    #: An instance UP_FOR_RETRY this long past its ``retry_at`` raises a retry-timing alert.
    retry_late_after: timedelta = timedelta(minutes=1)
    #: A task waiting for a pool gains one point of priority per this much waiting, so that
    #: no priority waits for ever behind newer, higher ones; 0 turns aging off.
    pool_aging: timedelta = timedelta(minutes=1)
    #: A pool with a task waiting for its slots this long raises a ``queue_quota`` alert.
    pool_full_alert_after: timedelta = timedelta(minutes=5)
    #: How many events one transaction records at most, and how many instances a sweep reads
    #: per page.
    batch: int = 500
    #: A run of at least this many instances whose states have not moved since it was last
    #: read is skipped by the full scan (the database sums its states instead of sending them).
    digest_from: int = 500

    def __post_init__(self) -> None:
        for name in (
            "idle_sleep",
            "monitor_every",
            "reconcile_every",
            "full_scan_every",
            "leaf_settle",
            "gather_window",
            "submit_grace",
            "queued_check",
            "retry_late_after",
            "pool_aging",
            "pool_full_alert_after",
        ):
            value: timedelta = getattr(self, name)
            if value < timedelta(0):
                raise ValueError(f"{name}: must not be negative, got {value}")
        if self.cancel_window is not None and self.cancel_window <= timedelta(0):
            raise ValueError(f"cancel_window: must be positive, got {self.cancel_window}")
        if self.gather_from < 1:
            raise ValueError(f"gather_from: must be 1 or more, got {self.gather_from}")
        if self.digest_from < 1:
            raise ValueError(f"digest_from: must be 1 or more, got {self.digest_from}")
        if self.batch < 1:
            raise ValueError(f"batch: must be 1 or more, got {self.batch}")

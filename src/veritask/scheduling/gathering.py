"""When the loop gathers reports before its next tick, and for how long.

A tick has a cost of its own whatever it records: a transaction, the lookups of the batch,
the run reads. While many attempts are in flight, reports come faster than ticks can be made
cheap, and a loop that ticks as soon as it can records them two or three at a time: measured
on the Celery bench (1,000 attempts in flight), the loop spent 1.8-2.3 ms of CPU per task
ticking at once and 0.9-1.4 ms starting a tick at most every 50 ms.

Gathering delays a report by up to the window, so it is kept for when there are many
attempts in flight: a chain's single attempt, or a few, still has each report recorded (and
the next task opened) as soon as it comes. An attempt counts as in flight from the report
that made it QUEUED or RUNNING until the report that ends that, or until it has been silent
for ``FORGET_AFTER_SECONDS``: a silent attempt sends no reports to gather, and the map stays
bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: An attempt with no report for this long no longer counts as in flight.
FORGET_AFTER_SECONDS = 10.0


class Gathering:
    """Counts the attempts in flight as the loop records their reports, and says how long the
    loop waits before its next tick."""

    def __init__(
        self,
        *,
        window: float,
        from_in_flight: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.from_in_flight = from_in_flight
        self._clock = clock
        #: Instance id -> when its last report left it in flight (monotonic seconds).
        self._in_flight: dict[str, float] = {}
        self._pruned_at = clock()

    def note(self, instance_id: str, *, in_flight: bool) -> None:
        """Record what a report did to its instance: in flight (QUEUED or RUNNING) or not."""
        # Removed first, so that the map stays in the order of the last reports (_prune).
        self._in_flight.pop(instance_id, None)
        if in_flight:
            self._in_flight[instance_id] = self._clock()

    @property
    def in_flight(self) -> int:
        self._prune()
        return len(self._in_flight)

    def pause_after(self, tick_started: float) -> float:
        """Seconds to wait before the next tick after a tick that did work, begun at
        ``tick_started`` (monotonic): what is left of the window while enough attempts are
        in flight, else none."""
        if self.window <= 0 or self.in_flight < self.from_in_flight:
            return 0.0
        return max(0.0, tick_started + self.window - self._clock())

    def _prune(self) -> None:
        now = self._clock()
        if now - self._pruned_at < 1.0:
            return
        self._pruned_at = now
        forget_before = now - FORGET_AFTER_SECONDS
        # Oldest report first (``note`` re-inserts), so the scan stops at the first fresh one.
        stale = []
        for instance_id, seen in self._in_flight.items():
            if seen >= forget_before:
                break
            stale.append(instance_id)
        for instance_id in stale:
            del self._in_flight[instance_id]

"""Work an engine still runs that the ledger no longer follows: stopped, with the evidence.

An engine that can list what it holds (``port.Listing``: the container engine's labelled
containers) is asked on every reconciliation round and at start. A running attempt of this
platform whose attempt is not live any more, because a later attempt superseded it, the
reconciler fenced it, or the ledger holds its end, is asked to stop, and an
``engine_observed`` event on that attempt keeps what the engine showed and that it was stopped
(kept on that attempt's record only: it changes nothing the instance decided).

Several platforms may share one engine. An attempt is this platform's only when the ledger
opened it under the very token whose hash the engine holds for it; one whose instance the
ledger does not hold is this platform's only when its run is (run ids are unique across
platforms): it is stopped, logged and alerted, as no attempt record exists to keep the
evidence. Anything else is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from veritask.core import alert_messages, decide, new_events
from veritask.core.fold import InstanceSnapshot
from veritask.core.states import AttemptState, EngineState
from veritask.execution import port
from veritask.execution.errors import ExecutorError
from veritask.ledger import alerts, dialects, queries
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import dispatch

log = logging.getLogger(__name__)

Owns = Callable[[str], bool]


class Strays:
    """Finds and stops the running attempts of this platform that are not live."""

    def __init__(self, ledger: Ledger, executors: Mapping[str, port.Executor]) -> None:
        self.ledger = ledger
        self.executors = executors
        #: What this process already recorded a stop for: asked again, not recorded again.
        self._recorded: set[str] = set()

    def sweep(self, now: datetime, owns: Owns) -> int:
        """Stop what is stray on every engine that lists its attempts; how many were stopped
        for the first time. An engine that cannot be asked, or one attempt that errors, never
        stops the sweep."""
        stopped = 0
        seen: set[str] = set()
        for name, executor in self.executors.items():
            if not isinstance(executor, port.Listing):
                continue
            try:
                held = executor.held_attempts()
            except ExecutorError as exc:
                log.warning("listing the attempts the %s engine holds failed: %s", name, exc)
                continue
            for item in held:
                if not item.running:
                    continue
                seen.add(item.external_id)
                try:
                    stopped += self._judge(executor, item, now, owns)
                except Exception:  # one attempt never stops the sweep
                    log.exception(
                        "judging %s failed",
                        item.external_id,
                        extra={"instance_id": item.instance_id, "attempt_no": item.attempt_no},
                    )
        self._recorded &= seen  # ended: nothing to ask again
        return stopped

    def _judge(self, executor: port.Executor, item: port.Held, now: datetime, owns: Owns) -> int:
        loaded = self.ledger.snapshot(item.instance_id)
        if loaded is None:
            return self._unheld(executor, item, owns)
        snapshot, _ = loaded
        if _token_hash(snapshot, item.attempt_no) != item.token_hash:
            return 0  # another platform's attempt (or one this ledger never opened)
        with dialects.read_transaction(self.ledger.engine) as connection:
            row = queries.get_instance(connection, item.instance_id)
        if row is None or not owns(row.run_id):
            return 0  # the scheduler that owns its run decides
        why = stray_reason(snapshot, item.attempt_no)
        if why is None:
            return 0
        if not self._stop(executor, item):
            return 0
        if item.external_id in self._recorded:
            return 0
        details: dict[str, port.DetailValue] = {**item.details, "stray": why, "stop_asked": True}
        self.ledger.apply(
            new_events.engine_observed(
                event_id=dispatch.new_event_id(),
                instance_id=item.instance_id,
                attempt_no=item.attempt_no,
                event_time=now,
                observation=decide.Observation(
                    engine_state=EngineState.RUNNING,
                    source=str(item.source),
                    observed_at=now,
                    details=dict(details),
                ),
            )
        )
        self._recorded.add(item.external_id)
        log.warning(
            "stopping %s: attempt %d is %s, and the engine still runs it",
            item.external_id,
            item.attempt_no,
            why,
            extra={"run_id": row.run_id, "instance_id": item.instance_id},
        )
        return 1

    def _unheld(self, executor: port.Executor, item: port.Held, owns: Owns) -> int:
        """An attempt of an instance the ledger does not hold: stopped only when its run is
        this platform's (and this scheduler's), with a log line and an alert."""
        if item.run_id is None:
            return 0
        with dialects.read_transaction(self.ledger.engine) as connection:
            run = queries.get_run(connection, item.run_id)
        if run is None or not owns(item.run_id) or not self._stop(executor, item):
            return 0
        if item.external_id in self._recorded:
            return 0
        self._recorded.add(item.external_id)
        log.warning(
            "stopping %s: the ledger holds no instance %s (run %s)",
            item.external_id,
            item.instance_id,
            item.run_id,
            extra={"run_id": item.run_id},
        )
        alerts.raise_quietly(
            self.ledger,
            category=AlertCategory.ENGINE,
            dedup_key=f"stray:{item.external_id}",
            message=alert_messages.STRAY_STOPPED.format(
                external_id=item.external_id, attempt_no=item.attempt_no
            ),
            run_id=item.run_id,
            evidence={"instance_id": item.instance_id, "engine": dict(item.details)},
        )
        return 1

    def _stop(self, executor: port.Executor, item: port.Held) -> bool:
        try:
            executor.cancel(external_id=item.external_id)
        except ExecutorError as exc:
            log.warning("stopping %s failed: %s", item.external_id, exc)
            return False
        return True


def stray_reason(snapshot: InstanceSnapshot, attempt_no: int) -> str | None:
    """Why attempt ``attempt_no`` is not live (``superseded``, ``fenced``, ``ended``), or None
    when it is the instance's current attempt and still active."""
    if attempt_no < snapshot.epoch:
        return "superseded"
    view = snapshot.attempt(attempt_no)
    if view is None:
        return None
    if view.state is AttemptState.ABANDONED:
        return "fenced"
    if view.state.is_terminal:
        return "ended"
    return None


def _token_hash(snapshot: InstanceSnapshot, attempt_no: int) -> str | None:
    facts = snapshot.facts.attempt(attempt_no)
    found = facts.opened.evidence.get("token_hash") if facts and facts.opened else None
    return found if isinstance(found, str) else None

"""Reports sent on an attempt's behalf by a Veritask process that watches its engine, where no
worker of ours runs beside the work (a SQL statement, a container, a Spark driver).

A thread of the process that submitted the attempt (or of one that took it over through
``port.Resuming``) asks the executor's ``describe`` and reports what it sees with the attempt's
token, as a worker would. Any process that holds the token may take over the watching, so the
numbers must agree between processes that know nothing of each other: ``started`` is report 1,
and each later report is numbered by a clock every watcher reads alike (3 plus the milliseconds
since a moment the engine keeps, e.g. the start it shows). Report 2 is left to the engines that
report a first phase with ``started`` (the SQL engine's ``executing``).

``Watch`` is what is engine-neutral: ``started`` once the observation shows a start,
``heartbeat`` every heartbeat interval while the engine says the work runs, ``completed`` with
``describe``'s answer once it ended. An engine says what its start, its beats and its end look
like by overriding a few methods. ``follow`` is the loop of one watcher thread; ``Watchers``
keeps an executor's threads, one per attempt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from veritask.execution import errors, port, spool, transports, wire

log = logging.getLogger(__name__)

STARTED_SEQ: Final = 1
_CLOCK_SEQ_BASE: Final = 3
#: How often a watcher looks at the engine before the work starts, and after.
LOOK_BEFORE_START_SECONDS: Final = 0.1
LOOK_WHILE_RUNNING_SECONDS: Final = 0.5


def clock_seq(started_at: datetime, engine_now: datetime) -> int:
    """The number of a report made at ``engine_now``, counted from ``started_at``."""
    elapsed = max(0.0, (engine_now - started_at).total_seconds())
    return _CLOCK_SEQ_BASE + int(elapsed * 1000)


class Reporter:
    """Sends one attempt's reports to the platform its spec names; never raises.

    A report that cannot be delivered is dropped with a warning: the next heartbeat or the
    reconciler's own look at the engine says the same again.
    """

    def __init__(self, spec: port.AttemptSpec) -> None:
        self.spec = spec
        self._transport: transports.Transport | None = None

    def event(
        self,
        kind: wire.WorkerEventKind,
        evidence: wire.Evidence,
        *,
        seq: int,
        event_time: datetime,
    ) -> wire.WorkerEvent:
        """The attempt's report, signed with its token."""
        return wire.make_event(
            kind=kind,
            instance_id=self.spec.instance_id,
            attempt_no=self.spec.attempt_no,
            attempt_token=self.spec.attempt_token,
            seq=seq,
            evidence=evidence,
            event_time=event_time,
        )

    def send(
        self,
        kind: wire.WorkerEventKind,
        evidence: wire.Evidence,
        *,
        seq: int,
        event_time: datetime,
    ) -> None:
        event = self.event(kind, evidence, seq=seq, event_time=event_time)
        try:
            self._deliver(event)
        except OSError as exc:
            log.warning(
                "could not report %s of %s/%s: %s",
                kind,
                self.spec.instance_id,
                self.spec.attempt_no,
                exc,
            )

    def _deliver(self, event: wire.WorkerEvent) -> None:
        callback = self.spec.callback
        if isinstance(callback, port.OutboxCallback):
            # The event file is the only copy: the platform deletes it once recorded.
            transports.post(callback.directory, event)
            return
        if self._transport is None:
            self._transport = transports.make_transport(self.spec)
        delivery = self._transport.deliver(spooled=spool.SpooledEvent(Path(), event))
        if delivery.outcome is not transports.DeliveryOutcome.DELIVERED:
            raise OSError(delivery.detail)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def completed_evidence(observation: port.Observation) -> wire.CompletedEvidence:
    """The engine's word on how the attempt ended (``describe``), as a completion report: the
    category, the engine's error (``details["error_message"]``) when it did not succeed, and
    the whole answer under ``engine``."""
    evidence = wire.CompletedEvidence(
        exit_code=observation.exit_code,
        signal=None,
        error_category=(observation.error_category or port.ErrorCategory.TASK_ERROR).value,
        commit_marker=None,
        log_path="",
        output=None,
        engine={
            "engine_state": observation.engine_state.value,
            "source": observation.source.value,
            "engine_id": observation.engine_id,
            "details": dict(observation.details),
        },
    )
    message = observation.details.get("error_message")
    failed = observation.engine_state is not port.EngineState.SUCCEEDED
    if failed and isinstance(message, str) and message:
        evidence["error_message"] = message
    return evidence


class Watch:
    """One attempt's watcher: ``look`` reports what an observation shows.

    An engine's watcher overrides ``started_evidence`` (who runs the work), and where it needs
    to ``beating`` (when the engine vouches that the work runs), ``numbered_from`` (the moment
    report numbers count from) and ``ended_evidence``.
    """

    def __init__(self, spec: port.AttemptSpec) -> None:
        self.spec = spec
        self.reporter = Reporter(spec)
        self.beat_seconds = spec.heartbeat_interval.total_seconds()
        self.started_at: datetime | None = None
        self.numbered_since: datetime | None = None
        self.beat_due = 0.0

    # --- what an engine says --------------------------------------------------------------

    def started_evidence(
        self, observation: port.Observation, started_at: datetime
    ) -> wire.Evidence:
        raise NotImplementedError

    def beating(self, observation: port.Observation) -> bool:
        """True when the engine's answer vouches that the work runs now."""
        return observation.engine_state is port.EngineState.RUNNING

    def numbered_from(self, observation: port.Observation, started_at: datetime) -> datetime:
        """The moment the reports' numbers count from: the same for every watcher."""
        return started_at

    def ended_evidence(self, observation: port.Observation) -> wire.CompletedEvidence:
        return completed_evidence(observation)

    # --- the watching ---------------------------------------------------------------------

    def pause(self) -> float:
        if self.started_at is None:
            return LOOK_BEFORE_START_SECONDS
        return min(LOOK_WHILE_RUNNING_SECONDS, self.beat_seconds)

    def look(self, observation: port.Observation) -> bool:
        """Report what ``observation`` shows; True when there is nothing left to watch."""
        now = datetime.now(UTC)
        if observation.started_at is not None and self.started_at is None:
            self._report_start(observation, observation.started_at)
        if observation.engine_state is port.EngineState.NOT_FOUND:
            return True  # gone under us: the reconciler asks the engine and decides
        if observation.ended:
            if self.started_at is not None:
                self._report_end(observation, now)
            return True
        since = self.numbered_since
        if since is not None and self.beating(observation) and time.monotonic() >= self.beat_due:
            self.reporter.send("heartbeat", {}, seq=clock_seq(since, now), event_time=now)
            self.beat_due = time.monotonic() + self.beat_seconds
        return False

    def _report_start(self, observation: port.Observation, started_at: datetime) -> None:
        evidence = self.started_evidence(observation, started_at)
        self.reporter.send("started", evidence, seq=STARTED_SEQ, event_time=started_at)
        self.started_at = started_at
        self.numbered_since = self.numbered_from(observation, started_at)
        self.beat_due = time.monotonic() + self.beat_seconds

    def _report_end(self, observation: port.Observation, now: datetime) -> None:
        since = self.numbered_since
        if since is None:
            return
        ended_at = observation.ended_at or now
        seq = clock_seq(since, max(now, ended_at)) + 1
        self.reporter.send(
            "completed", self.ended_evidence(observation), seq=seq, event_time=ended_at
        )

    def close(self) -> None:
        self.reporter.close()


def follow(
    watch: Watch, describe: Callable[[], port.Observation], closed: threading.Event, what: str
) -> None:
    """Look at the engine until the work ends (or is gone), reporting what changed; an engine
    that cannot be reached is asked again (the reconciler decides if it never answers)."""
    try:
        while not closed.is_set():
            try:
                if watch.look(describe()):
                    return
            except (errors.ExecutorError, RuntimeError) as exc:  # RuntimeError: closed
                log.warning("watching %s: %s", what, exc)
            closed.wait(watch.pause())
    finally:
        watch.close()


class Watchers:
    """An executor's watcher threads, at most one per attempt (by a key of the executor's)."""

    def __init__(self, closed: threading.Event) -> None:
        self.closed = closed
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    def watching(self, key: str) -> bool:
        with self._lock:
            return key in self._threads

    def start(
        self, key: str, watch: Callable[[], Watch], describe: Callable[[], port.Observation]
    ) -> None:
        """Watch ``key`` from a thread of its own unless one does already."""
        with self._lock:
            if key in self._threads:
                return
            thread = threading.Thread(
                target=self._run, args=(key, watch, describe), name=f"watch-{key}", daemon=True
            )
            self._threads[key] = thread
        thread.start()

    def _run(
        self, key: str, watch: Callable[[], Watch], describe: Callable[[], port.Observation]
    ) -> None:
        try:
            follow(watch(), describe, self.closed, key)
        finally:
            with self._lock:
                self._threads.pop(key, None)

    def wait(self, timeout: float) -> None:
        """Wait until every thread has reported the end of what it watches (tests, shutdown)."""
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout)

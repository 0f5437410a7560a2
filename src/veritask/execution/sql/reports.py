"""The reports of a SQL attempt, sent on its behalf: no worker of ours runs the statement.

The server runs it; a thread of a Veritask process watches the server and reports what it sees
with the attempt's token, as a worker would (``started``, ``progress``, ``heartbeat``,
``completed``). Any process that holds the token may take over the watching, so the numbers
must agree between processes that know nothing of each other: ``started`` is report 1, the
first phase report 2, and each later report is numbered by the server's clock (3 plus the
milliseconds since the statement started), which every watcher of one server reads alike.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from veritask.core import jsontypes
from veritask.execution import port, spool, transports, wire

log = logging.getLogger(__name__)

#: The phases of a SQL attempt that are reports. Before ``executing`` the attempt is SCHEDULED
#: (queued) or QUEUED (submitted: the server has the script): a report would prove a start.
EXECUTING = "executing"
WRITING_RESULTS = "writing results"

STARTED_SEQ = 1
EXECUTING_SEQ = 2
_CLOCK_SEQ_BASE = 3


def clock_seq(started_at: datetime, server_now: datetime) -> int:
    """The number of a report made at ``server_now`` by the server's clock."""
    elapsed = max(0.0, (server_now - started_at).total_seconds())
    return _CLOCK_SEQ_BASE + int(elapsed * 1000)


class Reporter:
    """Sends one attempt's reports to the platform its spec names; never raises.

    A report that cannot be delivered is dropped with a warning: the next heartbeat or the
    reconciler's own look at the server says the same again.
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


def started_evidence(
    *,
    connection: str,
    server: jsontypes.JSONObject,
    backend_pid: int,
    backend_start: datetime,
    query_start: datetime | None,
) -> wire.SqlStartedEvidence:
    """Which server process runs the statement, and which server that is."""
    return wire.SqlStartedEvidence(
        worker=f"sql:{connection}",
        host=str(server.get("address") or ""),
        pid=backend_pid,
        backend_start=wire.format_time(backend_start),
        query_start=None if query_start is None else wire.format_time(query_start),
        server=server,
    )


def progress_evidence(phase: str) -> wire.ProgressEvidence:
    return wire.ProgressEvidence(phase=phase, done=None, total=None, message=None)


def completed_evidence(observation: port.Observation) -> wire.CompletedEvidence:
    """The server's word on how the statement ended (``describe``), as a completion report."""
    evidence = wire.CompletedEvidence(
        exit_code=None,
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
    sqlstate = observation.details.get("error_sqlstate")
    if observation.engine_state is not port.EngineState.SUCCEEDED and isinstance(message, str):
        error = message if sqlstate is None else f"{message} (SQLSTATE {sqlstate})"
        evidence["error_message"] = error
    return evidence

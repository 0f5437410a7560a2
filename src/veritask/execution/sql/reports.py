"""The reports of a SQL attempt, sent on its behalf: no worker of ours runs the statement.

The server runs it; a thread of a Veritask process watches the server and reports what it sees
with the attempt's token, as a worker would (``started``, ``progress``, ``heartbeat``,
``completed``), through ``engine_watch.Reporter``. Any process that holds the token may take
over the watching, so the numbers must agree between processes that know nothing of each
other: ``started`` is report 1, the first phase report 2, and each later report is numbered by
the server's clock (``engine_watch.clock_seq``: 3 plus the milliseconds since the statement
started), which every watcher of one server reads alike.
"""

from __future__ import annotations

from datetime import datetime

from veritask.core import jsontypes
from veritask.execution import engine_watch, port, wire

#: The phases of a SQL attempt that are reports. Before ``executing`` the attempt is SCHEDULED
#: (queued) or QUEUED (submitted: the server has the script): a report would prove a start.
EXECUTING = "executing"
WRITING_RESULTS = "writing results"

#: Report 1 is ``started`` (``engine_watch.STARTED_SEQ``); the first phase, sent with it, is 2.
EXECUTING_SEQ = 2


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
    """The server's word on how the statement ended (``describe``), as a completion report,
    its error with the SQLSTATE: ``division by zero (SQLSTATE 22012)``."""
    evidence = engine_watch.completed_evidence(observation)
    evidence["exit_code"] = None
    message = observation.details.get("error_message")
    sqlstate = observation.details.get("error_sqlstate")
    if observation.engine_state is not port.EngineState.SUCCEEDED and isinstance(message, str):
        evidence["error_message"] = (
            message if sqlstate is None else f"{message} (SQLSTATE {sqlstate})"
        )
    return evidence

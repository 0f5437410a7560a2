"""What a Veritask Celery worker runs for one message: the Veritask worker program.

For each delivery: take the attempt's claim (``SET NX``); a delivery that finds it taken is
refused, the refusal is recorded as evidence, and the message is acknowledged without a
result, so the result of the delivery that ran is never overwritten. The claiming delivery
writes the spec into an attempt directory under the worker's home and runs it with the same
worker program as the local executor (``worker.run_attempt_here``), so tokens, heartbeats,
progress, the spool, the log and the exit record behave the same. The pool process runs it
itself: it is long-lived already, and handing each attempt to a worker process of its own cost
about half a millisecond of CPU per attempt (docs/executors.md, section 6). Beside the run, in
the worker's loop, the delivery refreshes the attempt's lease, ships the log to Redis in chunks
and turns the stop request in Redis into the attempt's stop; a revoke's SIGTERM reaches the
worker program's own handler. The task's process is the pool process's child, in the host's
session: whatever takes the host down takes it down too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from celery import Celery
from celery.exceptions import Ignore

from veritask.core import jsontypes
from veritask.execution import layout, port, records, wire, worker
from veritask.execution.celery import app as celery_app
from veritask.execution.celery import claims as claim_records
from veritask.execution.celery import control
from veritask.execution.celery.settings import CelerySettings

log = logging.getLogger(__name__)
#: How much of the log one shipping step reads at most.
_LOG_CHUNK = 256 * 1024


@dataclass
class WorkerContext:
    """What every delivery in this Celery worker needs; set once before the pool forks."""

    settings: CelerySettings
    home: layout.ExecutorHome
    claims: claim_records.Claims


def register(app: Celery, context: WorkerContext) -> None:
    """Register the run-attempt task on ``app`` for a worker with this context."""

    # The result goes to the attempt's own record (``Claims.finish``), in the transaction that
    # drops the lease; Celery stores only what a delivery raised. The task returns nothing:
    # Celery would otherwise render what it returned for its log line and pickle it back to
    # the consumer, for every delivery, and neither is read.
    control.register(context.home)

    @app.task(  # type: ignore[untyped-decorator]
        name=celery_app.RUN_ATTEMPT, bind=True, ignore_result=True
    )
    def run_attempt(self: Any, encoded_spec: jsontypes.JSONObject) -> None:
        request = self.request
        delivery = request.delivery_info or {}
        run_delivery(
            context,
            encoded_spec,
            hostname=str(request.hostname),
            redelivered=bool(delivery.get("redelivered")),
        )


def run_delivery(
    context: WorkerContext, encoded_spec: jsontypes.JSONObject, *, hostname: str, redelivered: bool
) -> None:
    received = records.decode_spec(encoded_spec)
    spec = _reporting_to_this_hosts_api(received, context.settings)
    key = claim_records.attempt_key(spec.instance_id, spec.attempt_no)
    me = f"{hostname}:{os.getpid()}"
    claims = context.claims
    # One round trip: the claim, the first lease (the delivery is alive: it holds it from the
    # claim on) and whether a stop came before it.
    claimed, stop_requested = claims.claim_and_lease(key, me, lease=context.settings.lease)
    if not claimed:
        holder = claims.holder(key)
        evidence: jsontypes.JSONObject = {
            "refused_by": me,
            "refused_at": wire.format_time(wire.utc_now()),
            "claimed_by": holder.worker if holder else None,
            "claimed_at": holder.claimed_at if holder else None,
            "redelivered": redelivered,
        }
        claims.record_refusal(key, evidence)
        log.warning("refused a second delivery of attempt %s: %s", key, evidence)
        raise Ignore()  # acknowledged, and no result stored over the one that ran
    attempt = context.home.attempt(spec.instance_id, spec.attempt_no)
    attempt.path.mkdir(parents=True, exist_ok=True, mode=0o700)
    # What came is written as it came, unless this host changed where the worker reports.
    written = encoded_spec if spec is received else records.encode_spec(spec)
    layout.write_json_atomically(attempt.spec, written, durable=False)

    def stop_before_the_run(signum: int, frame: FrameType | None) -> None:
        # A revoke's SIGTERM before the worker program's own handler is in place: on disk,
        # where the run looks before it starts the task.
        layout.create_exclusively(attempt.cancel_request, wire.format_time(wire.utc_now()).encode())

    if stop_requested:
        # The worker sees the request and completes as cancelled without starting the task.
        stop_before_the_run(signal.SIGTERM, None)
    beside = _Beside(context, key, me, attempt.log, spec.log_cap_bytes)
    previous_term = signal.signal(signal.SIGTERM, stop_before_the_run)
    try:
        _link_process_record(context.home, attempt.worker_record)
        ran = worker.run_attempt_here(attempt, spec, companion=beside)
    except BaseException:
        claims.release_lease(key)  # the delivery is over, though it has no result to store
        raise
    finally:
        signal.signal(signal.SIGTERM, previous_term)
    beside.ship_log()
    # Read back only when the run has none in hand: another worker's, if anyone's.
    record = ran.exit_record or records.read_exit_record(attempt)
    result: jsontypes.JSONObject = {
        "worker": me,
        "host": socket.gethostname(),
        "worker_status": ran.status,
        "attempt_dir": str(attempt.path),
        "exit_record": None if record is None else record.encode(),
    }
    claims.finish(key, result)


class _Beside:
    """The delivery's part while its attempt runs (``worker.Companion``): the lease, the log,
    and the stop requested in Redis."""

    def __init__(
        self, context: WorkerContext, key: str, me: str, log_path: Path, log_cap: int
    ) -> None:
        self.interval = context.settings.lease_refresh.total_seconds()
        self._claims = context.claims
        self._lease = context.settings.lease
        self._key = key
        self._me = me
        self._log_path = log_path
        self._log_cap = log_cap
        self._shipped = 0

    def tick(self) -> bool:
        self.ship_log()
        self._claims.refresh_lease(self._key, self._me, lease=self._lease)
        return self._claims.cancel_requested(self._key)

    def ship_log(self) -> None:
        """Append what the log gained since the last call to Redis."""
        self._shipped = _ship_log(
            self._claims, self._key, self._log_path, self._shipped, self._log_cap
        )


#: This pool process's record (``workers/<pid>-<ticks>.json``), written once: each attempt's
#: ``worker.json`` is a link to it.
_record: tuple[int, Path] | None = None


def _link_process_record(home: layout.ExecutorHome, link: Path) -> None:
    """Give ``link`` as a second name of this pool process's record, written when missing."""
    global _record
    if _record is not None and _record[0] == os.getpid():
        with contextlib.suppress(FileNotFoundError):  # the workers' directory was cleaned
            os.link(_record[1], link)
            return
    identity = records.ProcessRecord.of_worker(os.getpid())
    path = home.worker_record(identity.pid, identity.start_ticks)
    home.workers.mkdir(exist_ok=True)
    records.write_process_record(path, identity)
    _record = (identity.pid, path)
    os.link(path, link)


def _reporting_to_this_hosts_api(
    spec: port.AttemptSpec, settings: CelerySettings
) -> port.AttemptSpec:
    """A worker given a callback URL of its own reports there: each host reaches the API
    through the address it can reach (its nearest API server), whatever the scheduler sent."""
    if settings.callback_url is None:
        return spec
    if isinstance(spec.callback, port.HttpCallback):
        callback = dataclasses.replace(spec.callback, base_url=settings.callback_url)
    else:
        callback = port.HttpCallback(settings.callback_url)
    return dataclasses.replace(spec, callback=callback)


def _ship_log(claims: claim_records.Claims, key: str, path: Path, shipped: int, cap: int) -> int:
    """Append what the log gained since ``shipped`` to Redis; returns the new offset."""
    if shipped >= cap:
        return shipped
    try:
        with path.open("rb") as handle:
            handle.seek(shipped)
            chunk = handle.read(min(_LOG_CHUNK, cap - shipped))
    except FileNotFoundError:
        return shipped
    if chunk:
        claims.append_log(key, chunk, cap=cap)
    return shipped + len(chunk)


def decode_result(result: object) -> jsontypes.JSONObject | None:
    """A run-attempt result as the backend returns it (a dict, or JSON text)."""
    if isinstance(result, str):
        with contextlib.suppress(ValueError):
            result = json.loads(result)
    return result if isinstance(result, dict) else None

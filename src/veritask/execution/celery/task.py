"""What a Veritask Celery worker runs for one message: the Veritask worker program.

For each delivery: take the attempt's claim (``SET NX``); a delivery that finds it taken is
refused, the refusal is recorded as evidence, and the message is acknowledged without a
result, so the result of the delivery that ran is never overwritten. The claiming delivery
writes the spec into an attempt directory under the worker's home and forks the same worker
program as the local executor (``worker.main``), so tokens, heartbeats, progress, the spool,
the log and the exit record behave the same. While it runs, this process refreshes the
attempt's lease, ships the log to Redis in chunks and forwards a stop (a revoke's SIGTERM, or
the stop request in Redis) to the worker, which stops the task after its grace period.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import select
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

    @app.task(name=celery_app.RUN_ATTEMPT, bind=True)  # type: ignore[untyped-decorator]
    def run_attempt(self: Any, encoded_spec: jsontypes.JSONObject) -> jsontypes.JSONObject:
        request = self.request
        delivery = request.delivery_info or {}
        return run_delivery(
            context,
            encoded_spec,
            hostname=str(request.hostname),
            redelivered=bool(delivery.get("redelivered")),
        )


def run_delivery(
    context: WorkerContext, encoded_spec: jsontypes.JSONObject, *, hostname: str, redelivered: bool
) -> jsontypes.JSONObject:
    spec = _reporting_to_this_hosts_api(records.decode_spec(encoded_spec), context.settings)
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
    layout.write_json_atomically(attempt.spec, records.encode_spec(spec), durable=False)
    if stop_requested:
        # The worker sees the request and completes as cancelled without starting the task.
        layout.create_exclusively(attempt.cancel_request, wire.format_time(wire.utc_now()).encode())
    try:
        status = _run_worker(context, attempt, key, me, spec.log_cap_bytes)
    finally:
        claims.release_lease(key)
    record = records.read_exit_record(attempt)
    exit_record = None if record is None else record.encode()
    return {
        "worker": me,
        "host": socket.gethostname(),
        "worker_status": status,
        "attempt_dir": str(attempt.path),
        "exit_record": exit_record,
    }


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


def _run_worker(
    context: WorkerContext, attempt: layout.AttemptDir, key: str, me: str, log_cap: int
) -> int:
    """Fork the worker program on the attempt directory and watch it until it ends."""
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        raise
    if pid == 0:
        _become_worker(attempt)
    signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    stop_sent = False

    def forward_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop_sent
        stop_sent = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    # A revoke with terminate sends SIGTERM to this pool process: it becomes the worker's stop.
    previous_term = signal.signal(signal.SIGTERM, forward_stop)
    pidfd = os.pidfd_open(pid)
    shipped = 0
    refresh = context.settings.lease_refresh.total_seconds()
    try:
        while True:
            ready, _, _ = select.select([pidfd], [], [], refresh)
            shipped = _ship_log(context.claims, key, attempt.log, shipped, log_cap)
            if ready:
                break
            context.claims.refresh_lease(key, me, lease=context.settings.lease)
            if not stop_sent and context.claims.cancel_requested(key):
                forward_stop(signal.SIGTERM, None)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
        signal.signal(signal.SIGTERM, previous_term)
    _ship_log(context.claims, key, attempt.log, shipped, log_cap)
    return os.waitstatus_to_exitcode(status)


def _become_worker(attempt: layout.AttemptDir) -> None:
    status = 70
    try:
        os.setpgid(0, 0)
        with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
            comm.write("veritask-worker")
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the pool's pipes and the broker's sockets
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        status = worker.main([str(attempt.spec)])
    except BaseException:
        log.exception("the worker of %s failed", attempt.path)
    finally:
        os._exit(status)


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

"""What a Veritask Celery worker runs for one message: the Veritask worker program.

For each delivery: take the attempt's claim (``SET NX``); a delivery that finds it taken is
refused, the refusal is recorded as evidence, and the message is acknowledged without a
result, so the result of the delivery that ran is never overwritten. The claiming delivery
writes the spec into an attempt directory under the worker's home and gives it to the same
worker program as the local executor, so tokens, heartbeats, progress, the spool, the log and
the exit record behave the same. While it runs, this process refreshes the
attempt's lease, ships the log to Redis in chunks and forwards a stop (a revoke's SIGTERM, or
the stop request in Redis) to the worker, which stops the task after its grace period.

Each pool process keeps its worker warm, as the local supervisor does (docs/executors.md,
*Warm workers*): a worker done with an attempt is given the pool process's next delivery
instead of ending, so a delivery does not pay for forking the pool process (tens of MiB) and
the copies of the pages both then write. The worker is the pool process's child, in the host's
session: whatever takes the host down takes it down too.
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
from veritask.execution import layout, port, procfs, records, wire, worker
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

    # The result goes to the attempt's own record (``Claims.finish``), in the transaction that
    # drops the lease; Celery stores only what a delivery raised. The task returns nothing:
    # Celery would otherwise render what it returned for its log line and pickle it back to
    # the consumer, for every delivery, and neither is read.
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
    if stop_requested:
        # The worker sees the request and completes as cancelled without starting the task.
        layout.create_exclusively(attempt.cancel_request, wire.format_time(wire.utc_now()).encode())
    try:
        status, record = _run_worker(context, attempt, key, me, spec.log_cap_bytes)
    except BaseException:
        claims.release_lease(key)  # the delivery is over, though it has no result to store
        raise
    result: jsontypes.JSONObject = {
        "worker": me,
        "host": socket.gethostname(),
        "worker_status": status,
        "attempt_dir": str(attempt.path),
        "exit_record": None if record is None else record.encode(),
    }
    claims.finish(key, result)


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
) -> tuple[int, records.ExitRecord | None]:
    """Give the attempt to this pool process's warm worker and watch it until the attempt is
    over; returns the worker's status for it, and the attempt's exit record if there is one."""
    warm: _WarmWorker | None = None
    stop_sent = False

    def forward_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop_sent
        stop_sent = True
        # On disk first, for whichever worker takes the attempt; pinned, the worker cannot
        # leave this attempt between the check for its end and the signal.
        layout.create_exclusively(attempt.cancel_request, wire.format_time(wire.utc_now()).encode())
        with worker.pin_worker(attempt):
            if warm is not None and not attempt.exit_record.exists():
                warm.signal(signal.SIGTERM)

    # A revoke with terminate sends SIGTERM to this pool process: it becomes the worker's stop.
    previous_term = signal.signal(signal.SIGTERM, forward_stop)
    shipped = 0
    refresh = context.settings.lease_refresh.total_seconds()
    try:
        warm = _hand_over(context.home, attempt, key)
        while not (warm.ready or warm.ended_status is not None):
            readable, _, _ = select.select([warm.control], [], [], refresh)
            shipped = _ship_log(context.claims, key, attempt.log, shipped, log_cap)
            if readable:
                warm.read()
                continue
            context.claims.refresh_lease(key, me, lease=context.settings.lease)
            if not stop_sent and context.claims.cancel_requested(key):
                forward_stop(signal.SIGTERM, None)
    finally:
        signal.signal(signal.SIGTERM, previous_term)
    _ship_log(context.claims, key, attempt.log, shipped, log_cap)
    record = records.read_exit_record(attempt)
    if warm.ended_status is not None:
        return warm.ended_status, record
    if record is None:
        return worker.EXIT_FAILED, None
    return worker.exit_status(record.error_category), record


def _hand_over(home: layout.ExecutorHome, attempt: layout.AttemptDir, key: str) -> _WarmWorker:
    """A worker that read the attempt: this process's warm one, or a new one when that one
    ended without reading it (its record in the attempt is then withdrawn)."""
    for _ in range(3):
        warm = _WarmWorker.of_this_process(home)
        if warm.take(attempt, key):
            return warm
        layout.remove_quietly(attempt.worker_record)
    raise RuntimeError(f"no worker would take {attempt.path}")


class _WarmWorker:
    """This pool process's worker, a child kept for delivery after delivery; it speaks the
    local supervisor's protocol (worker.serve_supervisor)."""

    _current: _WarmWorker | None = None

    def __init__(self, home: layout.ExecutorHome) -> None:
        self.owner = os.getpid()
        forked = worker.fork_supervised(home, in_child=_in_worker)
        self.control = forked.control
        self.identity = forked.identity
        self.record = forked.record
        #: It read the attempt it was given / is done with it.
        self.told = False
        self.ready = False
        #: Set once the worker ended: its exit status, as the pool process reaped it.
        self.ended_status: int | None = None

    @classmethod
    def of_this_process(cls, home: layout.ExecutorHome) -> _WarmWorker:
        current = cls._current
        if current is None or current.owner != os.getpid() or current.ended_status is not None:
            current = cls._current = cls(home)
        return current

    def take(self, attempt: layout.AttemptDir, key: str) -> bool:
        """Record the worker in the attempt, send it the attempt's key and wait until it read
        it; False when it ended instead."""
        os.link(self.record, attempt.worker_record)
        self.told = self.ready = False
        try:
            self.control.sendall(key.encode() + b"\n")
        except OSError:
            self._reap()
            return False
        while not self.told and self.ended_status is None:
            self.read()
        return self.told

    def read(self) -> None:
        """Take in what the worker said; a closed socket means that it ended."""
        try:
            news = self.control.recv(4096)
        except OSError:
            news = b""
        if not news:
            self._reap()
            return
        self.told = self.told or worker.TOLD in news
        self.ready = self.ready or worker.READY in news

    def signal(self, signum: int) -> None:
        procfs.signal_process(self.identity.pid, self.identity.start_ticks, signum)

    def _reap(self) -> None:
        try:
            _, status = os.waitpid(self.identity.pid, 0)
            self.ended_status = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped by someone else: its status is lost
            self.ended_status = worker.EXIT_FAILED
        self.control.close()
        layout.remove_quietly(self.record)  # the attempts' links keep what they need


def _in_worker() -> None:
    """In a new warm worker: a process group of its own, in the host's session (whatever
    takes the host down takes it down too), and the default for SIGHUP."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


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

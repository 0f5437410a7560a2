"""``CeleryExecutor``: the Executor port over Celery, RabbitMQ (or any broker) and Redis.

The external id is ``celery:<instance_id>/<attempt_no>``, which is also the Celery task id:
a repeated submit names the same task, and ``describe`` needs no lookup table.

``describe`` takes the strongest evidence first and says where it came from:

| evidence | answer | source |
|---|---|---|
| a result in the backend (the exit record) | succeeded / failed, category | ``celery_result`` |
| the claim was taken by a stop before any delivery | failed, ``cancelled`` | ``celery_claim`` |
| the claim's lease is fresh | running | ``celery_claim`` |
| a worker reports it active / reserved / scheduled | running / pending | ``celery_inspect`` |
| claimed, the lease lapsed, no worker has it, no result | **unknown** | ``celery_claim`` |
| sent, never claimed | pending (waiting in the broker) | ``celery_submission`` |
| never sent | not_found | ``celery_submission`` |
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta

import redis
from amqp import exceptions as amqp_errors
from celery.result import AsyncResult
from kombu.exceptions import OperationalError as KombuOperationalError

from veritask.core import jsontypes
from veritask.core.states import PROCESSES_ENDED
from veritask.execution import errors, port, records
from veritask.execution.celery import app as celery_app
from veritask.execution.celery import claims as claim_records
from veritask.execution.celery import control, publisher, registration
from veritask.execution.celery import task as celery_task
from veritask.execution.celery.settings import CelerySettings

EXTERNAL_ID_PREFIX = "celery:"
#: How long a broker that did not answer ``inspect`` is left alone before it is asked again.
BROKER_BACKOFF = timedelta(seconds=5)
#: How long a batch's publisher waits for the broker's confirms before it takes the
#: connection as broken (publisher.py).
CONFIRM_TIMEOUT = timedelta(seconds=10)


def external_id(instance_id: str, attempt_no: int) -> str:
    return EXTERNAL_ID_PREFIX + claim_records.attempt_key(instance_id, attempt_no)


class CeleryExecutor:
    """Sends attempts to Veritask Celery workers (``python -m veritask.execution.celery``)."""

    def __init__(self, settings: CelerySettings) -> None:
        self.settings = settings
        self.app = celery_app.make_app(settings)
        self.claims = claim_records.Claims.connect(
            settings.backend_url, retention=settings.retention
        )
        self.publisher = publisher.BatchPublisher(
            self.app, confirm_timeout=CONFIRM_TIMEOUT.total_seconds()
        )
        #: Until then (monotonic seconds) the broker is taken as away, without asking it.
        self._broker_silent_until = 0.0

    def close(self) -> None:
        """Let go of the connections to the broker and to Redis."""
        self.publisher.close()
        self.claims.close()
        self.app.close()

    def connect(self, *, parallel: int) -> None:
        """Open the batch publisher's connection, ``parallel`` broker connections (each with
        its confirming channel) into the producer pool, load the result backend and open a
        Redis connection: what the first submissions would otherwise do, about 30 ms each, on
        the way of the first attempts."""
        with _engine_errors("connecting ahead"), contextlib.ExitStack() as held:
            self.app.backend  # noqa: B018 - loading it imports the backend's module
            self.claims.client.ping()
            self.publisher.connect()
            producers = [
                held.enter_context(self.app.producer_pool.acquire(block=True))
                for _ in range(max(1, parallel))
            ]
            for producer in producers:
                # One try: a broker that is down is the first submission's to wait for.
                producer.connection.ensure_connection(max_retries=1)
                producer.channel  # noqa: B018 - opens the channel, in confirm mode

    # --- the port -----------------------------------------------------------------------

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        _check_celery_task(spec)
        key = claim_records.attempt_key(spec.instance_id, spec.attempt_no)
        task_id = external_id(spec.instance_id, spec.attempt_no)
        with _engine_errors(task_id):
            sent = self.claims.submission(key)
            if sent is not None:
                return _submitted_before(spec, key, task_id, sent)
            message = self._message(spec, key, task_id)
            # Sent before it is recorded: a crash in between leaves a message the record does
            # not know, so the reconciler submits again, and the claim refuses the second copy.
            publisher.send(self.app, message)
            created = self.claims.record_submission(
                key, token=spec.attempt_token, task_id=task_id, queue=message.queue
            )
        return port.Submission(task_id, created=created)

    def submit_many(
        self, *, specs: Sequence[port.AttemptSpec]
    ) -> list[port.Submission | errors.ExecutorError]:
        """``submit`` for each spec, together: one Redis read, the messages published on one
        channel with their confirms collected at the end (``publisher.py``), one Redis write.
        A message is sent before its submission is recorded, as in ``submit``."""
        answers: list[port.Submission | errors.ExecutorError | None] = [None] * len(specs)
        keys = [claim_records.attempt_key(spec.instance_id, spec.attempt_no) for spec in specs]
        try:
            with _engine_errors("submitting a batch"):
                sent_before = self.claims.submissions(keys)
        except errors.ExecutorError as exc:
            return [exc] * len(specs)
        messages: list[publisher.Message] = []
        places: list[int] = []
        for place, (spec, key, sent) in enumerate(zip(specs, keys, sent_before, strict=True)):
            task_id = external_id(spec.instance_id, spec.attempt_no)
            try:
                _check_celery_task(spec)
                if sent is not None:
                    answers[place] = _submitted_before(spec, key, task_id, sent)
                    continue
                messages.append(self._message(spec, key, task_id))
            except errors.ExecutorError as exc:
                answers[place] = exc
                continue
            except ValueError as exc:  # a spec that cannot be encoded: sending it cannot help
                answers[place] = errors.ExecutorError(f"{task_id}: {exc}", retryable=False)
                continue
            places.append(place)
        published = self.publisher.publish(messages)
        confirmed = [
            (place, message)
            for place, message, error in zip(places, messages, published, strict=True)
            if error is None
        ]
        for place, error in zip(places, published, strict=True):
            if error is not None:
                answers[place] = error
        try:
            with _engine_errors("recording a batch of submissions"):
                created = self.claims.record_submissions(
                    [
                        claim_records.Sent(
                            keys[place], specs[place].attempt_token, message.task_id, message.queue
                        )
                        for place, message in confirmed
                    ]
                )
        except errors.ExecutorError as exc:
            # Sent, not recorded: submitted again later, the claim refuses the second copy.
            created = []
            for place, _ in confirmed:
                answers[place] = exc
        for (place, message), new in zip(confirmed, created, strict=False):
            answers[place] = port.Submission(message.task_id, created=new)
        return [answer for answer in answers if answer is not None]

    def describe(self, *, external_id: str) -> port.Observation:
        key = self._key(external_id)
        with _engine_errors(external_id):
            return self._describe(external_id, key)

    def cancel(self, *, external_id: str) -> None:
        key = self._key(external_id)
        with _engine_errors(external_id):
            self.claims.request_cancel(key)
            # No delivery took it yet: the stop takes the claim, so none ever will; confirmed.
            if self.claims.claim(key, claim_records.CANCELLED_BEFORE_START):
                self.app.control.revoke(external_id)
                return
            # A worker runs it: SIGTERM to the process running the delivery, which forwards it
            # to the Veritask worker; that one kills the task's group after its grace period.
            self.app.control.revoke(external_id, terminate=True, signal="SIGTERM")
            # That process may be frozen and do nothing: the worker's main process stops the
            # task's group once the grace period is over (control.py). Asked on every repeat.
            holder = self.claims.holder(key)
            if holder is not None and not holder.cancelled_before_start:
                control.stop_task_group(self.app, _celery_hostname(holder), key)

    def cleanup(self, *, external_id: str) -> None:
        key = self._key(external_id)
        with _engine_errors(external_id):
            seen = self._describe(external_id, key)
            if seen.engine_state in (port.EngineState.PENDING, port.EngineState.RUNNING):
                raise errors.ExecutorError(
                    f"{external_id} is {seen.engine_state}: cancel it before cleanup",
                    retryable=True,
                )
            AsyncResult(external_id, app=self.app).forget()
            self.claims.forget(key)

    def read_log(self, *, external_id: str) -> bytes | None:
        """The log the worker shipped so far (capped at the attempt's ``log_cap_bytes``)."""
        with _engine_errors(external_id):
            return self.claims.read_log(self._key(external_id))

    # --- describing ---------------------------------------------------------------------

    def _describe(self, external_id: str, key: str) -> port.Observation:
        details: dict[str, port.DetailValue] = {"task_id": external_id}
        refusals = self.claims.refusals(key)
        details["deliveries_refused"] = len(refusals)
        if refusals:
            details["last_refused_by"] = str(refusals[-1].get("refused_by"))
        # One read of lease, claim and result: a worker stores its result and drops its lease
        # in one transaction, so "no lease and no result" is never a delivery just ending.
        progress = self.claims.progress(key)
        lease, holder = progress.lease_holder, progress.holder
        if progress.result is not None:
            return _ended(external_id, progress.result, details)
        # Celery's own record: what a delivery raised, or the result a worker of an earlier
        # release stored there.
        result = AsyncResult(external_id, app=self.app)
        outcome = celery_task.decode_result(result.result) if result.state == "SUCCESS" else None
        if outcome is not None:
            return _ended(external_id, outcome, details)
        if result.state in ("FAILURE", "REVOKED"):
            details["celery_state"] = result.state
            details["celery_error"] = str(result.result)[:500]
        observe = port.ObservationDraft(external_id, details)
        if holder is not None:
            details["claimed_by"] = holder.worker
            details["claimed_at"] = holder.claimed_at
            if holder.cancelled_before_start:
                return observe.make(
                    port.EngineState.FAILED,
                    registration.Source.CLAIM,
                    category=port.ErrorCategory.CANCELLED,
                )
            observe.engine_id = holder.worker
            if lease is not None:
                details["lease_holder"] = lease
                return observe.make(port.EngineState.RUNNING, registration.Source.CLAIM)
            # Claimed and the lease lapsed: its host died, or the process running the delivery
            # is frozen. In that case the worker's main process still answers, and can tell
            # whether the task's group runs.
            seen = self._ask_task_group(observe, holder, key)
            if seen is not None:
                return seen
        where, broker_answered = self._inspect(external_id)
        if where is not None:
            state, worker = where
            details["inspect_worker"] = worker
            engine_state = (
                port.EngineState.RUNNING if state == "active" else port.EngineState.PENDING
            )
            details["inspect_state"] = state
            return observe.make(engine_state, registration.Source.INSPECT)
        if holder is not None:
            if not broker_answered:
                # A worker cut off from the broker may hold it between its claim and its lease:
                # without the broker's word, "unknown" would be a guess.
                raise errors.ExecutorError(
                    f"{external_id}: claimed, no lease, and the broker does not answer",
                    retryable=True,
                )
            # Claimed, and neither a lease nor a worker nor a result says anything more: the
            # process that ran it is gone, and nothing tells how the task ended.
            details["lease"] = False
            details["exit_record"] = False
            return observe.make(port.EngineState.UNKNOWN, registration.Source.CLAIM)
        sent = self.claims.submission(key)
        if sent is None:
            return observe.make(port.EngineState.NOT_FOUND, registration.Source.SUBMISSION)
        details["queue"] = str(sent.get("queue"))
        return observe.make(port.EngineState.PENDING, registration.Source.SUBMISSION)

    def _ask_task_group(
        self, observe: port.ObservationDraft, holder: claim_records.Claim, key: str
    ) -> port.Observation | None:
        """What the holder's main process sees of the task's group: running while it runs,
        unknown with its word that no process of the task runs once it ended; None when it
        does not answer or the task did not start."""
        if time.monotonic() < self._broker_silent_until:
            return None
        timeout = self.settings.inspect_timeout.total_seconds()
        try:
            seen = control.task_group(self.app, _celery_hostname(holder), key, timeout=timeout)
        except (KombuOperationalError, OSError):
            self._broker_silent_until = time.monotonic() + BROKER_BACKOFF.total_seconds()
            return None
        if seen is None or seen.get("found") is not True or seen.get("task_started") is not True:
            return None
        task_alive = seen.get("task_alive") is not False
        observe.details.update(
            lease=False,
            delivery_stopped=seen.get("delivery_stopped") is True,
            task_alive=task_alive,
        )
        if task_alive:
            return observe.make(port.EngineState.RUNNING, registration.Source.CONTROL)
        observe.details["exit_record"] = False
        observe.details[PROCESSES_ENDED] = True
        return observe.make(port.EngineState.UNKNOWN, registration.Source.CONTROL)

    def _inspect(self, task_id: str) -> tuple[tuple[str, str] | None, bool]:
        """Which worker holds the task (active, reserved or scheduled), by broadcast; and
        whether the broker answered at all.

        A broker that does not answer is not asked again for ``BROKER_BACKOFF``: every
        describe would otherwise wait for its connection to fail, and the reconciler asks
        about every queued instance in turn.
        """
        if time.monotonic() < self._broker_silent_until:
            return None, False
        inspect = self.app.control.inspect(timeout=self.settings.inspect_timeout.total_seconds())
        try:
            answers = [
                ("active", inspect.active()),
                ("reserved", inspect.reserved()),
                ("scheduled", inspect.scheduled()),
            ]
        except (KombuOperationalError, OSError):
            self._broker_silent_until = time.monotonic() + BROKER_BACKOFF.total_seconds()
            return None, False
        for state, answer in answers:
            for worker, tasks in (answer or {}).items():
                for entry in tasks or []:
                    request = entry.get("request", entry) if isinstance(entry, dict) else {}
                    if isinstance(request, dict) and request.get("id") == task_id:
                        return (state, str(worker)), True
        return None, True

    # --- helpers ------------------------------------------------------------------------

    def _message(self, spec: port.AttemptSpec, key: str, task_id: str) -> publisher.Message:
        """The run-attempt message of ``spec``; ValueError when the spec cannot be encoded."""
        return publisher.Message(
            task_id=task_id,
            queue=spec.queue or self.settings.default_queue,
            encoded_spec=records.encode_spec(self._for_remote_worker(spec)),
            argsrepr=f"(<attempt {key}>,)",
        )

    def _for_remote_worker(self, spec: port.AttemptSpec) -> port.AttemptSpec:
        """Workers on other hosts cannot reach the scheduler's outbox: they report over HTTP."""
        if self.settings.callback_url is None or isinstance(spec.callback, port.HttpCallback):
            return spec
        return dataclasses.replace(spec, callback=port.HttpCallback(self.settings.callback_url))

    def _key(self, external_id: str) -> str:
        if not external_id.startswith(EXTERNAL_ID_PREFIX):
            raise errors.ExecutorError(f"not a celery external id: {external_id!r}")
        key = external_id.removeprefix(EXTERNAL_ID_PREFIX)
        instance_id, _, number = key.rpartition("/")
        if not instance_id or not number.isdigit():
            raise errors.ExecutorError(f"not a celery external id: {external_id!r}")
        return key


def _ended(
    external_id: str, outcome: jsontypes.JSONObject, details: dict[str, port.DetailValue]
) -> port.Observation:
    """The delivery that ran returned: its exit record decides, as the local executor's does."""
    worker = str(outcome.get("worker"))
    details.update(worker=worker, attempt_dir=str(outcome.get("attempt_dir")))
    record_obj = outcome.get("exit_record")
    if not isinstance(record_obj, dict):
        # The worker program died without a record: the delivery saw it end, not how.
        details.update(exit_record=False, worker_status=_detail(outcome.get("worker_status")))
        return port.Observation(
            external_id=external_id,
            engine_state=port.EngineState.UNKNOWN,
            source=registration.Source.RESULT,
            engine_id=worker,
            details=details,
        )
    record = records.ExitRecord.decode(record_obj)
    category = record.error_category
    succeeded = category in (port.ErrorCategory.NONE, port.ErrorCategory.SKIPPED)
    evidence = record.completed["evidence"]
    details.update(
        exit_record=True,
        signal=record.signal,
        commit_marker=evidence["commit_marker"],
        log_path=evidence["log_path"],
        completed_event_id=record.completed["event_id"],
    )
    return port.Observation(
        external_id=external_id,
        engine_state=port.EngineState.SUCCEEDED if succeeded else port.EngineState.FAILED,
        source=registration.Source.RESULT,
        engine_id=worker,
        exit_code=record.exit_code,
        error_category=category,
        started_at=record.started_at,
        ended_at=record.ended_at,
        details=details,
    )


def _celery_hostname(holder: claim_records.Claim) -> str:
    """The Celery hostname of the worker whose pool process holds the claim."""
    return holder.worker.rpartition(":")[0]


def _detail(value: object) -> port.DetailValue:
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def _check_celery_task(spec: port.AttemptSpec) -> None:
    if isinstance(spec.task, port.SqlStatement):
        raise errors.ExecutorError("a sql task runs on the sql executor, not on Celery")
    if isinstance(spec.task, port.WaitCondition):
        raise errors.ExecutorError("a wait is checked by the scheduler's wait executor")


def _submitted_before(
    spec: port.AttemptSpec, key: str, task_id: str, sent: jsontypes.JSONObject
) -> port.Submission:
    """The answer to a submission the executor recorded before: the same task, or an error
    when it came with another token (another scheduler's attempt of the same number)."""
    if sent.get("token_digest") != claim_records.token_digest(spec.attempt_token):
        raise errors.ExecutorError(
            f"attempt {key} was submitted before with another attempt token", retryable=False
        )
    return port.Submission(task_id, created=False)


@contextlib.contextmanager
def _engine_errors(external_id: str) -> Iterator[None]:
    """The broker or Redis away is worth another try; a garbled record is not."""
    try:
        yield
    except errors.ExecutorError:
        raise
    except (
        redis.RedisError,
        KombuOperationalError,
        OSError,
        amqp_errors.ConnectionError,
        amqp_errors.MessageNacked,  # the broker refused the message (a full queue, say)
    ) as exc:
        raise errors.ExecutorError(f"{external_id}: {exc}", retryable=True) from exc
    except ValueError as exc:
        raise errors.ExecutorError(f"{external_id}: {exc}", retryable=False) from exc

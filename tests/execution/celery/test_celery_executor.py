"""The Celery executor with real RabbitMQ, Redis and Veritask Celery worker processes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import kombu.pools
import pytest
from celery.result import AsyncResult

from tests.execution.celery.conftest import REDIS_URL, Hosts, queue_that_refuses
from tests.scheduling.harness import wait_for
from veritask.core.states import PROCESSES_ENDED
from veritask.execution import errors, layout, port, procfs, records, transports, wire
from veritask.execution.celery import app as celery_app
from veritask.execution.celery import executor as celery_executor
from veritask.execution.celery import registration as celery_registration
from veritask.execution.celery.settings import CelerySettings
from veritask.scheduling import dispatch
from veritask.scheduling.tokens import AttemptTokens

pytestmark = [pytest.mark.slow]
#: Frozen-pool-process iterations in the default suite; ``make soak`` runs more.
FREEZE_ITERATIONS = int(os.environ.get("VERITASK_FREEZE_ITERATIONS", "3"))
MakeHosts = Callable[..., Hosts]


def spec(command: str, outbox: Path, *, instance: str | None = None) -> port.AttemptSpec:
    return port.AttemptSpec(
        instance_id=instance or f"celery-{secrets.token_hex(4)}",
        attempt_no=1,
        # Unique: a stop ends every process on the machine whose environment holds the
        # attempt's token, so a token shared with another test run would end its tasks too.
        attempt_token=f"token-{secrets.token_hex(8)}",
        task=port.ShellCommand(command),
        callback=port.OutboxCallback(outbox),
        grace_period=port.AttemptSpec.grace_period / 10,
        heartbeat_interval=port.AttemptSpec.heartbeat_interval / 20,
    )


def observe(
    executor: celery_executor.CeleryExecutor,
    external_id: str,
    *states: port.EngineState,
    timeout: float = 30,
) -> port.Observation:
    def seen() -> port.Observation | None:
        observation = executor.describe(external_id=external_id)
        return observation if observation.engine_state in states else None

    return wait_for(seen, what=f"{external_id} in {states}", timeout=timeout, interval=0.1)


def starts(marker: Path) -> list[str]:
    return [line for line in marker.read_text().splitlines() if line.startswith("start")]


def long_running(executor: celery_executor.CeleryExecutor, tmp_path: Path) -> port.Submission:
    """Submit a task that would run a minute, and wait until it has started."""
    marker = tmp_path / f"marker-{secrets.token_hex(3)}"
    submitted = executor.submit(spec=spec(f"echo start >> {marker}; exec sleep 60", tmp_path / "o"))
    wait_for(lambda: marker.exists(), what="the task to start")
    return submitted


def test_an_attempt_runs_under_the_worker_program_and_is_described_from_the_result(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    hosts.start("host-a")
    executor = hosts.executor()
    # Idempotence, the outcome's source and cleanup are the contract's (tests/execution/contract).
    attempt = spec("echo hello from celery; sleep 0.3", tmp_path / "outbox")
    first = executor.submit(spec=attempt)
    seen = observe(executor, first.external_id, port.EngineState.SUCCEEDED)
    assert seen.exit_code == 0 and seen.details["deliveries_refused"] == 0
    # The result is the attempt's own record, stored as the lease was dropped; Celery's
    # backend keeps nothing for a delivery that did not raise.
    progress = executor.claims.progress(f"{attempt.instance_id}/1")
    assert progress.lease_holder is None and progress.result is not None
    assert AsyncResult(first.external_id, app=executor.app).state == "PENDING"
    kinds = [event["kind"] for _, event in transports.drain_outbox(tmp_path / "outbox")]
    assert kinds[0] == "started" and kinds[-1] == "completed"
    shipped = executor.read_log(external_id=first.external_id)
    assert shipped is not None and b"hello from celery" in shipped


def test_a_second_delivery_of_a_started_attempt_is_refused_with_evidence(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    hosts.start("host-a")
    hosts.start("host-b")
    executor = hosts.executor()
    marker = tmp_path / "marker"
    attempt = spec(f"echo start $$ >> {marker}; sleep 1.5; echo stop >> {marker}", tmp_path / "o")
    submitted = executor.submit(spec=attempt)
    observe(executor, submitted.external_id, port.EngineState.RUNNING)
    # The broker's redelivery is the same message again: same task id, same body.
    executor.app.send_task(
        celery_app.RUN_ATTEMPT,
        args=[records.encode_spec(attempt)],
        task_id=submitted.external_id,
        queue=hosts.queue,
    )
    wait_for(lambda: executor.claims.refusals(f"{attempt.instance_id}/1"), what="the refusal")
    seen = observe(executor, submitted.external_id, port.EngineState.SUCCEEDED)
    assert seen.details["deliveries_refused"] == 1
    assert len(starts(marker)) == 1


def test_a_message_redelivered_after_the_visibility_timeout_does_not_start_a_second_copy(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    # RabbitMQ redelivers only when a consumer dies; a Redis broker redelivers any message
    # not acknowledged within its visibility timeout, which is the case to prove here.
    redis_broker = "redis://127.0.0.1:6379/12"
    hosts = make_hosts(broker_url=redis_broker)
    hosts.extra_env["VERITASK_CELERY_VISIBILITY_TIMEOUT_SECONDS"] = "1"
    hosts.start("host-a")
    hosts.start("host-b")
    executor = hosts.executor()
    marker = tmp_path / "marker"
    attempt = spec(f"echo start $$ >> {marker}; sleep 6; echo stop >> {marker}", tmp_path / "o")
    submitted = executor.submit(spec=attempt)
    wait_for(
        lambda: executor.claims.refusals(f"{attempt.instance_id}/1"),
        what="the redelivery to be refused",
        timeout=30,
        interval=0.2,
    )
    refusal = executor.claims.refusals(f"{attempt.instance_id}/1")[0]
    assert refusal["claimed_by"] != refusal["refused_by"]
    seen = observe(executor, submitted.external_id, port.EngineState.SUCCEEDED)
    assert int(str(seen.details["deliveries_refused"])) >= 1
    assert len(starts(marker)) == 1


def test_a_stop_requested_only_in_redis_reaches_the_running_attempt(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    # The revoke is a broadcast that a worker may miss; the delivery also looks for the
    # request in Redis while the attempt runs.
    hosts = make_hosts()
    hosts.start("host-a")
    executor = hosts.executor()
    submitted = long_running(executor, tmp_path)
    executor.claims.request_cancel(submitted.external_id.removeprefix("celery:"))
    seen = observe(executor, submitted.external_id, port.EngineState.FAILED)
    assert seen.error_category is port.ErrorCategory.CANCELLED


def test_a_pool_process_that_ran_an_attempt_still_stops_the_next_one_on_a_revoke(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    hosts.start("host-a", concurrency=1)  # both deliveries in the same pool process
    executor = hosts.executor()
    first = executor.submit(spec=spec("true", tmp_path / "o"))
    observe(executor, first.external_id, port.EngineState.SUCCEEDED)
    second = long_running(executor, tmp_path)
    executor.app.control.revoke(second.external_id, terminate=True, signal="SIGTERM")
    seen = observe(executor, second.external_id, port.EngineState.FAILED)
    assert seen.error_category is port.ErrorCategory.CANCELLED
    # The pool process lived on: a third delivery runs in it.
    third = executor.submit(spec=spec("true", tmp_path / "o"))
    observe(executor, third.external_id, port.EngineState.SUCCEEDED)


def test_a_cancel_before_any_worker_took_it_is_confirmed_at_once(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()  # no worker consumes this queue yet
    executor = hosts.executor()
    marker = tmp_path / "marker"
    submitted = executor.submit(spec=spec(f"echo start >> {marker}", tmp_path / "o"))
    pending = executor.describe(external_id=submitted.external_id)
    assert pending.engine_state is port.EngineState.PENDING
    assert pending.source is celery_registration.Source.SUBMISSION
    executor.cancel(external_id=submitted.external_id)
    seen = executor.describe(external_id=submitted.external_id)
    assert seen.engine_state is port.EngineState.FAILED
    assert seen.error_category is port.ErrorCategory.CANCELLED
    hosts.start("host-a")  # takes the message, finds the claim held by the stop, refuses it
    wait_for(
        lambda: executor.claims.refusals(submitted.external_id.removeprefix("celery:")),
        what="the late delivery to be refused",
    )
    assert not marker.exists()


def test_a_host_killed_mid_task_leaves_an_unknown_attempt_and_no_second_copy(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    doomed = hosts.start("host-a")
    executor = hosts.executor()
    marker = tmp_path / "marker"
    attempt = spec(f"echo start $$ >> {marker}; sleep 30", tmp_path / "o")
    submitted = executor.submit(spec=attempt)
    observe(executor, submitted.external_id, port.EngineState.RUNNING)
    wait_for(lambda: marker.exists(), what="the task to start")
    hosts.start("host-b")
    hosts.kill(doomed)  # the worker, its pool, the Veritask worker and the task: all gone
    # RabbitMQ gives the unacknowledged message to host-b, which refuses it.
    wait_for(
        lambda: executor.claims.refusals(f"{attempt.instance_id}/1"),
        what="the redelivery to be refused",
    )
    seen = observe(executor, submitted.external_id, port.EngineState.UNKNOWN)
    assert seen.source is celery_registration.Source.CLAIM
    assert str(seen.details["claimed_by"]).startswith("host-a")
    assert len(starts(marker)) == 1


def test_a_pool_process_runs_its_deliveries_itself(make_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = make_hosts()
    hostname = hosts.start("host-a", concurrency=1)
    executor = hosts.executor()
    attempts = [spec(f"echo attempt {n}", tmp_path / "o") for n in range(3)]

    for attempt in attempts:
        submitted = executor.submit(spec=attempt)
        seen = observe(executor, submitted.external_id, port.EngineState.SUCCEEDED)
        assert seen.error_category is port.ErrorCategory.NONE

    home = layout.ExecutorHome(tmp_path / "host-a" / "executor")
    workers = set()
    for attempt in attempts:
        recorded = records.read_process_record(
            home.attempt(attempt.instance_id, attempt.attempt_no).worker_record
        )
        assert recorded is not None
        workers.add(recorded.engine_id)
    # One pool process (concurrency 1) ran them all: no process was forked for a delivery.
    assert len(workers) == 1, f"more than one process ran the deliveries: {workers}"
    (engine_id,) = workers
    pid = int(engine_id.split(":")[1])
    parent = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    assert parent == hosts.started[hostname].pid  # a pool process of the Celery worker
    for n, attempt in enumerate(attempts):
        shipped = executor.read_log(external_id=f"celery:{attempt.instance_id}/1")
        assert shipped is not None and shipped.startswith(f"attempt {n}\n".encode())


def test_the_scheduler_does_not_subscribe_to_the_results_of_what_it_sends(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    executor = hosts.executor()

    def subscriptions() -> int:
        stats = executor.claims.client.info("commandstats")
        return int(stats.get("cmdstat_subscribe", {}).get("calls", 0))

    before = subscriptions()
    sent = [executor.submit(spec=spec("true", tmp_path / "o")) for _ in range(3)]

    # Nobody waits on a result: a subscription per submission would be two round trips lost.
    assert subscriptions() == before
    hosts.start("host-a")  # and the queue is left empty
    for submission in sent:
        observe(executor, submission.external_id, port.EngineState.SUCCEEDED)


def test_a_result_that_a_worker_of_an_earlier_release_stored_in_celery_is_still_read(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    # Workers before the attempt's own result record returned it to Celery's backend; an
    # upgrade with attempts still running must not lose how they ended.
    hosts = make_hosts()  # no worker: the result is stored as such a worker stored it
    executor = hosts.executor()
    submitted = executor.submit(spec=spec("true", tmp_path / "o"))
    with warnings.catch_warnings():  # Celery's Redis backend calls redis-py's deprecated setex
        warnings.simplefilter("ignore", DeprecationWarning)
        ended = {"worker": "old@host:1", "worker_status": 1, "attempt_dir": "/gone"}
        executor.app.backend.store_result(
            submitted.external_id, {**ended, "exit_record": None}, "SUCCESS"
        )
    seen = executor.describe(external_id=submitted.external_id)
    assert seen.source is celery_registration.Source.RESULT
    assert seen.engine_state is port.EngineState.UNKNOWN  # it ended, without an exit record
    assert seen.details["worker"] == "old@host:1" and seen.details["exit_record"] is False


def test_a_message_the_broker_refuses_is_not_acknowledged_as_submitted(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    # Without publisher confirms the message would be dropped while submit said it was sent,
    # and the attempt would wait in QUEUED for a message that never comes.
    hosts = make_hosts()
    with queue_that_refuses() as full_queue:
        executor = hosts.executor()
        attempt = dataclasses.replace(spec("true", tmp_path / "o"), queue=full_queue)
        with pytest.raises(errors.ExecutorError) as refused:
            executor.submit(spec=attempt)
        assert refused.value.retryable  # the reconciler submits it again after the grace
        assert executor.claims.submission(f"{attempt.instance_id}/1") is None


def connected_producers(executor: celery_executor.CeleryExecutor, count: int) -> int:
    """How many of ``count`` producers taken from the pool at once have a broker connection."""
    with contextlib.ExitStack() as held:
        producers = [
            held.enter_context(executor.app.producer_pool.acquire(block=True)) for _ in range(count)
        ]
        connections = {id(producer.connection) for producer in producers}
        assert len(connections) == count
        return sum(1 for producer in producers if producer.connection.connected)


def test_connecting_ahead_opens_the_batch_publisher_and_a_connection_per_submitting_thread(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    executor = hosts.executor()
    # Kombu keeps one producer pool per broker for the whole process: start from an empty one.
    kombu.pools.reset()  # type: ignore[no-untyped-call]
    assert connected_producers(executor, 3) == 0  # nothing opened before it is needed
    assert not executor.publisher.connected

    executor.connect(parallel=3)

    assert executor.publisher.connected
    assert connected_producers(executor, 3) == 3
    # And what a submission needs next is there: it goes through without a new handshake.
    submitted = executor.submit(spec=spec("true", tmp_path / "o"))
    assert executor.claims.submission(submitted.external_id.removeprefix("celery:")) is not None


def test_a_scheduler_connects_its_executors_from_its_submission_threads(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    executor = hosts.executor()
    kombu.pools.reset()  # type: ignore[no-untyped-call]
    dispatcher = dispatch.Dispatcher(
        executors={"celery": executor},
        tokens=AttemptTokens(b"test-secret-0123456789"),
        outbox=tmp_path / "outbox",
    )
    submissions = dispatch.Submissions(dispatcher, clock=wire.utc_now, workers=4)

    submissions.connect()
    submissions.close()  # waits for the submission threads, which did the connecting

    # Attempts go to the Celery executor in batches, from one thread: the publisher's
    # connection, and one pooled connection (single submissions, revokes).
    assert executor.publisher.connected
    assert connected_producers(executor, 2) == 1


def test_connecting_ahead_to_a_broker_that_is_away_is_a_retryable_error(
    celery_services: None,
) -> None:
    settings = CelerySettings(broker_url="amqp://guest:guest@127.0.0.1:9//", backend_url=REDIS_URL)
    executor = celery_executor.CeleryExecutor(settings)
    try:
        with pytest.raises(errors.ExecutorError) as away:
            executor.connect(parallel=2)
        assert away.value.retryable
        assert "connecting ahead" in str(away.value)
    finally:
        executor.close()


def test_a_frozen_pool_process_s_task_group_is_stopped_by_the_workers_main_process(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    """SIGSTOP of the pool process running a delivery: the revoke's SIGTERM waits in it and
    its lease lapses, while the main process still answers. The cancel repeated past the grace
    period has the main process stop the task's group (here one that ignores SIGTERM: SIGKILL
    after the second grace period); describe then says that no process of the task runs."""
    hosts = make_hosts()
    hosts.start("host-a", concurrency=1)
    executor = hosts.executor()
    home = layout.ExecutorHome((tmp_path / "host-a" / "executor").resolve())
    for iteration in range(FREEZE_ITERATIONS):
        ready = tmp_path / f"ready-{iteration}"
        attempt = spec(f"trap '' TERM; touch {ready}; while :; do sleep 0.05; done", tmp_path / "o")
        submitted = executor.submit(spec=attempt)
        wait_for(ready.exists, what="the task to start")
        directory = home.attempt(attempt.instance_id, attempt.attempt_no)
        # The task may start before its worker has written the task's record: wait for both.
        task = wait_for(
            partial(records.read_process_record, directory.task_record),
            what="the task's process record",
        )
        pool = records.read_process_record(directory.worker_record)
        assert pool is not None and task.pgid is not None
        os.kill(pool.pid, signal.SIGSTOP)
        try:
            frozen = observe(executor, submitted.external_id, port.EngineState.RUNNING)
            assert frozen.details.get(PROCESSES_ENDED) is None

            def stopped(external_id: str = submitted.external_id) -> port.Observation | None:
                executor.cancel(external_id=external_id)  # as each reconciler sweep does
                seen = executor.describe(external_id=external_id)
                return seen if seen.engine_state is port.EngineState.UNKNOWN else None

            seen = wait_for(stopped, what="the frozen delivery's task group to be stopped")
            assert seen.source is celery_registration.Source.CONTROL
            assert seen.details[PROCESSES_ENDED] is True
            assert seen.details["delivery_stopped"] is True
            assert seen.details["task_alive"] is False
            assert not procfs.group_members(task.pgid, started_since=task.start_ticks)
            assert procfs.is_stopped(pool.pid, pool.start_ticks)
        finally:
            os.kill(pool.pid, signal.SIGCONT)
        # Thawed, the pool process reaps the task and stores the stop as the attempt's result.
        ended = observe(executor, submitted.external_id, port.EngineState.FAILED)
        assert ended.error_category is port.ErrorCategory.CANCELLED
        assert ended.details["signal"] == signal.SIGKILL

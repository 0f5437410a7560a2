"""Attempts submitted to Celery together (``CeleryExecutor.submit_many`` and the scheduler's
submission lane), with real RabbitMQ, Redis and Veritask Celery worker processes."""

from __future__ import annotations

import dataclasses
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import kombu.pools
import pytest

from tests.execution.celery.conftest import RABBITMQCTL, queue_that_refuses
from tests.execution.celery.test_celery_executor import MakeHosts, observe, spec
from veritask.definitions.parse import parse_definition
from veritask.execution import errors, port, wire
from veritask.execution.celery import executor as celery_executor
from veritask.scheduling import dispatch
from veritask.scheduling.tokens import AttemptTokens

pytestmark = [pytest.mark.slow]


def waiting_in(executor: celery_executor.CeleryExecutor, queue: str) -> int:
    """Messages in the broker's queue, not taken by any worker."""
    with executor.app.connection_for_write() as connection:
        return int(connection.default_channel.queue_declare(queue, passive=True).message_count)


def submissions_of(answers: list[port.Submission | errors.ExecutorError]) -> list[port.Submission]:
    found = [answer for answer in answers if isinstance(answer, port.Submission)]
    assert len(found) == len(answers), answers
    return found


def test_a_batch_is_sent_once_recorded_and_run(make_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = make_hosts()
    executor = hosts.executor()
    specs = [spec("true", tmp_path / "o") for _ in range(5)]

    first = submissions_of(executor.submit_many(specs=specs))
    again = submissions_of(executor.submit_many(specs=specs))

    assert [answer.external_id for answer in first] == [
        f"celery:{attempt.instance_id}/1" for attempt in specs
    ]
    assert all(answer.created for answer in first)
    assert not any(answer.created for answer in again)
    assert waiting_in(executor, hosts.queue) == 5  # the second batch sent nothing
    hosts.start("host-a")
    for answer in first:
        observe(executor, answer.external_id, port.EngineState.SUCCEEDED)


def test_a_batch_publishes_the_message_send_task_would_send(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    # The batch builds and routes its messages itself: a worker must not tell them apart.
    hosts = make_hosts()  # no worker: the messages stay in the queue to be read back
    executor = hosts.executor()
    batched, single = spec("true", tmp_path / "o"), spec("true", tmp_path / "o")
    submissions_of(executor.submit_many(specs=[batched]))
    executor.submit(spec=single)

    with executor.app.connection_for_write() as connection:
        channel = connection.default_channel
        read = [channel.basic_get(hosts.queue, no_ack=True) for _ in range(2)]
    by_attempt = {json.loads(message.body)[0][0]["instance_id"]: message for message in read}
    ours, celerys = by_attempt[batched.instance_id], by_attempt[single.instance_id]

    def routed(message: Any) -> tuple[str, str]:
        return message.delivery_info["exchange"], message.delivery_info["routing_key"]

    def properties(message: Any) -> dict[str, object]:
        own = {"application_headers", "correlation_id"}  # the headers are compared below
        return {k: v for k, v in message.properties.items() if k not in own}

    def headers(message: Any) -> dict[str, object]:
        return {k: v for k, v in message.headers.items() if k not in {"id", "root_id", "argsrepr"}}

    assert routed(ours) == routed(celerys) == ("", hosts.queue)
    assert properties(ours) == properties(celerys)
    assert properties(ours)["delivery_mode"] == 2  # persistent, as Celery's
    assert headers(ours) == headers(celerys)
    assert ours.headers["id"] == ours.headers["root_id"] == ours.properties["correlation_id"]
    assert ours.headers["argsrepr"] == f"(<attempt {batched.instance_id}/1>,)"
    body, single_body = json.loads(ours.body), json.loads(celerys.body)
    assert body[1:] == single_body[1:]  # kwargs and the embedded options
    assert body[0][0]["instance_id"] == batched.instance_id


def test_each_attempt_of_a_batch_gets_its_own_answer(make_hosts: MakeHosts, tmp_path: Path) -> None:
    hosts = make_hosts()
    executor = hosts.executor()
    earlier = spec("true", tmp_path / "o")
    executor.submit(spec=earlier)
    other_token = dataclasses.replace(earlier, attempt_token="token-2")
    sql = dataclasses.replace(
        spec("true", tmp_path / "o"), task=port.SqlStatement("select 1", "warehouse")
    )
    fine = spec("true", tmp_path / "o")

    answers = executor.submit_many(specs=[other_token, sql, fine])

    token_error, sql_error, sent = answers
    assert isinstance(token_error, errors.ExecutorError) and not token_error.retryable
    assert "another attempt token" in str(token_error)
    assert isinstance(sql_error, errors.ExecutorError) and not sql_error.retryable
    assert isinstance(sent, port.Submission) and sent.created
    assert executor.claims.submission(f"{sql.instance_id}/1") is None
    assert waiting_in(executor, hosts.queue) == 2  # the earlier one and the fine one


def test_messages_the_broker_refuses_are_errors_worth_another_try_and_not_recorded(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    # The broker answers basic.nack, in the middle of a batch whose other messages it takes.
    hosts = make_hosts()
    with queue_that_refuses() as full_queue:
        executor = hosts.executor()
        refused = [
            dataclasses.replace(spec("true", tmp_path / "o"), queue=full_queue) for _ in range(2)
        ]
        taken = spec("true", tmp_path / "o")

        answers = executor.submit_many(specs=[refused[0], taken, refused[1]])

        for attempt, answer in zip(refused, (answers[0], answers[2]), strict=True):
            assert isinstance(answer, errors.ExecutorError) and answer.retryable
            assert executor.claims.submission(f"{attempt.instance_id}/1") is None
        assert isinstance(answers[1], port.Submission) and answers[1].created


def test_a_connection_the_broker_closed_between_batches_is_opened_again(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()  # no worker: closing every connection closes only the test's
    executor = hosts.executor()
    submissions_of(executor.submit_many(specs=[spec("true", tmp_path / "o")]))
    subprocess.run(
        [RABBITMQCTL, "close_all_connections", "closed by the batch submission test"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    # The connections kombu pools for the whole process are closed too: later tests need new.
    kombu.pools.reset()  # type: ignore[no-untyped-call]

    later = submissions_of(executor.submit_many(specs=[spec("true", tmp_path / "o")]))

    assert later[0].created
    assert waiting_in(executor, hosts.queue) == 2


def test_the_scheduler_hands_a_celery_executor_its_attempts_in_batches(
    make_hosts: MakeHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = make_hosts()
    executor = hosts.executor()
    batch_sizes: list[int] = []
    submit_many = executor.submit_many

    def counting(*, specs: list[port.AttemptSpec]) -> list[port.Submission | errors.ExecutorError]:
        batch_sizes.append(len(specs))
        return submit_many(specs=specs)

    monkeypatch.setattr(executor, "submit_many", counting)
    dispatcher = dispatch.Dispatcher(
        executors={"celery": executor},
        tokens=AttemptTokens(b"test-secret-0123456789"),
        outbox=tmp_path / "outbox",
    )
    submissions = dispatch.Submissions(dispatcher, clock=wire.utc_now, workers=4)
    definition = parse_definition("name: many\ntasks:\n  t: {run: 'true', executor: celery}\n")
    run = dispatch.RunContext("run-1", definition, None, {})
    count = dispatch.BATCH_LIMIT * 2 + 7
    opened = [
        dispatch.Opened(f"batch-{secrets.token_hex(4)}", 1, "t", AttemptTokens.new_nonce())
        for _ in range(count)
    ]

    assert all(submissions.submit(run, attempt) for attempt in opened)
    assert not submissions.submit(run, opened[0])  # in flight already
    submissions.close()  # the lane submits what waits, then ends

    answers = submissions.take()
    assert sorted(event.instance_id for event in answers) == sorted(a.instance_id for a in opened)
    assert {event.kind.value for event in answers} == {"submit_acknowledged"}
    assert sum(batch_sizes) == count and max(batch_sizes) <= dispatch.BATCH_LIMIT
    assert waiting_in(executor, hosts.queue) == count


def test_a_batch_goes_to_the_broker_in_one_write(
    make_hosts: MakeHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = make_hosts()
    executor = hosts.executor()
    submissions_of(executor.submit_many(specs=[spec("true", tmp_path / "o")]))  # connected
    transport = executor.publisher._writer._transport
    writes: list[int] = []
    write = transport.write

    def counting(data: bytes) -> None:
        writes.append(len(data))
        write(data)

    monkeypatch.setattr(transport, "write", counting)

    submissions_of(executor.submit_many(specs=[spec("true", tmp_path / "o") for _ in range(10)]))

    assert len(writes) == 1 and writes[0] > 10 * 1000  # ten messages of a spec each
    assert waiting_in(executor, hosts.queue) == 11

"""Getting events to the platform: the spool, retries, restarts, rejections, the outbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from tests.execution.conftest import Engine, wait_until
from veritask.core import jsontypes
from veritask.execution import layout, port, procfs, records, spool, transports, wire, worker


def _spooled_events(attempt: layout.AttemptDir) -> list[jsontypes.JSONObject]:
    """Every event the worker ever wrote, in seq order, whatever became of it."""
    return [json.loads(path.read_bytes()) for path in _spool_files(attempt, "*")]


def _spool_files(attempt: layout.AttemptDir, suffix: str) -> list[Path]:
    return sorted(attempt.path.glob(f"event.*.{suffix}"))


def _assert_delivered_once_in_order(engine: Engine, spec: port.AttemptSpec) -> None:
    received = engine.platform.events_of(spec.instance_id)
    spooled = _spooled_events(engine.attempt(spec))
    ids = [event["event_id"] for event in received]
    assert len(ids) == len(set(ids)), "an event was delivered twice"
    assert [event["seq"] for event in received] == list(range(1, len(received) + 1))
    # The platform got the very events the worker spooled: original ids, original times.
    assert received == spooled
    assert received[0]["kind"] == "started" and received[-1]["kind"] == "completed"


def test_events_wait_in_the_spool_while_the_platform_is_gone(engine: Engine) -> None:
    engine.platform.stop()
    spec = engine.spec("sleep 0.3", heartbeat_interval=timedelta(seconds=0.05))

    observation = engine.run(spec)
    attempt = engine.attempt(spec)
    pending = wait_until(
        lambda: _spool_files(attempt, "json"),
        what="undelivered events in the spool",
    )
    engine.platform.start()
    engine.wait_delivered(spec)

    assert observation.error_category is port.ErrorCategory.NONE
    assert len(pending) >= 4  # started, heartbeats, completed
    _assert_delivered_once_in_order(engine, spec)
    assert "delivered after" in attempt.log.read_text()


def test_events_are_retried_while_the_platform_answers_503(engine: Engine) -> None:
    engine.platform.events_status = 503
    spec = engine.spec("sleep 0.2", heartbeat_interval=timedelta(seconds=0.05))

    engine.run(spec)
    wait_until(lambda: engine.platform.refused >= 3, what="a few refused tries")
    engine.platform.events_status = 200
    engine.wait_delivered(spec)

    _assert_delivered_once_in_order(engine, spec)


def test_a_restarted_worker_delivers_what_its_predecessor_spooled(engine: Engine) -> None:
    engine.platform.stop()
    spec = engine.spec("sleep 0.2", heartbeat_interval=timedelta(seconds=0.05))
    engine.run(spec)
    attempt = engine.attempt(spec)
    crashed = records.read_process_record(attempt.worker_record)
    assert crashed is not None
    os.kill(crashed.pid, signal.SIGKILL)  # it was retrying delivery when it died
    wait_until(lambda: not procfs.is_running(crashed.pid, crashed.start_ticks), what="the crash")
    spooled_before = _spooled_events(attempt)

    engine.platform.start()
    restarted = subprocess.run(
        [sys.executable, "-m", "veritask.execution.worker", str(attempt.spec)],
        capture_output=True,
        timeout=30,
        check=False,
    )

    assert restarted.returncode == worker.EXIT_SUCCEEDED, restarted.stderr
    assert _spooled_events(attempt) == spooled_before  # no new event, no seq used twice
    _assert_delivered_once_in_order(engine, spec)
    assert not _spool_files(attempt, "json")


def test_a_rejected_event_is_logged_and_not_sent_again(engine: Engine) -> None:
    engine.platform.events_status = 422
    spec = engine.spec("true")

    engine.run(spec)
    attempt = engine.attempt(spec)
    wait_until(
        lambda: len(_spool_files(attempt, "rejected")) == 2,
        what="both events rejected",
    )
    refused = engine.platform.refused

    assert refused == 2
    log = attempt.log.read_text()
    assert "event seq 1 (started) rejected: HTTP 422" in log
    assert "event seq 2 (completed) rejected: HTTP 422" in log


def test_the_outbox_transport_hands_events_to_the_platform_in_order(engine: Engine) -> None:
    outbox = engine.workspace / "outbox"
    specs = [
        engine.spec("echo one", callback=port.OutboxCallback(outbox), instance_id=f"job.{n}")
        for n in range(3)
    ]

    for spec in specs:
        engine.run(spec)
    drained = list(transports.drain_outbox(outbox))

    keys = [(e["instance_id"], e["attempt_no"], e["seq"]) for _, e in drained]
    assert keys == sorted(keys)
    assert [e["kind"] for _, e in drained] == ["started", "completed"] * 3
    assert {e["instance_id"] for _, e in drained} == {"job.0", "job.1", "job.2"}
    for path, _ in drained:
        transports.acknowledge(path)
    assert list(transports.drain_outbox(outbox)) == []
    assert not engine.platform.events  # nothing went over HTTP


def test_the_worker_runs_an_attempt_directory_without_a_supervisor(engine: Engine) -> None:
    # How another engine (a Kubernetes Job, a Celery task) runs an attempt: the program alone.
    spec = engine.spec("echo from the cli")
    attempt = layout.AttemptDir(engine.workspace / "attempt")
    attempt.path.mkdir()
    layout.write_json_atomically(attempt.spec, records.encode_spec(spec), durable=False)

    finished = subprocess.run(
        ["veritask-worker", str(attempt.spec)],
        capture_output=True,
        timeout=30,
        check=False,
        env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"},
    )
    again = subprocess.run(
        [sys.executable, "-m", "veritask.execution.worker", str(attempt.spec)],
        capture_output=True,
        timeout=30,
        check=False,
    )

    assert finished.returncode == worker.EXIT_SUCCEEDED, finished.stderr
    exit_record = records.read_exit_record(attempt)
    assert exit_record is not None and exit_record.error_category is port.ErrorCategory.NONE
    assert engine.platform.kinds_of(spec.instance_id) == ["started", "completed"]
    # Run again, it finds the exit record and starts nothing.
    assert again.returncode == worker.EXIT_SUCCEEDED, again.stderr
    assert engine.platform.kinds_of(spec.instance_id) == ["started", "completed"]
    assert attempt.log.read_text().count("from the cli") == 1


def test_a_second_worker_on_a_busy_attempt_refuses(engine: Engine) -> None:
    gate = engine.workspace / "gate"
    spec = engine.spec(f"while [ ! -e {gate} ]; do sleep 0.02; done")
    external_id = engine.executor.submit(spec=spec).external_id
    engine.wait_state(external_id, port.EngineState.RUNNING)

    second = subprocess.run(
        [sys.executable, "-m", "veritask.execution.worker", str(engine.attempt(spec).spec)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    gate.touch()

    assert second.returncode == worker.EXIT_BUSY
    assert engine.wait_ended(external_id).error_category is port.ErrorCategory.NONE


def test_the_spool_numbers_on_after_a_restart(tmp_path: Path) -> None:
    first = spool.Spool(tmp_path)
    for _ in range(3):
        first.append(_heartbeat(first.next_seq()))
    first.settle(first.undelivered()[0], spool.Disposition.SENT)

    second = spool.Spool(tmp_path)  # a new worker on the same directory

    assert [s.seq for s in second.undelivered()] == [2, 3]
    assert second.next_seq() == 4
    assert second.holds(1) and second.holds(3) and not second.holds(4)


def _heartbeat(seq: int) -> wire.WorkerEvent:
    return wire.make_event(
        kind="heartbeat",
        instance_id="i",
        attempt_no=1,
        attempt_token="t",
        seq=seq,
        evidence=wire.HeartbeatEvidence(),
    )

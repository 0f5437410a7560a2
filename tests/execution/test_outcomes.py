"""How an attempt ends, as the exit record, describe and the completed event all tell it."""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta
from pathlib import Path

from tests.execution.conftest import Engine, evidence, wait_until
from veritask.execution import local, port, records


def test_success_sends_started_and_completed_with_the_token(engine: Engine) -> None:
    spec = engine.spec('echo "out $VERITASK_INSTANCE_ID"; echo err >&2')

    observation = engine.run(spec)

    assert observation.engine_state is port.EngineState.SUCCEEDED
    assert observation.source is local.Source.EXIT_RECORD
    assert observation.exit_code == 0
    assert observation.error_category is port.ErrorCategory.NONE
    assert observation.started_at is not None and observation.ended_at is not None
    assert observation.started_at <= observation.ended_at
    assert observation.engine_id is not None
    engine.wait_delivered(spec)
    events = engine.platform.events_of(spec.instance_id)
    assert [e["kind"] for e in events] == ["started", "completed"]
    assert [e["seq"] for e in events] == [1, 2]
    assert len({e["event_id"] for e in events}) == 2
    assert all(e["attempt_token"] == spec.attempt_token for e in events)
    assert all(e["actor"] == "worker" and "+00:00" in str(e["event_time"]) for e in events)
    received = [r for r in engine.platform.events if r.event["instance_id"] == spec.instance_id]
    assert {r.authorization for r in received} == {f"Bearer {spec.attempt_token}"}
    started = evidence(events[0])
    assert set(started) == {"worker", "host", "pid", "pid_start_time", "pgid"}
    assert started["pgid"] == started["pid"]  # the task leads a process group of its own
    log = engine.attempt(spec).log.read_text()
    assert f"out {spec.instance_id}" in log and "err" in log


def test_non_zero_exit_is_a_task_error(engine: Engine) -> None:
    observation = engine.run(engine.spec("exit 3"))

    assert observation.engine_state is port.EngineState.FAILED
    assert observation.exit_code == 3
    assert observation.error_category is port.ErrorCategory.TASK_ERROR


def test_a_task_killed_by_a_signal_we_did_not_send_is_killed(engine: Engine) -> None:
    spec = engine.spec(f"while [ ! -e {engine.workspace / 'never'} ]; do sleep 0.02; done")
    external_id = engine.executor.submit(spec=spec).external_id
    engine.wait_state(external_id, port.EngineState.RUNNING)
    task = records.read_process_record(engine.attempt(spec).task_record)
    assert task is not None

    os.kill(task.pid, signal.SIGKILL)
    observation = engine.wait_ended(external_id)

    assert observation.engine_state is port.EngineState.FAILED
    assert observation.error_category is port.ErrorCategory.KILLED
    assert observation.exit_code is None
    assert observation.details["signal"] == signal.SIGKILL
    completed = engine.wait_delivered(spec)
    reported = evidence(completed)
    usage = {
        k: reported.pop(k) for k in ("cpu_user_seconds", "cpu_system_seconds", "peak_rss_bytes")
    }
    # It printed nothing: a killed task with no output has no error message to report.
    assert reported == {
        "exit_code": None,
        "signal": 9,
        "error_category": "killed",
        "commit_marker": None,
        "log_path": str(engine.attempt(spec).log),
        "output": None,
    }
    assert usage["peak_rss_bytes"] > 0  # type: ignore[operator]


def test_a_command_that_cannot_start_is_a_start_error(engine: Engine) -> None:
    observation = engine.run(engine.spec("/no/such/command --flag"))

    assert observation.error_category is port.ErrorCategory.START_ERROR
    assert observation.exit_code == 127


def test_the_skip_exit_code_is_skipped(engine: Engine) -> None:
    observation = engine.run(engine.spec("exit 99"))

    assert observation.engine_state is port.EngineState.SUCCEEDED
    assert observation.error_category is port.ErrorCategory.SKIPPED


def test_a_python_callable_gets_its_params_and_its_return_value_is_the_output(
    engine: Engine,
) -> None:
    task = port.PythonCallable("tests.execution.sample_tasks:add", {"a": 2, "b": 40})
    spec = engine.spec(task=task)

    observation = engine.run(spec)

    assert observation.error_category is port.ErrorCategory.NONE
    expected = {"sum": 42, "instance_id": spec.instance_id}
    assert json.loads(engine.attempt(spec).output.read_text()) == expected
    assert evidence(engine.wait_delivered(spec))["output"] == expected
    assert "adding 2 and 40" in engine.attempt(spec).log.read_text()


def test_a_callable_that_cannot_be_imported_is_a_start_error(engine: Engine) -> None:
    spec = engine.spec(task=port.PythonCallable("tests.execution.no_such_module:run"))

    observation = engine.run(spec)

    assert observation.error_category is port.ErrorCategory.START_ERROR
    assert "ModuleNotFoundError" in engine.attempt(spec).log.read_text()


def test_a_callable_may_skip(engine: Engine) -> None:
    task = port.PythonCallable("tests.execution.sample_tasks:skip_it", {"reason": "no new data"})
    spec = engine.spec(task=task)

    observation = engine.run(spec)

    assert observation.error_category is port.ErrorCategory.SKIPPED
    assert observation.exit_code == 99
    assert "skipped: no new data" in engine.attempt(spec).log.read_text()


def test_the_log_is_capped_and_the_task_keeps_running(engine: Engine) -> None:
    cap = 4096
    marker = engine.workspace / "went-on"
    # 100 KiB of output, then proof that the task was not stopped at the cap.
    command = f"head -c 102400 /dev/zero | tr '\\0' x; echo; touch {marker}"
    spec = engine.spec(command, log_cap_bytes=cap)

    observation = engine.run(spec)

    assert observation.error_category is port.ErrorCategory.NONE
    assert marker.exists()
    log = engine.attempt(spec).log.read_bytes()
    assert log.startswith(b"x" * cap)
    assert b"log cap of 4096 bytes reached" in log
    # The cap holds the task's output; the worker's own notes have a small budget of their own.
    assert len(log) < cap + 1024


def test_heartbeats_are_sent_while_the_task_runs(engine: Engine) -> None:
    gate = engine.workspace / "gate"
    spec = engine.spec(
        f"while [ ! -e {gate} ]; do sleep 0.02; done",
        heartbeat_interval=timedelta(seconds=0.05),
    )
    engine.executor.submit(spec=spec)

    wait_until(
        lambda: engine.platform.kinds_of(spec.instance_id).count("heartbeat") >= 3,
        what="three heartbeats",
    )
    gate.touch()
    engine.wait_delivered(spec)

    events = engine.platform.events_of(spec.instance_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["kind"] == "started" and events[-1]["kind"] == "completed"


def test_progress_and_a_commit_reach_the_platform_in_order(engine: Engine) -> None:
    task = port.PythonCallable("tests.execution.sample_tasks:commit", {"marker": "s3://out/v1"})
    spec = engine.spec(task=task)

    engine.run(spec)
    completed = engine.wait_delivered(spec)

    assert engine.platform.kinds_of(spec.instance_id) == [
        "started",
        "progress",
        "output_committed",
        "progress",
        "completed",
    ]
    progress = evidence(engine.platform.events_of(spec.instance_id)[1])
    assert progress == {"phase": "writing", "done": 1, "total": 2, "message": "half way"}
    assert evidence(completed)["commit_marker"] == "s3://out/v1"
    assert evidence(completed)["output"] == {"committed": True}
    assert engine.platform.commits == [
        {"instance_id": spec.instance_id, "attempt_no": 1, "marker": "s3://out/v1"}
    ]


def test_a_commit_from_a_fenced_attempt_is_refused_and_the_task_is_told(engine: Engine) -> None:
    engine.platform.commit_status = 409
    task = port.PythonCallable("tests.execution.sample_tasks:commit", {"marker": "s3://out/v1"})
    spec = engine.spec(task=task)

    engine.run(spec)
    completed = engine.wait_delivered(spec)

    assert evidence(completed)["output"] == {
        "committed": False,
        "fenced": "attempt 1 is fenced; attempt 2 is current",
    }
    assert evidence(completed)["commit_marker"] is None
    assert "output_committed" not in engine.platform.kinds_of(spec.instance_id)


def test_an_attempt_of_a_silent_task_creates_few_files(engine: Engine) -> None:
    spec = engine.spec("true")

    engine.run(spec)
    engine.wait_delivered(spec)

    attempt = engine.attempt(spec)
    # The task and exit records are second names of the spool's started and completed files:
    # on some file systems an inode costs more than running the task.
    inodes = {os.lstat(path).st_ino for path in attempt.path.iterdir()}
    assert len(inodes) == 5  # spec, worker record, channel, started, completed
    sent = ["event.00000001.sent", "event.00000002.sent"]

    def spooled() -> list[Path]:
        return sorted(p for p in attempt.path.iterdir() if p.name.startswith("event."))

    wait_until(lambda: [p.name for p in spooled()] == sent, what="both events settled")
    first, last = spooled()
    assert os.path.samefile(attempt.task_record, first)
    assert os.path.samefile(attempt.exit_record, last)
    assert not attempt.log.exists()  # nothing was printed
    task = records.read_process_record(attempt.task_record)
    record = records.read_exit_record(attempt)
    started = engine.platform.events_of(spec.instance_id)[0]
    assert task is not None and record is not None
    assert task.pid == evidence(started)["pid"] and task.pgid == task.pid
    assert record.started_at == task.started_at
    assert record.error_category is port.ErrorCategory.NONE and record.exit_code == 0


def test_records_written_whole_by_earlier_versions_still_read(engine: Engine) -> None:
    spec = engine.spec("true")
    engine.run(spec)
    attempt = engine.attempt(spec)
    task = records.read_process_record(attempt.task_record)
    record = records.read_exit_record(attempt)
    assert task is not None and record is not None
    # Replace the linked records by the whole objects an earlier worker wrote.
    attempt.task_record.unlink()
    attempt.exit_record.unlink()
    attempt.task_record.write_text(json.dumps(task.encode()))
    attempt.exit_record.write_text(json.dumps(record.encode()))

    assert records.read_process_record(attempt.task_record) == task
    assert records.read_exit_record(attempt) == record

"""A task's environment is an allowlist: the platform's settings never reach it; what its
definition declares, what the operator passes through and the secrets it names do."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from tests.execution.conftest import Engine, evidence
from veritask.core import jsontypes
from veritask.execution import engines, port, task_process

#: The platform's own settings, as a scheduler's (and so its workers') environment holds them.
PLATFORM_SETTINGS = {
    "VERITASK_DATABASE_URL": "postgresql://veritask:ledger-password@db/veritask",
    "VERITASK_SQL_URL_WAREHOUSE": "postgresql://etl:warehouse-password@wh/dw",
    "VERITASK_ALERT_WEBHOOK_SECRET": "webhook-signing-secret",
    "VERITASK_TOKEN": "admin-token-of-the-cli",
    "VERITASK_SECRET_UNUSED": "a-secret-no-task-names",
    "UNLISTED_HOST_VARIABLE": "not-for-tasks",
}
SECRET_VALUE = "s3cr3t-warehouse-pw"


@pytest.fixture
def platform_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The supervisor starts at the first submission, with this process's environment.
    for name, value in PLATFORM_SETTINGS.items():
        monkeypatch.setenv(name, value)


def _log(engine: Engine, spec: port.AttemptSpec) -> str:
    engine.wait_delivered(spec)
    return engine.attempt(spec).log.read_text()


def _received(engine: Engine, spec: port.AttemptSpec) -> str:
    return json.dumps(engine.platform.events_of(spec.instance_id))


@pytest.mark.usefixtures("platform_environment")
def test_a_shell_task_sees_none_of_the_platforms_settings(engine: Engine) -> None:
    spec = engine.spec("env")

    assert engine.run(spec).error_category is port.ErrorCategory.NONE

    log = _log(engine, spec)
    for name, value in PLATFORM_SETTINGS.items():
        assert name not in log and value not in log
    variables = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
    assert variables["PATH"] == os.environ["PATH"]
    assert variables["VERITASK_INSTANCE_ID"] == spec.instance_id
    assert variables["VERITASK_ATTEMPT_TOKEN"] == spec.attempt_token


@pytest.mark.usefixtures("platform_environment")
def test_a_callable_task_starts_and_sees_none_of_the_platforms_settings(engine: Engine) -> None:
    names: list[jsontypes.JSONValue] = [*PLATFORM_SETTINGS, "VERITASK_INSTANCE_ID", "PYTHONPATH"]
    task = port.PythonCallable("tests.execution.sample_tasks:environment", {"names": names})
    spec = engine.spec(task=task)

    assert engine.run(spec).error_category is port.ErrorCategory.NONE

    seen = evidence(engine.wait_delivered(spec))["output"]
    assert isinstance(seen, dict)
    assert {name: seen[name] for name in PLATFORM_SETTINGS} == dict.fromkeys(PLATFORM_SETTINGS)
    assert seen["VERITASK_INSTANCE_ID"] == spec.instance_id
    assert seen["PYTHONPATH"] == spec.env["PYTHONPATH"]


def test_a_task_sees_its_declared_env_and_the_pass_through_list(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERITASK_TASK_ENV_PASSTHROUGH", "TOOL_HOME, OTHER_TOOL")
    monkeypatch.setenv("TOOL_HOME", "/opt/tool")
    monkeypatch.setenv("UNLISTED_HOST_VARIABLE", "not-for-tasks")
    base = engine.spec('echo "tool=$TOOL_HOME greeting=$GREETING unlisted=$UNLISTED_HOST_VARIABLE"')
    spec = dataclasses.replace(base, env={**base.env, "GREETING": "hello $USER"})

    assert engine.run(spec).error_category is port.ErrorCategory.NONE

    # Declared values are taken as written: no expansion happens on the way.
    assert "tool=/opt/tool greeting=hello $USER unlisted=\n" in _log(engine, spec)


def test_a_pass_through_of_a_platform_setting_is_refused_at_the_start(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERITASK_TASK_ENV_PASSTHROUGH", "TOOL_HOME,VERITASK_DATABASE_URL")
    spec = engine.spec("env")

    assert engine.run(spec).error_category is port.ErrorCategory.START_ERROR

    reason = evidence(engine.wait_delivered(spec))["start_error"]
    assert reason == (
        "VERITASK_TASK_ENV_PASSTHROUGH: VERITASK_DATABASE_URL is a setting of the platform, "
        "never passed to a task"
    )


def _with_secret(engine: Engine, command: str) -> port.AttemptSpec:
    spec = engine.spec(command)
    return dataclasses.replace(spec, secret_env={"PGPASSWORD": "warehouse_password"})


#: "password: ***." in the log proves that the task had the value (only it is masked so).
CHECK_SECRET = (
    'echo "password: $PGPASSWORD." '
    # The value split across two writes, the second much later than the first.
    '&& printf "split: %s" "${PGPASSWORD%???????}" '
    '&& sleep 0.2 && echo "${PGPASSWORD#????????????}."'
)


def _assert_masked(engine: Engine, spec: port.AttemptSpec) -> None:
    log = _log(engine, spec)
    assert "password: ***." in log and "split: ***." in log
    assert SECRET_VALUE not in log and SECRET_VALUE[:8] not in log
    assert SECRET_VALUE not in _received(engine, spec)
    assert SECRET_VALUE not in engine.attempt(spec).spec.read_text()


@pytest.mark.usefixtures("platform_environment")
def test_a_secret_from_the_environment_reaches_the_task_and_is_masked_in_its_log(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERITASK_SECRET_WAREHOUSE_PASSWORD", SECRET_VALUE)
    spec = _with_secret(engine, CHECK_SECRET)

    assert engine.run(spec).error_category is port.ErrorCategory.NONE

    _assert_masked(engine, spec)


@pytest.mark.usefixtures("platform_environment")
def test_a_failed_tasks_error_message_masks_the_secret_it_printed(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERITASK_SECRET_WAREHOUSE_PASSWORD", SECRET_VALUE)
    spec = _with_secret(
        engine, CHECK_SECRET + ' && echo "login failed for $PGPASSWORD" >&2; exit 2'
    )

    assert engine.run(spec).error_category is port.ErrorCategory.TASK_ERROR

    message = evidence(engine.wait_delivered(spec))["error_message"]
    assert message == "password: ***.\nsplit: ***.\nlogin failed for ***"
    _assert_masked(engine, spec)


def _secrets_file(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps({"warehouse_password": SECRET_VALUE}))
    path.chmod(mode)
    return path


def test_a_secret_from_the_secrets_file_reaches_the_task_and_is_masked_in_its_log(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VERITASK_SECRETS_FILE", str(_secrets_file(tmp_path, 0o600)))
    spec = _with_secret(engine, CHECK_SECRET)

    assert engine.run(spec).error_category is port.ErrorCategory.NONE

    _assert_masked(engine, spec)


def test_a_secrets_file_others_may_read_is_refused(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = _secrets_file(tmp_path, 0o644)
    monkeypatch.setenv("VERITASK_SECRETS_FILE", str(path))
    spec = _with_secret(engine, "echo started")

    assert engine.run(spec).error_category is port.ErrorCategory.START_ERROR

    reason = evidence(engine.wait_delivered(spec))["start_error"]
    assert reason == (
        f"the secrets file {path} (VERITASK_SECRETS_FILE) has mode 0644: it must be readable "
        "by its owner only (chmod 600)"
    )
    assert "started" not in _log(engine, spec)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.usefixtures("platform_environment")
def test_an_unknown_secret_is_a_start_error_naming_it(engine: Engine) -> None:
    spec = _with_secret(engine, "echo started")

    assert engine.run(spec).error_category is port.ErrorCategory.START_ERROR

    reason = evidence(engine.wait_delivered(spec))["start_error"]
    assert isinstance(reason, str)
    assert reason.startswith("unknown secret 'warehouse_password': no secret provider holds it")
    log = _log(engine, spec)
    assert "unknown secret 'warehouse_password'" in log and "started" not in log


def _sink(tmp_path: Path) -> task_process.LogSink:
    sink = task_process.LogSink(tmp_path / "task.log", cap_bytes=4096)
    sink.mask([SECRET_VALUE, "abc"])  # too short to mask: it would hide words, and tell
    return sink


@pytest.mark.parametrize("cut", range(1, len(SECRET_VALUE)))
def test_a_value_split_across_two_reads_is_masked(tmp_path: Path, cut: int) -> None:
    sink = _sink(tmp_path)
    line = f"abc {SECRET_VALUE} {SECRET_VALUE}!\n".encode()
    at = line.index(SECRET_VALUE.encode()) + cut

    sink.write_output(line[:at])
    sink.write_output(line[at:])
    sink.close()

    assert (tmp_path / "task.log").read_bytes() == b"abc *** ***!\n"


def test_a_held_back_start_of_a_value_is_written_when_the_output_ends(tmp_path: Path) -> None:
    sink = _sink(tmp_path)

    sink.write_output(f"ends with {SECRET_VALUE[:5]}".encode())
    assert (tmp_path / "task.log").read_text() == "ends with "  # the rest may be the value
    sink.end_output()
    sink.note(f"a note that quotes {SECRET_VALUE}")
    sink.close()

    text = (tmp_path / "task.log").read_text()
    assert text.startswith(f"ends with {SECRET_VALUE[:5]}[veritask-worker ")
    assert text.endswith("] a note that quotes ***\n")


def test_the_error_tail_keeps_the_last_lines_past_the_log_cap(tmp_path: Path) -> None:
    sink = task_process.LogSink(tmp_path / "task.log", cap_bytes=64)
    for n in range(1, 1001):
        sink.write_output(f"line {n}\n".encode())
    sink.close()

    # The log stopped at its cap; the tail still holds the end, 20 lines of it.
    assert "line 1000" not in (tmp_path / "task.log").read_text()
    assert sink.error_tail() == "\n".join(f"line {n}" for n in range(981, 1001))


def test_the_error_tail_is_bounded_in_bytes_and_starts_at_a_whole_line(tmp_path: Path) -> None:
    sink = task_process.LogSink(tmp_path / "task.log", cap_bytes=1 << 20)
    sink.write_output(b"x" * 10_000 + b"\n" + b"y" * 5_000 + b"\nthe end\n")
    sink.close()

    tail = sink.error_tail()
    assert len(tail.encode()) <= task_process.ERROR_TAIL_BYTES
    assert tail.endswith("the end") and "x" not in tail
    one_long_line = task_process.LogSink(tmp_path / "other.log", cap_bytes=1 << 20)
    one_long_line.write_output(b"z" * 10_000 + b"\n")
    assert one_long_line.error_tail() == "z" * (task_process.ERROR_TAIL_BYTES - 1)


def test_a_scheduler_with_a_platform_setting_in_the_pass_through_refuses_to_start() -> None:
    environ = {"VERITASK_TASK_ENV_PASSTHROUGH": "veritask_token"}

    with pytest.raises(ValueError, match="veritask_token is a setting of the platform"):
        engines.from_environment(environ)


#: What a run's parameters could put in a task's environment before triggers checked names,
#: and what a value may still hold: none of it may crash the worker.
WEIRD_VARIABLES = [
    ("VERITASK_PARAM_a=b", "1", "named 'VERITASK_PARAM_a=b'"),
    ("VERITASK_PARAM_nul\x00", "1", "named 'VERITASK_PARAM_nul\\x00'"),
    ("", "1", "named ''"),
    ("VERITASK_PARAM_v", "a\x00b", "'VERITASK_PARAM_v' holds a NUL character"),
    ("VERITASK_PARAM_s", "\ud800", "'VERITASK_PARAM_s' is not text"),
]


@pytest.mark.parametrize(("name", "value", "said"), WEIRD_VARIABLES)
@pytest.mark.parametrize("kind", ["shell", "callable"])
def test_a_variable_no_environment_can_hold_is_a_start_error_not_a_crash(
    engine: Engine, name: str, value: str, said: str, kind: str
) -> None:
    task: port.TaskSpec = (
        port.ShellCommand("echo started")
        if kind == "shell"
        else port.PythonCallable("tests.execution.sample_tasks:environment", {"names": []})
    )
    base = engine.spec(task=task)
    spec = dataclasses.replace(base, env={**base.env, name: value})

    assert engine.run(spec).error_category is port.ErrorCategory.START_ERROR

    reason = evidence(engine.wait_delivered(spec))["start_error"]
    assert isinstance(reason, str) and said in reason, reason
    assert "started" not in _log(engine, spec)

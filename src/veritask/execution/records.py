"""The JSON shapes of an attempt directory's files: the spec, the identities and the exit record.

These files are read by other processes (the worker reads the spec the executor wrote; the
executor reads what the worker wrote), so each has one encoder and one checking decoder here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar, cast

from veritask.core import jsontypes
from veritask.execution import layout, port, procfs, wire

_T = TypeVar("_T")


def _field(obj: Mapping[str, jsontypes.JSONValue], name: str, kind: type[_T]) -> _T:
    value = obj.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"field {name!r} must be a {kind.__name__}, got {value!r}")
    return value


def _optional(obj: Mapping[str, jsontypes.JSONValue], name: str, kind: type[_T]) -> _T | None:
    return None if obj.get(name) is None else _field(obj, name, kind)


def _seconds(obj: Mapping[str, jsontypes.JSONValue], name: str) -> timedelta:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"field {name!r} must be a number of seconds, got {value!r}")
    return timedelta(seconds=value)


def _time(obj: Mapping[str, jsontypes.JSONValue], name: str) -> datetime | None:
    text = _optional(obj, name, str)
    return None if text is None else datetime.fromisoformat(text)


def _object(obj: Mapping[str, jsontypes.JSONValue], name: str) -> jsontypes.JSONObject:
    return _field(obj, name, dict)


# --- the spec -----------------------------------------------------------------------------


def encode_spec(spec: port.AttemptSpec) -> jsontypes.JSONObject:
    task: jsontypes.JSONObject
    match spec.task:
        case port.ShellCommand(command=command):
            task = {"type": "shell", "command": command}
        case port.PythonCallable(target=target, params=params):
            task = {"type": "python", "target": target, "params": dict(params)}
        case port.SqlStatement(statement=statement, connection=connection, parameters=values):
            task = {"type": "sql", "statement": statement, "connection": connection}
            if values:
                task["parameters"] = list(values)
        case port.WaitCondition():
            # The scheduler that checks a wait holds its spec: no worker ever reads one.
            raise ValueError("a wait is checked by the scheduler, never handed to a worker")
    callback: jsontypes.JSONObject
    match spec.callback:
        case port.HttpCallback(base_url=base_url, timeout=timeout):
            callback = {
                "type": "http",
                "base_url": base_url,
                "timeout_seconds": timeout.total_seconds(),
            }
        case port.OutboxCallback(directory=directory, commit_base_url=commit_base_url):
            callback = {
                "type": "outbox",
                "directory": str(directory),
                "commit_base_url": commit_base_url,
            }
    return {
        "instance_id": spec.instance_id,
        "attempt_no": spec.attempt_no,
        "attempt_token": spec.attempt_token,
        "task": task,
        "callback": callback,
        "env": dict(spec.env),
        "timeout_seconds": None if spec.timeout is None else spec.timeout.total_seconds(),
        "grace_period_seconds": spec.grace_period.total_seconds(),
        "heartbeat_interval_seconds": spec.heartbeat_interval.total_seconds(),
        "log_cap_bytes": spec.log_cap_bytes,
        "skip_exit_code": spec.skip_exit_code,
        "workdir": None if spec.workdir is None else str(spec.workdir),
        "delivery_retry_max_seconds": spec.delivery_retry_max.total_seconds(),
        "delivery_deadline_seconds": spec.delivery_deadline.total_seconds(),
        "queue": spec.queue,
        "secret_env": dict(spec.secret_env),
        "upstream_outputs": dict(spec.upstream_outputs),
    }


def decode_spec(obj: jsontypes.JSONObject) -> port.AttemptSpec:
    """Raises ValueError naming the bad field."""
    task_obj = _object(obj, "task")
    task: port.TaskSpec
    match task_obj.get("type"):
        case "shell":
            task = port.ShellCommand(_field(task_obj, "command", str))
        case "python":
            task = port.PythonCallable(
                _field(task_obj, "target", str), _field(task_obj, "params", dict)
            )
        case "sql":
            task = port.SqlStatement(
                _field(task_obj, "statement", str),
                _field(task_obj, "connection", str),
                tuple(_optional(task_obj, "parameters", list) or ()),
            )
        case other:
            raise ValueError(f"unknown task type {other!r}")
    callback_obj = _object(obj, "callback")
    callback: port.CallbackTarget
    match callback_obj.get("type"):
        case "http":
            callback = port.HttpCallback(
                _field(callback_obj, "base_url", str), _seconds(callback_obj, "timeout_seconds")
            )
        case "outbox":
            callback = port.OutboxCallback(
                Path(_field(callback_obj, "directory", str)),
                _optional(callback_obj, "commit_base_url", str),
            )
        case other:
            raise ValueError(f"unknown callback type {other!r}")
    env = _object(obj, "env")
    if not all(isinstance(value, str) for value in env.values()):
        raise ValueError("env values must be strings")
    secret_env = obj.get("secret_env") or {}  # absent from the specs of older schedulers
    if not isinstance(secret_env, dict) or not all(
        isinstance(value, str) for value in secret_env.values()
    ):
        raise ValueError("secret_env must map variables to secret names")
    upstream_outputs = obj.get("upstream_outputs") or {}  # absent from older schedulers' specs
    if not isinstance(upstream_outputs, dict):
        raise ValueError("upstream_outputs must map task keys to outputs")
    workdir = _optional(obj, "workdir", str)
    return port.AttemptSpec(
        instance_id=_field(obj, "instance_id", str),
        attempt_no=_field(obj, "attempt_no", int),
        attempt_token=_field(obj, "attempt_token", str),
        task=task,
        callback=callback,
        env=cast(dict[str, str], env),
        timeout=None if obj.get("timeout_seconds") is None else _seconds(obj, "timeout_seconds"),
        grace_period=_seconds(obj, "grace_period_seconds"),
        heartbeat_interval=_seconds(obj, "heartbeat_interval_seconds"),
        log_cap_bytes=_field(obj, "log_cap_bytes", int),
        skip_exit_code=_field(obj, "skip_exit_code", int),
        workdir=None if workdir is None else Path(workdir),
        delivery_retry_max=_seconds(obj, "delivery_retry_max_seconds"),
        delivery_deadline=_seconds(obj, "delivery_deadline_seconds"),
        queue=_optional(obj, "queue", str),
        secret_env=cast(dict[str, str], secret_env),
        upstream_outputs=upstream_outputs,
    )


def read_spec(attempt: layout.AttemptDir) -> port.AttemptSpec:
    obj = layout.read_json_object(attempt.spec)
    if obj is None:
        raise FileNotFoundError(attempt.spec)
    return decode_spec(obj)


# --- identities ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessRecord:
    """A process as the kernel knows it: pid plus start time is unique across pid reuse."""

    pid: int
    start_ticks: int
    host: str
    started_at: datetime
    #: The process group (tasks run in their own); None for a worker.
    pgid: int | None = None

    def encode(self) -> jsontypes.JSONObject:
        return {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "host": self.host,
            "started_at": wire.format_time(self.started_at),
            "pgid": self.pgid,
        }

    @classmethod
    def decode(cls, obj: jsontypes.JSONObject) -> ProcessRecord:
        started_at = _time(obj, "started_at")
        if started_at is None:
            raise ValueError("field 'started_at' is required")
        return cls(
            pid=_field(obj, "pid", int),
            start_ticks=_field(obj, "start_ticks", int),
            host=_field(obj, "host", str),
            started_at=started_at,
            pgid=_optional(obj, "pgid", int),
        )

    @classmethod
    def of_worker(cls, pid: int) -> ProcessRecord:
        """The identity of a worker process that exists now (it cannot have been reaped)."""
        ticks = procfs.start_ticks(pid)
        if ticks is None:
            raise ProcessLookupError(f"no process {pid}")
        return cls(pid=pid, start_ticks=ticks, host=procfs.hostname(), started_at=wire.utc_now())

    @property
    def engine_id(self) -> str:
        """``<host>:<pid>:<start ticks>``: names this process and no later one with its pid."""
        return f"{self.host}:{self.pid}:{self.start_ticks}"


def write_process_record(path: Path, record: ProcessRecord) -> None:
    layout.write_json_atomically(path, record.encode(), durable=False)


def read_process_record(path: Path) -> ProcessRecord | None:
    """A worker record, or a task record: the worker's ``started`` event (the task was
    forked: its pid, start ticks and group are in the event's evidence; its time is when)."""
    obj = layout.read_json_object(path)
    if obj is None:
        return None
    if obj.get("kind") == "started":
        return _task_of(wire.validate(obj))
    return ProcessRecord.decode(obj)


def _task_of(event: wire.WorkerEvent) -> ProcessRecord:
    if event["kind"] != "started":
        raise ValueError("a task record is a started event")
    evidence = cast(jsontypes.JSONObject, event["evidence"])
    started_at = _time(cast(jsontypes.JSONObject, event), "event_time")
    if started_at is None:
        raise ValueError("field 'event_time' is required")
    return ProcessRecord(
        pid=_field(evidence, "pid", int),
        start_ticks=_field(evidence, "pid_start_time", int),
        host=_field(evidence, "host", str),
        started_at=started_at,
        pgid=_optional(evidence, "pgid", int),
    )


# --- the exit record ----------------------------------------------------------------------


@dataclass(frozen=True)
class ExitRecord:
    """How the task ended, as the worker saw it. It embeds the completed event, so that a
    restarted worker can deliver it even if the crash came before the spool held it."""

    started_at: datetime | None
    ended_at: datetime
    completed: wire.CompletedEvent

    @property
    def exit_code(self) -> int | None:
        return self.completed["evidence"]["exit_code"]

    @property
    def signal(self) -> int | None:
        return self.completed["evidence"]["signal"]

    @property
    def error_category(self) -> port.ErrorCategory:
        return port.ErrorCategory(self.completed["evidence"]["error_category"])

    def encode(self) -> jsontypes.JSONObject:
        evidence = self.completed["evidence"]
        return {
            "exit_code": evidence["exit_code"],
            "signal": evidence["signal"],
            "error_category": evidence["error_category"],
            "commit_marker": evidence["commit_marker"],
            "started_at": None if self.started_at is None else wire.format_time(self.started_at),
            "ended_at": wire.format_time(self.ended_at),
            # A TypedDict is a JSON object; mypy cannot widen it to the JSON alias by itself.
            "completed": cast(jsontypes.JSONObject, self.completed),
        }

    @classmethod
    def decode(cls, obj: jsontypes.JSONObject) -> ExitRecord:
        ended_at = _time(obj, "ended_at")
        if ended_at is None:
            raise ValueError("field 'ended_at' is required")
        completed = wire.validate(_object(obj, "completed"))
        if completed["kind"] != "completed":
            raise ValueError("the exit record's event must be a completed event")
        return cls(started_at=_time(obj, "started_at"), ended_at=ended_at, completed=completed)


def read_exit_record(attempt: layout.AttemptDir) -> ExitRecord | None:
    """The exit record: the worker's ``completed`` event, with the task's start from the task
    record (None: the task never started). Records written as a whole object by earlier
    versions read the same."""
    obj = layout.read_json_object(attempt.exit_record)
    if obj is None:
        return None
    if obj.get("kind") != "completed":
        return ExitRecord.decode(obj)
    completed = wire.validate(obj)
    ended_at = _time(obj, "event_time")
    if ended_at is None:
        raise ValueError("field 'event_time' is required")
    task = read_process_record(attempt.task_record)
    return ExitRecord(
        started_at=None if task is None else task.started_at,
        ended_at=ended_at,
        completed=cast(wire.CompletedEvent, completed),
    )

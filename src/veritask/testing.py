"""One run of a pipeline on this machine, for a user's test and for ``veritask test``
(docs/python.md, "Testing a pipeline").

:func:`run` compiles the pipeline, applies it to a ledger of its own (a SQLite file in a
temporary ``VERITASK_HOME``, deleted afterwards unless ``keep``), triggers one run and ticks
the real scheduler with the local executor in this thread until the run has finished. No
server is started and nothing is sent over the network. ``echo`` receives each task state
change and each task log line as they happen.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.definitions.model import WAIT_EXECUTOR
from veritask.execution import local, port, wait_http
from veritask.ledger import dialects, migrate
from veritask.pipelines import compile as pipelines
from veritask.pipelines.api import Pipeline
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens
from veritask.services import definitions, logs, pools, runs, views
from veritask.services.errors import ServiceError
from veritask.services.platform import Platform

ACTOR: Final = "operator:test"
#: Short timings: one run on one machine, with nobody else's work to be fair to.
SETTINGS: Final = Settings(
    monitor_every=timedelta(milliseconds=200),
    reconcile_every=timedelta(milliseconds=300),
    full_scan_every=timedelta(milliseconds=500),
)
#: A run given up on is cancelled; its tasks are stopped within this long (SIGTERM, then KILL).
STOP_SECONDS: Final = 20.0
STOP_REASON: Final = "the local test run was stopped before it finished"
#: How often the run is read back for state changes and new log bytes.
READ_EVERY_SECONDS: Final = 0.05
_ACTIVE: Final = (RunExecutionState.QUEUED, RunExecutionState.RUNNING, RunExecutionState.CANCELLING)
#: A run whose computation succeeded is finished once its publication has ended too.
_PUBLISHING: Final = (
    PublicationState.PENDING,
    PublicationState.CHECKING,
    PublicationState.PUBLISHING,
)
_PUBLISHED: Final = (PublicationState.NOT_REQUIRED, PublicationState.PUBLISHED)


class RunTimedOut(RuntimeError):
    """The run was still active when ``timeout`` ran out; its tasks were left as they were."""


@dataclass(frozen=True)
class TaskResult:
    """One task of the finished run: its state, why, how many attempts, and what it printed."""

    task: str
    state: str
    reason: str
    attempts: int
    exit_code: int | None
    log: str
    output: JSONValue = None
    """What the task gives downstream: its current attempt's output when it succeeded."""

    def to_json(self) -> JSONObject:
        return {
            "task": self.task,
            "state": self.state,
            "reason": self.reason,
            "attempts": self.attempts,
            "exit_code": self.exit_code,
            "log": self.log,
            "output": self.output,
        }


@dataclass(frozen=True)
class RunResult:
    """The finished run: its execution state and reason, its publication's, and each task by
    key (publish steps are ``publish.check.NAME`` and ``publish.commit``)."""

    run_id: str
    pipeline: str
    state: str
    reason: str
    publication: str
    publication_reason: str
    instances: dict[str, TaskResult]
    home: Path | None = None
    """The kept ``VERITASK_HOME`` (``keep=True``), else None: it was deleted."""

    @property
    def succeeded(self) -> bool:
        """The computation succeeded and, when it publishes, the output was published."""
        return self.state == RunExecutionState.SUCCESS and self.publication in _PUBLISHED

    def to_json(self) -> JSONObject:
        tasks: JSONObject = {key: value.to_json() for key, value in self.instances.items()}
        return {
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "state": self.state,
            "reason": self.reason,
            "publication": self.publication,
            "publication_reason": self.publication_reason,
            "instances": tasks,
            "home": str(self.home) if self.home is not None else None,
        }


def run(
    pipeline: Pipeline,
    *,
    params: Mapping[str, JSONValue] | None = None,
    logical_time: datetime | None = None,
    echo: Callable[[str], None] | None = None,
    keep: bool = False,
    database_url: str | None = None,
    timeout: float = 600.0,
) -> RunResult:
    """Run ``pipeline`` once and return the finished run.

    A refused pipeline raises ``PipelineError`` (each problem names its file and line), a
    parameter it does not declare ``services.errors.InvalidInput``; a run still going after
    ``timeout`` seconds raises :class:`RunTimedOut`. ``database_url`` puts the ledger in an
    empty migrated database of your own instead of the temporary SQLite file.
    """
    compiled = pipelines.compile_pipeline(pipeline)
    home = Path(tempfile.mkdtemp(prefix="veritask-test-"))
    try:
        url = database_url or f"sqlite:///{home / dialects.DATABASE_FILE}"
        migrate.upgrade(url)
        _, root = pipelines.import_path(Path(pipeline.file).resolve())
        platform = Platform.open(url, home)
        try:
            with _importable(root):
                finished = _run_once(
                    platform, compiled, params, logical_time, echo or _quiet, timeout
                )
        finally:
            platform.close()
        return replace(finished, home=home if keep else None)
    finally:
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


def _quiet(line: str) -> None:
    """The ``echo`` of a run nobody watches."""


@contextlib.contextmanager
def _importable(root: Path) -> Iterator[None]:
    """The pipeline module's folder on the PYTHONPATH the workers inherit, for its tasks."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), before) if p)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _define_pools(platform: Platform, compiled: pipelines.Compiled) -> None:
    """Give every pool the pipeline names, and that the ledger lacks, room for all of its
    tasks at once: a test run checks the pipeline, not the platform's shared limits."""
    needed: dict[str, int] = {}
    for task in compiled.definition.tasks.values():
        if task.pool is not None:
            needed[task.pool] = needed.get(task.pool, 0) + task.pool_slots
    defined = {pool.name for pool in pools.list_pools(platform) if pool.slots is not None}
    for name, slots in sorted(needed.items()):
        if name not in defined:
            pools.set_pool(platform, name, slots=slots, actor=ACTOR)


def _room_for(compiled: pipelines.Compiled) -> int:
    """Slots for every task and publish step of the pipeline at once (at least the machine's
    processors): a test run checks the pipeline, not this machine's limits. A mapped task
    counts once; its instances share the slots beyond the others'."""
    definition = compiled.definition
    steps = 0
    if definition.publish is not None:
        steps = len(definition.publish.checks) + 1
    return max(len(definition.tasks) + steps, os.cpu_count() or 1)


def _run_once(
    platform: Platform,
    compiled: pipelines.Compiled,
    params: Mapping[str, JSONValue] | None,
    logical_time: datetime | None,
    echo: Callable[[str], None],
    timeout: float,
) -> RunResult:
    applied = definitions.apply_definition(platform, compiled.source(), actor=ACTOR)
    _define_pools(platform, compiled)
    moment = logical_time
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    triggered = runs.trigger_run(
        platform,
        applied.name,
        actor=ACTOR,
        kind=TriggerKind.MANUAL,
        parameters=dict(params or {}),
        logical_time=moment,
    )
    executor = local.LocalExecutor(
        home=platform.home,
        slots=_room_for(compiled),
        idle_exit_after=timedelta(seconds=30),
    )
    scheduler = Scheduler(
        platform.ledger,
        executors={"local": executor},
        tokens=AttemptTokens.from_home(platform.home),
        outbox=platform.home / "outbox",
        settings=SETTINGS,
        wait_http_allow=wait_http.HttpAllow.from_environment(os.environ),
    )
    waits = scheduler.dispatcher.executors.get(WAIT_EXECUTOR)
    watcher = _Watcher(platform, triggered.run_id, echo, waits=waits)
    try:
        scheduler.recover()
        try:
            detail = _tick_until_finished(scheduler, watcher, timeout)
        except BaseException:  # a timeout or Ctrl-C: no task may outlive its deleted home
            _cancel(platform, scheduler, watcher)
            raise
    finally:
        try:
            scheduler.close()
        finally:
            executor.shutdown_supervisor()
    return watcher.result(detail, applied.name)


def _tick_until_finished(
    scheduler: Scheduler, watcher: _Watcher, timeout: float
) -> views.RunDetail:
    give_up_at = time.monotonic() + timeout
    read_at = 0.0
    while True:
        report = scheduler.tick()
        now = time.monotonic()
        if now >= read_at:
            read_at = now + READ_EVERY_SECONDS
            detail = watcher.look()
            if _finished(detail.run):
                return detail
        if now >= give_up_at:
            raise RunTimedOut(f"run {watcher.run_id} was still active after {timeout:g}s")
        if report.work == 0:
            time.sleep(0.005)


def _cancel(platform: Platform, scheduler: Scheduler, watcher: _Watcher) -> None:
    """Cancel the run and tick until its tasks are confirmed stopped (or ``STOP_SECONDS``)."""
    with contextlib.suppress(ServiceError):
        runs.cancel_run(platform, watcher.run_id, actor=ACTOR, reason=STOP_REASON)
    give_up_at = time.monotonic() + STOP_SECONDS
    while time.monotonic() < give_up_at:
        if scheduler.tick().work == 0:
            time.sleep(READ_EVERY_SECONDS)
        if watcher.look().run.execution_state not in _ACTIVE:
            return


def _finished(run: views.Run) -> bool:
    if run.execution_state in _ACTIVE:
        return False
    return (
        run.execution_state != RunExecutionState.SUCCESS or run.publication_state not in _PUBLISHING
    )


@dataclass
class _Watcher:
    """Reads the run back and tells ``echo`` what changed: task states and new log lines."""

    platform: Platform
    run_id: str
    echo: Callable[[str], None]
    states: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    partial: dict[tuple[str, int], str] = field(default_factory=dict)
    text: dict[str, list[str]] = field(default_factory=dict)
    waits: port.Executor | None = None
    """The scheduler's wait checker: it is asked how many checks each open wait made."""
    run_state: str = ""
    publication: str = ""
    checks: dict[str, int] = field(default_factory=dict)

    def look(self) -> views.RunDetail:
        detail = runs.get_run(self.platform, self.run_id)
        for instance in detail.instances:
            for attempt in instance.attempts:
                self._read_log(instance, attempt.attempt_no, attempt.state.is_terminal)
            name = _task_name(instance)
            if self.states.get(name) != instance.state:
                self.states[name] = instance.state
                self.echo(f"[{name}] {instance.state}: {instance.reason}")
            if instance.attempts:
                self._checked(name, instance.attempts[-1])
        state = detail.run.execution_state
        if state != self.run_state:
            self.run_state = state
            self.echo(f"run {self.run_id} {state}: {detail.run.execution_reason or ''}".rstrip())
        publication = detail.run.publication_state
        if publication != self.publication and publication != PublicationState.NOT_REQUIRED:
            self.publication = publication
            reason = detail.run.publication_reason or ""
            self.echo(f"run {self.run_id} publication {publication}: {reason}".rstrip())
        return detail

    def _checked(self, name: str, attempt: views.Attempt) -> None:
        """A line for each check of an open wait: what it saw (the ledger records only
        changes, so the checker is asked)."""
        if self.waits is None or attempt.executor != WAIT_EXECUTOR or not attempt.external_id:
            return
        if attempt.state.is_terminal:
            return
        details = self.waits.describe(external_id=attempt.external_id).details
        count = details.get("checks")
        key = attempt.external_id
        if not isinstance(count, int) or count <= self.checks.get(key, 0):
            return
        self.checks[key] = count
        self.echo(f"[{name}] check {count}: {details.get('seen', '')}")

    def _read_log(self, instance: views.Instance, attempt_no: int, ended: bool) -> None:
        where = (instance.id, attempt_no)
        while True:
            chunk = logs.read_log(
                self.platform, instance.id, attempt_no=attempt_no, offset=self.offsets.get(where, 0)
            )
            self.offsets[where] = chunk.next_offset
            if chunk.text:
                self._lines(instance, where, chunk.text)
            if not chunk.truncated:
                break
        rest = self.partial.get(where, "")
        if ended and rest:
            self.partial[where] = ""
            self._lines(instance, where, "\n")

    def _lines(self, instance: views.Instance, where: tuple[str, int], text: str) -> None:
        name = _task_name(instance)
        self.text.setdefault(name, []).append(text)
        *lines, rest = (self.partial.get(where, "") + text).split("\n")
        self.partial[where] = rest
        for line in lines:
            self.echo(f"[{name}] | {line}")

    def result(self, detail: views.RunDetail, pipeline: str) -> RunResult:
        tasks: dict[str, TaskResult] = {}
        for instance in detail.instances:
            name = _task_name(instance)
            last = instance.attempts[-1] if instance.attempts else None
            tasks[name] = TaskResult(
                task=name,
                state=str(instance.state),
                reason=instance.reason,
                attempts=len(instance.attempts),
                exit_code=last.exit_code if last is not None else None,
                log="".join(self.text.get(name, [])),
                output=instance.output,
            )
        run = detail.run
        return RunResult(
            self.run_id,
            pipeline,
            str(run.execution_state),
            run.execution_reason or "",
            str(run.publication_state),
            run.publication_reason or "",
            tasks,
        )


def _task_name(instance: views.Instance) -> str:
    """A task's key; a mapped task's instances are ``key[index]``."""
    return instance.task if instance.map_index < 0 else f"{instance.task}[{instance.map_index}]"

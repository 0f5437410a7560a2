"""Handing opened attempts to their executors and turning the answers into facts.

An attempt is opened (recorded) before it is submitted, and the submission's answer is a fact
of the executor's: ``submit_acknowledged`` with the external id, or ``submit_failed`` with the
error and whether retrying can help. Submitting is idempotent per attempt, so recovery may
submit again whatever it cannot prove was submitted.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from veritask import ids
from veritask.core import new_events
from veritask.core.events import Event
from veritask.core.jsontypes import JSONValue
from veritask.definitions import parameters
from veritask.definitions.model import (
    Definition,
    OnTimeout,
    SecretRef,
    TaskSpec,
    WaitKind,
    WaitSpec,
    task_env,
)
from veritask.execution import log_limits, port
from veritask.execution.errors import ExecutorError
from veritask.scheduling import publication, templates
from veritask.scheduling.tokens import AttemptTokens

log = logging.getLogger(__name__)

#: How many deferred submissions' errors are kept for the reconciler's alerts.
_DEFERRALS_KEPT = 10_000
#: The most attempts given in one call to an executor that submits many at once.
BATCH_LIMIT = 64
#: The longest value a ``run:`` task's environment variable may hold: the kernel refuses to
#: start a process with a longer one (MAX_ARG_STRLEN, 128 KiB), with room for the name.
SHELL_VALUE_LIMIT = 128 * 1024 - 256

#: Reads the outputs that a run's tasks give downstream: (run id, task keys) -> by task key.
OutputReader = Callable[[str, Sequence[str]], Mapping[str, JSONValue]]
#: Reads the items a mapped task was expanded over: (run id, task key) -> the list, or None.
MapItemsReader = Callable[[str, str], list[JSONValue] | None]
#: How many mapped tasks' items the dispatcher keeps (each is read once per run, not per item).
_MAPS_KEPT = 64


def new_event_id() -> str:
    return ids.time_ordered_id()


@dataclass(frozen=True)
class RunContext:
    """What a run gives every attempt it submits."""

    run_id: str
    definition: Definition
    logical_time: datetime | None
    parameters: Mapping[str, JSONValue]

    @functools.cached_property
    def tasks(self) -> dict[str, TaskSpec]:
        """Every task the run may submit: its work and its publication steps."""
        return publication.all_tasks(self.definition)


@dataclass(frozen=True)
class Opened:
    """An attempt that the ledger recorded as opened and that must reach its engine."""

    instance_id: str
    attempt_no: int
    task_key: str
    nonce: str
    map_index: int = -1
    """The instance's item in its mapped task (-1: not mapped)."""


class Dispatcher:
    """Builds attempt specs, submits them, and reports the engines' answers as events."""

    def __init__(
        self,
        *,
        executors: Mapping[str, port.Executor],
        tokens: AttemptTokens,
        outbox: Path,
        commit_base_url: str | None = None,
        outputs: OutputReader | None = None,
        map_items: MapItemsReader | None = None,
    ) -> None:
        self.executors = executors
        self.tokens = tokens
        self.outbox = outbox
        self.commit_base_url = commit_base_url
        self.outputs = outputs
        self.map_items = map_items
        self._maps: dict[tuple[str, str], list[JSONValue]] = {}
        self._maps_lock = threading.Lock()
        # The engines' last words about submissions deferred because they were unreachable,
        # so that the reconciler's alert carries them (bounded: only the latest few).
        self._deferred: dict[tuple[str, int], str] = {}
        self._deferred_lock = threading.Lock()

    def deferral_reason(self, instance_id: str, attempt_no: int) -> str | None:
        """Why the submission of this attempt was deferred, if it was (the engine's error)."""
        with self._deferred_lock:
            return self._deferred.get((instance_id, attempt_no))

    def _remember_deferral(self, opened: Opened, error: str) -> None:
        with self._deferred_lock:
            if len(self._deferred) >= _DEFERRALS_KEPT:
                self._deferred.pop(next(iter(self._deferred)))
            self._deferred[(opened.instance_id, opened.attempt_no)] = error

    def executor_for(self, task: TaskSpec) -> port.Executor | None:
        return self.executors.get(task.executor)

    def spec(self, run: RunContext, opened: Opened) -> port.AttemptSpec:
        task = run.tasks[opened.task_key]
        declared_parameters = run.definition.parameters
        # Only a task that names an output reads its upstream instances (the hot path of
        # every other task reads nothing more).
        upstream: Mapping[str, JSONValue] = {}
        if task.reads_outputs and self.outputs is not None:
            upstream = self.outputs(run.run_id, task.after)
        values = templates.context(
            run_id=run.run_id,
            logical_time=run.logical_time,
            params={**parameters.defaults(declared_parameters), **run.parameters},
            raw=parameters.raw_names(declared_parameters),
            typed=parameters.typed_names(declared_parameters),
            outputs={key: upstream.get(key) for key in task.reads_outputs},
            map_item=self._item(run, opened) if task.map_over is not None else None,
        )
        declared = task_env(run.definition, task)
        env = {name: value for name, value in declared.items() if isinstance(value, str)}
        # A secret travels as its name: the worker looks the value up on its own host.
        secret_env = {
            name: value.name for name, value in declared.items() if isinstance(value, SecretRef)
        }
        env |= {
            "VERITASK_RUN_ID": run.run_id,
            "VERITASK_TASK": task.key,
            "VERITASK_DEFINITION": run.definition.name,
        }
        if run.logical_time is not None:
            env["VERITASK_LOGICAL_TIME"] = run.logical_time.isoformat()
        if opened.map_index >= 0:
            env["VERITASK_MAP_INDEX"] = str(opened.map_index)
        # Values are data: a command reads them from its environment, a statement binds them.
        work: port.TaskSpec
        beat = min(port.AttemptSpec.heartbeat_interval, task.policy.lease / 3)
        if task.wait is not None:
            work = _wait_condition(task.wait, task.with_, values)
            # The checker writes every beat of thousands of waits: one a third of the lease.
            beat = task.policy.lease / 3
        elif task.spark is not None:
            app = task.spark
            work = port.SparkApplication(
                app=app.app,
                jar=app.jar,
                main_class=app.main_class,
                args=app.args,
                conf=dict(app.conf),
            )
        elif task.sql is not None:
            statement, bound = templates.render_sql(task.sql, values)
            work = port.SqlStatement(statement, str(task.connection), bound)
        elif task.run is not None:
            command, value_env = templates.render_shell(task.run, values)
            for name, text in value_env.items():
                if len(text.encode()) > SHELL_VALUE_LIMIT and name.startswith(
                    templates.OUTPUT_ENV_PREFIX
                ):
                    raise ValueError(
                        f"{name} would hold {len(text.encode())} bytes, more than a process's"
                        " environment variable can (128 KiB); read the output from the file"
                        " named by VERITASK_UPSTREAM_OUTPUTS instead"
                    )
            if task.container is not None:
                box = task.container
                work = port.ContainerRun(
                    image=box.image,
                    command=box.argv or ("/bin/sh", "-c", command),
                    cpus=box.cpus,
                    memory=box.memory,
                    workdir=box.workdir,
                    pull=port.Pull(box.pull.value),
                    volumes=tuple(
                        port.Mount(v.host, v.container, v.read_only) for v in box.volumes
                    ),
                    secret_files=dict(box.secret_files),
                )
            else:
                work = port.ShellCommand(command)
            env = {**value_env, **env}
        else:
            rendered = {k: templates.render_json(v, values) for k, v in task.with_.items()}
            work = port.PythonCallable(str(task.call), rendered)
        return port.AttemptSpec(
            instance_id=opened.instance_id,
            attempt_no=opened.attempt_no,
            attempt_token=self.tokens.mint(opened.instance_id, opened.attempt_no, opened.nonce),
            task=work,
            callback=port.OutboxCallback(self.outbox, self.commit_base_url),
            env=env,
            timeout=task.policy.timeout,
            skip_exit_code=task.skip_exit_code,
            heartbeat_interval=beat,
            log_cap_bytes=task.log_limit or log_limits.executor_log_limit(task.executor),
            queue=task.queue,
            secret_env=secret_env,
            upstream_outputs={key: upstream.get(key) for key in task.after}
            if task.reads_outputs
            else {},
        )

    def _item(self, run: RunContext, opened: Opened) -> tuple[int, JSONValue] | None:
        """A mapped instance's index and item, from the output its task was expanded over."""
        if opened.map_index < 0 or self.map_items is None:
            return None
        key = (run.run_id, opened.task_key)
        with self._maps_lock:
            items = self._maps.get(key)
        if items is None:
            items = self.map_items(run.run_id, opened.task_key)
            if items is None:
                raise ValueError(f"task {opened.task_key!r} has not been expanded in this run")
            with self._maps_lock:
                if len(self._maps) >= _MAPS_KEPT:
                    self._maps.pop(next(iter(self._maps)))
                self._maps[key] = items
        if opened.map_index >= len(items):
            raise ValueError(f"map index {opened.map_index} is past the {len(items)} items")
        return opened.map_index, items[opened.map_index]

    def submit(self, run: RunContext, opened: Opened, now: datetime) -> Event | None:
        """Submit one attempt; the executor's answer as an event to record, or None when the
        engine could not be reached: the attempt stays open (SCHEDULED) and is submitted again.
        """
        task = run.tasks[opened.task_key]
        executor = self.executor_for(task)
        if executor is None:
            return _failed(opened, now, f"no executor named {task.executor!r}", retryable=False)
        try:
            submission = executor.submit(spec=self.spec(run, opened))
        except ExecutorError as exc:
            return self.answer(opened, task, exc, now)
        except ValueError as exc:  # a spec the engine cannot take (bad command, bad id)
            return _failed(opened, now, str(exc), retryable=False)
        return self.answer(opened, task, submission, now)

    def submit_many(
        self,
        executor: port.SubmittingMany,
        attempts: Sequence[tuple[RunContext, Opened]],
        clock: Callable[[], datetime],
    ) -> list[Event | None]:
        """:meth:`submit` of each attempt, to one executor that submits them together. The
        answers are dated when the engine gave them, after the whole batch."""
        answers: list[Event | None] = [None] * len(attempts)
        specs: list[port.AttemptSpec] = []
        places: list[int] = []
        for place, (run, opened) in enumerate(attempts):
            try:
                specs.append(self.spec(run, opened))
            except ValueError as exc:
                answers[place] = _failed(opened, clock(), str(exc), retryable=False)
                continue
            places.append(place)
        outcomes = executor.submit_many(specs=specs) if specs else []
        now = clock()
        for place, outcome in zip(places, outcomes, strict=True):
            run, opened = attempts[place]
            answers[place] = self.answer(opened, run.tasks[opened.task_key], outcome, now)
        return answers

    def answer(
        self,
        opened: Opened,
        task: TaskSpec,
        outcome: port.Submission | ExecutorError,
        now: datetime,
    ) -> Event | None:
        """The event that records what the engine answered to a submission; None when the
        engine could not be reached."""
        if isinstance(outcome, ExecutorError):
            if outcome.retryable:
                # The engine is away for now (a broker restarting, a supervisor starting): the
                # task did not fail, so none of its retries is spent on it. The reconciler
                # submits the same attempt again after ``submit_grace``, with an alert for the
                # scheduler/executor owner (docs/scheduling.md, sections 4 and 7).
                log.warning(
                    "submitting %s/%s failed, will submit it again: %s",
                    opened.instance_id,
                    opened.attempt_no,
                    outcome,
                )
                self._remember_deferral(opened, str(outcome))
                return None
            return _failed(opened, now, str(outcome), retryable=False)
        return new_events.submit_acknowledged(
            event_id=new_event_id(),
            instance_id=opened.instance_id,
            attempt_no=opened.attempt_no,
            event_time=now,
            external_id=outcome.external_id,
            executor=task.executor,
            resubmitted=not outcome.created,
        )


def _thread_pool(workers: int) -> Executor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="submit")


class Submissions:
    """Submits opened attempts on other threads, so that the loop never waits for an engine.

    Attempts for an executor that submits many at once (``port.SubmittingMany``) go to a
    thread of that executor's, which hands it everything opened meanwhile in one call; the
    others go to a few threads, one attempt at a time.

    A submission is in flight from :meth:`submit` until its answer is recorded
    (:meth:`settle`); meanwhile the loop holds back that attempt's worker reports, so the
    acknowledgement is recorded before the worker's ``started`` and queue time stays visible
    (docs/state-machine.md), and the reconciler does not submit it a second time. Nothing here
    needs to survive a crash: the attempt was opened (recorded) before it was handed over, and
    recovery submits every opened attempt again, idempotently.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        clock: Callable[[], datetime],
        workers: int,
        wake: Callable[[], None] = lambda: None,
        pool: Callable[[int], Executor] | None = None,
    ) -> None:
        """``pool`` makes what runs the submissions, given the number of threads: a thread
        pool unless said otherwise (the simulator, ``tools/sim.py``, runs them in the loop's
        own thread, so that a seed replays the same)."""
        self.dispatcher = dispatcher
        self._make_pool = pool or _thread_pool
        self._clock = clock
        self._wake = wake
        self._workers = max(1, workers)
        self._pool: Executor | None = None
        # Found once: a protocol's isinstance check costs microseconds, and submit runs for
        # every attempt the loop opens.
        self._batching: dict[str, port.SubmittingMany] = {
            name: executor
            for name, executor in dispatcher.executors.items()
            if isinstance(executor, port.SubmittingMany)
        }
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()
        self._in_flight: set[tuple[str, int]] = set()
        self._answers: list[Event] = []

    def connect(self) -> None:
        """Let each executor that can open its connections now (``port.Connecting``) do it,
        in the background: one for each thread that will submit to it."""
        for name, executor in self.dispatcher.executors.items():
            if isinstance(executor, port.Connecting):
                parallel = 1 if name in self._batching else self._workers
                with self._lock:
                    pool = self._started_pool()
                pool.submit(self._connect_one, name, executor, parallel)

    def _connect_one(self, name: str, executor: port.Connecting, parallel: int) -> None:
        try:
            executor.connect(parallel=parallel)
        except ExecutorError as exc:
            log.warning("could not connect to executor %s ahead of submissions: %s", name, exc)
        except Exception:  # an adapter's bug: submissions connect by themselves
            log.exception("connecting to executor %s ahead of submissions failed", name)

    def submit(self, run: RunContext, opened: Opened) -> bool:
        """Hand the attempt to its executor in the background; False if already in flight."""
        key = (opened.instance_id, opened.attempt_no)
        task = run.tasks[opened.task_key]
        executor = self._batching.get(task.executor)
        with self._lock:
            if key in self._in_flight:
                return False
            self._in_flight.add(key)
            if executor is not None:
                lane = self._lanes.get(task.executor)
                if lane is None:
                    lane = self._lanes[task.executor] = _Lane(
                        task.executor, functools.partial(self._submit_batch, executor)
                    )
                lane.add(run, opened)
                return True
            pool = self._started_pool()
        pool.submit(self._submit_one, run, opened, key)
        return True

    def _started_pool(self) -> Executor:
        """The submission threads (call it holding the lock)."""
        if self._pool is None:  # first use, or used again after close()
            self._pool = self._make_pool(self._workers)
        return self._pool

    def _submit_one(self, run: RunContext, opened: Opened, key: tuple[str, int]) -> None:
        try:
            answer: Event | None = self.dispatcher.submit(run, opened, self._clock())
        except Exception:  # an adapter's bug: the reconciler submits it again after the grace
            log.exception(
                "submitting %s/%s failed",
                *key,
                extra={
                    "definition": run.definition.name,
                    "run_id": run.run_id,
                    "instance_id": opened.instance_id,
                    "attempt_no": opened.attempt_no,
                },
            )
            answer = None
        self._keep_answers([(key, answer)])

    def _submit_batch(
        self, executor: port.SubmittingMany, batch: list[tuple[RunContext, Opened]]
    ) -> None:
        try:
            answers = self.dispatcher.submit_many(executor, batch, self._clock)
        except Exception:  # an adapter's bug: the reconciler submits them again after the grace
            log.exception("submitting %d attempts together failed", len(batch))
            answers = [None] * len(batch)
        keys = [(opened.instance_id, opened.attempt_no) for _, opened in batch]
        self._keep_answers(list(zip(keys, answers, strict=True)))

    def _keep_answers(self, answers: list[tuple[tuple[str, int], Event | None]]) -> None:
        """Answers to record; a submission without one (deferred) is no longer in flight."""
        with self._lock:
            for key, answer in answers:
                if answer is None:
                    self._in_flight.discard(key)
                else:
                    self._answers.append(answer)
        self._wake()

    def in_flight(self, instance_id: str, attempt_no: int) -> bool:
        with self._lock:
            return (instance_id, attempt_no) in self._in_flight

    def pending(self) -> int:
        """Submissions not recorded yet."""
        with self._lock:
            return len(self._in_flight)

    def take(self) -> list[Event]:
        """The engines' answers that came back since the last call, to be recorded."""
        with self._lock:
            answers, self._answers = self._answers, []
        return answers

    def give_back(self, answers: list[Event]) -> None:
        """Recording failed (the database hiccuped): keep the answers for the next try."""
        with self._lock:
            self._answers[:0] = answers

    def settle(self, answers: list[Event]) -> None:
        """The answers are recorded (or failed to be): their attempts are no longer in flight."""
        with self._lock:
            for answer in answers:
                self._in_flight.discard((answer.instance_id, answer.attempt_no))

    def close(self) -> None:
        """Wait for the submissions in flight; their answers stay to be taken.

        The threads end; a later :meth:`submit` starts new ones (a loop started again).
        """
        with self._lock:
            pool, self._pool = self._pool, None
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            lane.close()
        if pool is not None:
            pool.shutdown(wait=True)


class _Lane:
    """A thread that submits the attempts of one executor that submits many at once: each
    call takes everything that waits, up to :data:`BATCH_LIMIT`."""

    def __init__(
        self, name: str, submit_batch: Callable[[list[tuple[RunContext, Opened]]], None]
    ) -> None:
        self._submit_batch = submit_batch
        self._waiting: deque[tuple[RunContext, Opened]] = deque()
        self._condition = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"submit-{name}", daemon=True)
        self._thread.start()

    def add(self, run: RunContext, opened: Opened) -> None:
        with self._condition:
            self._waiting.append((run, opened))
            self._condition.notify()

    def close(self) -> None:
        """Submit what waits, then end the thread."""
        with self._condition:
            self._closing = True
            self._condition.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._waiting and not self._closing:
                    self._condition.wait()
                if not self._waiting:
                    return
                count = min(len(self._waiting), BATCH_LIMIT)
                batch = [self._waiting.popleft() for _ in range(count)]
            self._submit_batch(batch)


def _failed(opened: Opened, now: datetime, error: str, *, retryable: bool) -> Event:
    return new_events.submit_failed(
        event_id=new_event_id(),
        instance_id=opened.instance_id,
        attempt_no=opened.attempt_no,
        event_time=now,
        error=error,
        retryable=retryable,
    )


def _wait_condition(
    wait: WaitSpec, with_: Mapping[str, JSONValue], values: templates.Values
) -> port.WaitCondition:
    """A wait's condition with the run's values in it: a path's names under its directory, a
    URL's encoded segments and query values, a statement with bound values, a callable's
    ``with`` as its keyword arguments."""
    bound: tuple[JSONValue, ...] = ()
    match wait.kind:
        case WaitKind.SQL:
            statement, bound = templates.render_sql(wait.target, values)
        case WaitKind.HTTP:
            statement = templates.render_url(wait.target, values)
        case WaitKind.PATH:
            statement = templates.render_path(wait.target, values)
        case _:
            statement = templates.render(wait.target, values)
    return port.WaitCondition(
        condition=port.Condition(wait.kind.value),
        target=statement,
        every=wait.every,
        timeout=wait.timeout,
        skip_on_timeout=wait.on_timeout is OnTimeout.SKIP,
        connection=wait.connection,
        parameters=bound,
        params={k: templates.render_json(v, values) for k, v in with_.items()}
        if wait.kind is WaitKind.CALL
        else {},
        expected=wait.expected,
    )

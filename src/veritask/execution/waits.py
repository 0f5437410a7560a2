"""``WaitExecutor``: attempts that are a condition checked on an interval (``wait:`` tasks).

No process and no thread is given to a wait: the executor holds every open wait in one heap,
keyed by when it is next due, and one timer thread hands the due checks to a small pool of
checker threads (``checkers``). Ten thousand waits cost a heap entry each and a few checks a
second (docs/scheduling.md, "Waits that hold no slot").

No worker runs a wait, so the executor reports for it with the attempt's token, as the SQL
executor does (``sql/engine_watch.Reporter``): ``started`` at the first check, a ``progress`` report
with what a check saw — only when that changed, or when ``RECORD_EVERY`` passed, saying how
many checks saw the same — a heartbeat when no report was sent for ``heartbeat_interval``, so
that the lease holds, and ``completed`` when the condition holds (its output is what was seen),
or at the wait's timeout (failed, or skipped with ``skip_on_timeout``), or when cancelled.

``started`` and ``completed`` are files in the outbox, which outlive this process. A scheduler
that holds the executor takes ``progress`` and heartbeats in memory instead (``hand_over``):
they are most of a steady wait's reports, a file each cost more than recording it, and one
lost with the process is made again by the wait its successor resumes.

What it holds lives in memory only: after a restart ``describe`` answers RUNNING for a wait it
does not know, so that the reconciler hands its spec to ``resume`` and the checks go on, counting
the timeout from the wait's first start (``WaitCondition.since``).

The external id is ``wait:<instance_id>/<attempt_no>``.
"""

from __future__ import annotations

import heapq
import importlib
import itertools
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from veritask.core import jsontypes
from veritask.execution import engine_watch, errors, port, secrets, wait_http, wire
from veritask.execution.sql import connections

EXTERNAL_ID_PREFIX = "wait:"
#: Checker threads: a check is a stat, a query or a GET, so a few serve thousands of waits.
DEFAULT_CHECKERS = 4
#: The longest one check may take (a GET, a query, a call), and never longer than ``every``.
CHECK_LIMIT = timedelta(seconds=30)
#: A check that saw what the last recorded one saw is recorded after this long anyway. Under
#: a wait's usual heartbeat interval (a third of its one-hour lease): any report holds the
#: lease, so a steady wait sends these and no heartbeat at all.
RECORD_EVERY = timedelta(minutes=15)
#: How many ended waits ``describe`` still answers for when nobody cleaned them up.
ENDED_KEPT = 100_000
#: The longest ``seen`` text kept in a report.
SEEN_LIMIT = 500
#: Path checks due together are handed to a checker thread this many at a time.
_STATS_PER_TASK = 64
#: The reports a ``hand_over`` takes in memory: none of them is the only proof of anything.
_HANDED_KINDS = frozenset({"progress", "heartbeat"})
#: How late a check may be so that the checks due within it are handed over together.
_GATHER_SECONDS = 0.1
log = logging.getLogger(__name__)


class Source(StrEnum):
    """Where the wait executor's observations come from."""

    CHECKER = "wait_checker"
    """The scheduler process's wait checker: the waits it holds and how each ended."""


@dataclass(frozen=True)
class Overdue:
    """A wait still checking past its ``expected`` duration (told once per attempt)."""

    instance_id: str
    attempt_no: int
    run_id: str | None
    definition: str | None
    task: str | None
    expected: timedelta
    since: datetime
    seen: str


@dataclass(frozen=True)
class _Ended:
    state: port.EngineState
    category: port.ErrorCategory
    seen: str
    checks: int
    started_at: datetime
    ended_at: datetime


class _Wait:
    """One held wait: what it checks, and where its checks and reports stand."""

    def __init__(self, spec: port.AttemptSpec, task: port.WaitCondition, now: datetime) -> None:
        self.spec = spec
        self.task = task
        self.key = _key(spec.instance_id, spec.attempt_no)
        self.reporter = engine_watch.Reporter(spec)
        self.resumed = task.since is not None
        self.since = task.since or now
        self.deadline = self.since + task.timeout
        self.deadline_at = time.monotonic() + (self.deadline - now).total_seconds()
        self.limit = min(CHECK_LIMIT, task.every).total_seconds()
        self.checks = 0
        self.seen = "not checked yet"
        self.recorded_seen: str | None = None
        self.recorded_check = 0
        self.recorded_at = float("-inf")
        self.next_check = time.monotonic()
        self.beat_due = self.next_check + spec.heartbeat_interval.total_seconds()
        self.check_started: float | None = None
        self.told_slow = False
        self.told_overdue = False
        self.started_reported = self.resumed
        self.wake_at = self.next_check
        self.done = False
        self.last_seq = engine_watch.STARTED_SEQ


class WaitExecutor:
    """Checks ``WaitCondition`` attempts in this process (see the module docstring).

    ``servers`` maps a ``sql`` condition's connection name to its URL (None: read
    ``VERITASK_SQL_URL_<NAME>`` from the environment at each check); ``http_allow`` names
    the loopback, link-local or metadata hosts an ``http`` condition may reach (none unless
    given: ``wait_http``); ``overdue`` is told
    once about each wait still checking past its ``expected`` duration (the scheduler raises
    a ``dependency`` alert); ``hand_over``, when given, takes the progress reports and
    heartbeats instead of the outbox (the scheduler that holds this executor records them).
    """

    def __init__(
        self,
        *,
        servers: Mapping[str, str] | None = None,
        http_allow: wait_http.HttpAllow | None = None,
        overdue: Callable[[Overdue], None] | None = None,
        hand_over: Callable[[wire.WorkerEvent], None] | None = None,
        checkers: int = DEFAULT_CHECKERS,
        clock: Callable[[], datetime] = wire.utc_now,
    ) -> None:
        self.servers = servers
        self.http_allow = http_allow or wait_http.HttpAllow()
        self.overdue = overdue
        self.hand_over = hand_over
        self._clock = clock
        self._lock = threading.Condition(threading.Lock())
        self._waits: dict[str, _Wait] = {}
        self._ended: dict[str, _Ended] = {}
        #: The token each attempt held here came with: another one is another scheduler's.
        self._tokens: dict[str, str] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._order = itertools.count()
        self._checkers_count = checkers
        self._checkers: ThreadPoolExecutor | None = None
        self._timer: threading.Thread | None = None
        self._closing = False
        self._host = socket.gethostname()

    # --- the port -----------------------------------------------------------------------

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        task = _condition(spec)
        key = _key(spec.instance_id, spec.attempt_no)
        external_id = f"{EXTERNAL_ID_PREFIX}{key}"
        with self._lock:
            token = self._tokens.get(key)
            if token is not None and token != spec.attempt_token:
                raise errors.ExecutorError(
                    f"attempt {key} was submitted before with another attempt token",
                    retryable=False,
                )
            if key in self._waits or key in self._ended:
                return port.Submission(external_id, created=False)
            self._hold(_Wait(spec, task, self._clock()))
        return port.Submission(external_id, created=True)

    def describe(self, *, external_id: str) -> port.Observation:
        key = _parse(external_id)
        with self._lock:
            wait = self._waits.get(key)
            ended = self._ended.get(key)
            details: dict[str, port.DetailValue] = {}
            if wait is not None:
                details.update(checks=wait.checks, seen=wait.seen, held=True)
                started_at = wait.since if wait.checks or wait.resumed else None
                draft = port.ObservationDraft(external_id, details)
                draft.started_at = started_at
                state = port.EngineState.RUNNING if started_at else port.EngineState.PENDING
                return draft.make(state, Source.CHECKER)
        if ended is not None:
            details.update(checks=ended.checks, seen=ended.seen, held=False)
            draft = port.ObservationDraft(external_id, details)
            draft.started_at, draft.ended_at = ended.started_at, ended.ended_at
            return draft.make(ended.state, Source.CHECKER, category=ended.category)
        # Not held here: the process that held it is gone (a restart). A condition is checked
        # again from anywhere, so the wait still "runs": the reconciler resumes it.
        details.update(held=False, reason="not held by this process; resume takes it up")
        draft = port.ObservationDraft(external_id, details)
        return draft.make(port.EngineState.RUNNING, Source.CHECKER)

    def cancel(self, *, external_id: str) -> None:
        key = _parse(external_id)
        now = self._clock()
        with self._lock:
            wait = self._waits.get(key)
            if wait is None:
                if key not in self._ended:
                    # Unknown (held by a process that is gone): nothing checks it any more.
                    self._end_unheld(key, now)
                return
            ended = self._finish(wait, port.EngineState.FAILED, port.ErrorCategory.CANCELLED, now)
        self._report_end(wait, ended, output=None, error=None)

    def cleanup(self, *, external_id: str) -> None:
        key = _parse(external_id)
        with self._lock:
            if key in self._waits:
                raise errors.ExecutorError(
                    f"{external_id} is still checked: cancel it before cleanup", retryable=True
                )
            self._ended.pop(key, None)
            self._tokens.pop(key, None)

    def resume(self, *, spec: port.AttemptSpec) -> bool:
        """Take up the checks of a wait whose holder is gone; True if this process holds it."""
        if not isinstance(spec.task, port.WaitCondition):
            return False
        key = _key(spec.instance_id, spec.attempt_no)
        with self._lock:
            token = self._tokens.get(key)
            if token is not None and token != spec.attempt_token:
                raise errors.ExecutorError(
                    f"attempt {key} is held here under another attempt token", retryable=False
                )
            if key in self._waits:
                return True
            if key in self._ended:
                return False  # ended here: describe tells how
            self._hold(_Wait(spec, spec.task, self._clock()))
        return True

    # --- for tests, benchmarks and shutdown ----------------------------------------------

    def held(self) -> int:
        """How many waits this process checks now."""
        with self._lock:
            return len(self._waits)

    def close(self) -> None:
        """Stop checking and let go of every wait held (they stay open in the ledger).

        Whoever recovers next, this executor included, finds them not held (``describe``) and
        resumes them: a scheduler's loop stopped and started again checks its waits again.
        """
        with self._lock:
            self._closing = True
            self._lock.notify_all()
            timer, checkers = self._timer, self._checkers
        if timer is not None:
            timer.join()
        if checkers is not None:
            checkers.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for key in self._waits:
                self._tokens.pop(key, None)
            self._waits.clear()
            self._heap.clear()
            self._timer = self._checkers = None
            self._closing = False

    # --- the heap ------------------------------------------------------------------------

    def _hold(self, wait: _Wait) -> None:
        """Called with the lock held."""
        self._waits[wait.key] = wait
        self._tokens[wait.key] = wait.spec.attempt_token
        self._push(wait, wait.next_check)
        if self._timer is None:
            self._checkers = ThreadPoolExecutor(
                max_workers=self._checkers_count, thread_name_prefix="wait-check"
            )
            self._timer = threading.Thread(target=self._run, name="wait-timer", daemon=True)
            self._timer.start()

    def _push(self, wait: _Wait, at: float) -> None:
        """Called with the lock held: only the latest entry of a wait counts."""
        wait.wake_at = at
        heapq.heappush(self._heap, (at, next(self._order), wait.key))
        if self._heap[0][2] == wait.key:
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closing:
                    now = time.monotonic()
                    # Waits fall due one by one; gathering those of a moment costs one wake
                    # and one hand-over to a checker for many of them, not one each.
                    wake_at = self._heap[0][0] + _GATHER_SECONDS if self._heap else None
                    if wake_at is not None and wake_at <= now:
                        break
                    self._lock.wait(None if wake_at is None else wake_at - now)
                if self._closing:
                    return
                due: list[_Wait] = []
                while self._heap and self._heap[0][0] <= now:
                    at, _, key = heapq.heappop(self._heap)
                    wait = self._waits.get(key)
                    if wait is not None and wait.wake_at == at:
                        due.append(wait)
            stats: list[_Wait] = []
            for wait in due:
                try:
                    if self._due(wait, now):
                        if wait.task.condition is port.Condition.PATH:
                            stats.append(wait)
                        elif self._checkers is not None:
                            self._checkers.submit(self._check, wait)
                except Exception:  # one wait never stops the others
                    log.exception("the wait %s could not be checked", wait.key)
            # A stat answers at once (a hung mount aside): many to a task cost one hand-over.
            for start in range(0, len(stats), _STATS_PER_TASK):
                if self._checkers is not None:
                    self._checkers.submit(self._check_each, stats[start : start + _STATS_PER_TASK])

    def _check_each(self, batch: list[_Wait]) -> None:
        for wait in batch:
            self._check(wait)

    def _due(self, wait: _Wait, now: float) -> bool:
        """Beat, or give up on a check that overran; then sleep again. True when a check is
        due now: the caller hands it to a checker thread."""
        slow = False
        start = False
        late: _Ended | None = None
        with self._lock:
            if wait.done:
                return False
            beat = now >= wait.beat_due
            if beat:
                wait.beat_due = now + wait.spec.heartbeat_interval.total_seconds()
            if wait.check_started is None and now >= wait.next_check:
                wait.check_started = now
                start = True
            elif wait.check_started is not None and now >= wait.check_started + wait.limit:
                slow = not wait.told_slow
                wait.told_slow = True
                if self._clock() >= wait.deadline:
                    # The check in flight may never answer: the timeout does not wait for it.
                    late = self._timed_out(wait, self._clock())
            if late is None:
                self._push(wait, self._next_wake(wait))
        if late is not None:
            self._report_end(wait, late, output=None, error=self._timeout_error(wait))
            return False
        if beat:
            self._send(wait, "heartbeat", {})
        if slow:
            seconds = f"{wait.limit:g}"
            self._record(wait, f"check {wait.checks + 1} has not answered in {seconds}s")
        return start

    def _next_wake(self, wait: _Wait) -> float:
        if wait.check_started is None:
            return min(wait.next_check, wait.beat_due)
        if not wait.told_slow:
            return min(wait.check_started + wait.limit, wait.beat_due)
        # A check that does not answer: wake at the timeout, which does not wait for it.
        return min(wait.beat_due, max(wait.deadline_at, time.monotonic() + 1.0))

    # --- a check -------------------------------------------------------------------------

    def _check(self, wait: _Wait) -> None:
        if not wait.started_reported:
            wait.started_reported = True
            evidence = wire.WaitStartedEvidence(
                worker=f"wait:{self._host}:{os.getpid()}",
                host=self._host,
                pid=os.getpid(),
                condition=wait.task.condition.value,
                # Cut: a report's evidence is bounded (core/reports.py), a statement is not.
                target=wait.task.target[:4096],
            )
            wait.reporter.send(
                "started", evidence, seq=engine_watch.STARTED_SEQ, event_time=wait.since
            )
        refused: str | None = None
        try:
            held, seen = self._look(wait.task, wait.limit)
        except wait_http.Refused as exc:  # the same URL is refused at every check
            held, seen = False, f"refused: {exc}"
            refused = f"the wait may not check this URL: {exc}"
        except Exception as exc:  # a condition's own failure is what it saw, not ours
            held, seen = False, f"the check failed: {type(exc).__name__}: {exc}"
        seen = seen[:SEEN_LIMIT]
        now = self._clock()
        ended: _Ended | None = None
        with self._lock:
            if wait.done:
                return
            wait.checks += 1
            wait.seen = seen
            wait.check_started = None
            wait.told_slow = False
            if held:
                ended = self._finish(wait, port.EngineState.SUCCEEDED, port.ErrorCategory.NONE, now)
            elif refused is not None:
                ended = self._finish(
                    wait, port.EngineState.FAILED, port.ErrorCategory.TASK_ERROR, now
                )
            elif now >= wait.deadline:
                ended = self._timed_out(wait, now)
            else:
                wait.next_check = time.monotonic() + wait.task.every.total_seconds()
                self._push(wait, self._next_wake(wait))
            overdue = (
                ended is None
                and not wait.told_overdue
                and wait.task.expected is not None
                and now >= wait.since + wait.task.expected
            )
            wait.told_overdue = wait.told_overdue or overdue
        self._record(wait, seen, force=ended is not None)
        if overdue:
            self._tell_overdue(wait, seen)
        if ended is not None:
            output: jsontypes.JSONValue = {"seen": seen, "checks": wait.checks} if held else None
            error = None if held else refused or self._timeout_error(wait)
            self._report_end(wait, ended, output=output, error=error)

    def _look(self, task: port.WaitCondition, limit: float) -> tuple[bool, str]:
        match task.condition:
            case port.Condition.PATH:
                return _look_at_path(task.target)
            case port.Condition.HTTP:
                return wait_http.look(task.target, limit, self.http_allow)
            case port.Condition.SQL:
                return _look_in_database(self._url(str(task.connection)), task, limit)
            case port.Condition.CALL:
                return _look_by_calling(task.target, task.params)

    def _record(self, wait: _Wait, seen: str, *, force: bool = False) -> None:
        """A progress report when what was seen changed, or ``RECORD_EVERY`` after the last."""
        now = time.monotonic()
        with self._lock:
            changed = seen != wait.recorded_seen
            if not (force or changed or now - wait.recorded_at >= RECORD_EVERY.total_seconds()):
                return
            since = wait.checks - wait.recorded_check
            wait.recorded_seen, wait.recorded_check, wait.recorded_at = seen, wait.checks, now
        evidence = wire.WaitProgressEvidence(
            phase="checking",
            done=wait.checks,
            total=None,
            message=seen,
            check=wait.checks,
            seen=seen,
            checks_since=since,
        )
        self._send(wait, "progress", evidence)

    # --- ends ----------------------------------------------------------------------------

    def _finish(
        self, wait: _Wait, state: port.EngineState, category: port.ErrorCategory, now: datetime
    ) -> _Ended:
        """Called with the lock held: the wait is no longer checked."""
        wait.done = True
        self._waits.pop(wait.key, None)
        ended = _Ended(state, category, wait.seen, wait.checks, wait.since, now)
        self._remember(wait.key, ended)
        return ended

    def _timed_out(self, wait: _Wait, now: datetime) -> _Ended:
        # A failure, not the engine's TIMEOUT: the task did its job, and the answer was no.
        category = (
            port.ErrorCategory.SKIPPED
            if wait.task.skip_on_timeout
            else port.ErrorCategory.TASK_ERROR
        )
        return self._finish(wait, port.EngineState.FAILED, category, now)

    def _timeout_error(self, wait: _Wait) -> str:
        return (
            f"the condition did not hold within {wait.task.timeout} "
            f"({wait.checks} checks); the last saw: {wait.seen}"
        )

    def _end_unheld(self, key: str, now: datetime) -> None:
        ended = _Ended(
            port.EngineState.FAILED, port.ErrorCategory.CANCELLED, "cancelled", 0, now, now
        )
        self._remember(key, ended)

    def _remember(self, key: str, ended: _Ended) -> None:
        if len(self._ended) >= ENDED_KEPT:
            oldest = next(iter(self._ended))
            self._ended.pop(oldest)
            self._tokens.pop(oldest, None)
        self._ended[key] = ended

    def _report_end(
        self, wait: _Wait, ended: _Ended, *, output: jsontypes.JSONValue, error: str | None
    ) -> None:
        skipped = ended.category is port.ErrorCategory.SKIPPED
        evidence = wire.CompletedEvidence(
            exit_code=0
            if ended.state is port.EngineState.SUCCEEDED
            else wait.spec.skip_exit_code
            if skipped
            else None,
            signal=None,
            error_category=ended.category.value,
            commit_marker=None,
            log_path="",
            output=output,
            engine={
                "engine_state": ended.state.value,
                "source": Source.CHECKER.value,
                "engine_id": None,
                "details": {"checks": ended.checks, "seen": ended.seen},
            },
        )
        if error is not None and not skipped:
            evidence["error_message"] = error
        self._send(wait, "completed", evidence)
        wait.reporter.close()

    def _tell_overdue(self, wait: _Wait, seen: str) -> None:
        expected = wait.task.expected
        if self.overdue is None or expected is None:
            return
        env = wait.spec.env
        try:
            self.overdue(
                Overdue(
                    instance_id=wait.spec.instance_id,
                    attempt_no=wait.spec.attempt_no,
                    run_id=env.get("VERITASK_RUN_ID"),
                    definition=env.get("VERITASK_DEFINITION"),
                    task=env.get("VERITASK_TASK"),
                    expected=expected,
                    since=wait.since,
                    seen=seen,
                )
            )
        except Exception:  # the alert is the listener's business; the checks go on
            log.exception("telling that the wait %s is overdue failed", wait.key)

    def _send(self, wait: _Wait, kind: wire.WorkerEventKind, evidence: wire.Evidence) -> None:
        now = self._clock()
        with self._lock:
            # Numbered by the wall clock, so that a process that resumes the wait numbers its
            # reports after the ones its predecessor sent.
            seq = max(wait.last_seq + 1, int(now.timestamp() * 1000))
            wait.last_seq = seq
            # Any report holds the lease: the next heartbeat is due a full interval after it.
            wait.beat_due = time.monotonic() + wait.spec.heartbeat_interval.total_seconds()
        if self.hand_over is None or kind not in _HANDED_KINDS:
            wait.reporter.send(kind, evidence, seq=seq, event_time=now)
            return
        try:
            self.hand_over(wait.reporter.event(kind, evidence, seq=seq, event_time=now))
        except Exception:  # as a report that could not be delivered: the next one says more
            log.exception("handing over a report of the wait %s failed", wait.key)

    # --- helpers ------------------------------------------------------------------------

    def _url(self, connection: str) -> str:
        servers = self.servers
        if servers is None:
            servers = connections.from_environment(os.environ)
        url = servers.get(connection)
        if url is None:
            raise errors.ExecutorError(
                f"no SQL connection named {connection!r}: set "
                f"{connections.ENV_PREFIX}{connection.upper().replace('-', '_')}",
                retryable=False,
            )
        name = secrets.reference(url)
        if name is not None:
            url = secrets.lookup(name, providers=secrets.providers_from_environment(os.environ))
        return connections.libpq_url(url)


def _look_at_path(path: str) -> tuple[bool, str]:
    """Whether the path exists; what is seen says no more (no size, no other file: a path's
    placeholders only ever name something under the directory the definition wrote)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False, f"no such file or directory {path}"
    except OSError as exc:
        return False, f"cannot look at {path}: {exc.strerror or exc}"
    what = "directory" if stat.S_ISDIR(found.st_mode) else "file"
    return True, f"{path} exists ({what})"


def _look_in_database(url: str, task: port.WaitCondition, limit: float) -> tuple[bool, str]:
    import psycopg  # only deployments with sql waits pay the import
    from psycopg import pq

    milliseconds = int(limit * 1000)
    with psycopg.connect(
        url,
        autocommit=True,
        application_name="veritask-wait",
        connect_timeout=max(1, int(limit)),
        options=f"-c statement_timeout={milliseconds}",
    ) as conn:
        values = [None if v is None else _text(v).encode() for v in task.parameters]
        result = conn.pgconn.exec_params(task.target.encode(), values)
        if result.status == pq.ExecStatus.TUPLES_OK:
            rows = result.ntuples
            return rows > 0, f"{rows} row{'s' if rows != 1 else ''} from {task.connection}"
        message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY)
        text = message.decode(errors="replace") if message else f"status {result.status}"
        return False, f"the statement failed on {task.connection}: {text}"


def _look_by_calling(target: str, params: Mapping[str, jsontypes.JSONValue]) -> tuple[bool, str]:
    module_name, _, function_name = target.partition(":")
    function: object = importlib.import_module(module_name)
    for part in function_name.split("."):
        function = getattr(function, part)
    if not callable(function):
        return False, f"{target} is not callable"
    value = function(**params)
    return bool(value), f"{target} returned {value!r}"


def _text(value: jsontypes.JSONValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _condition(spec: port.AttemptSpec) -> port.WaitCondition:
    if not isinstance(spec.task, port.WaitCondition):
        raise errors.ExecutorError("the wait executor checks wait tasks only (a task with wait:)")
    return spec.task


def _key(instance_id: str, attempt_no: int) -> str:
    return f"{instance_id}/{attempt_no}"


def _parse(external_id: str) -> str:
    key = external_id.removeprefix(EXTERNAL_ID_PREFIX)
    instance_id, _, number = key.rpartition("/")
    if not external_id.startswith(EXTERNAL_ID_PREFIX) or not instance_id or not number.isdigit():
        raise errors.ExecutorError(f"not a wait external id: {external_id!r}")
    return key

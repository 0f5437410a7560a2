"""What every executor promises the platform (``execution/port.py``), as one set of tests.

:class:`ExecutorContract` holds the tests; it knows nothing of any engine. A subclass gives it
a :class:`Harness` (the ``harness`` fixture): the executor under test, on real services, and
the few engine-specific things a test cannot write once (what a task that runs a long time
looks like on this engine, how to kill it behind Veritask's back, where its evidence shows).
Where an engine cannot do what a test needs, its subclass says so with a reason: a skip, or
an expectation it overrides, never a test that silently does less.

A new engine proves itself by subclassing it (docs/executors.md, "Proving a new executor").
"""

from __future__ import annotations

import enum
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import ClassVar, TypeVar

import pytest

from tests.scheduling.harness import wait_for
from veritask.execution import engines, errors, port

_T = TypeVar("_T")


class Work(enum.Enum):
    """What an attempt's task does, written by each harness in its engine's language."""

    QUICK = "quick"
    """Records that it started, then succeeds within a second."""
    LONG = "long"
    """Records that it started, then runs for a minute unless it is stopped."""


class Harness(ABC):
    """One engine under test: its executor and what only this engine knows how to do."""

    executor: port.Executor
    #: How long this engine may take to start or end an attempt, in seconds.
    patience: float = 15.0

    def new_instance_id(self) -> str:
        return f"contract-{uuid.uuid4().hex[:12]}"

    @abstractmethod
    def spec(self, work: Work, *, instance_id: str | None = None) -> port.AttemptSpec:
        """A spec of ``work`` for a new instance (attempt 1), ready to submit."""

    @abstractmethod
    def starts(self, spec: port.AttemptSpec) -> int:
        """How many times the task of ``spec`` has started, as the task itself recorded it."""

    @abstractmethod
    def external_id(self, instance_id: str, attempt_no: int) -> str:
        """The external id this engine gives an attempt (to describe one never submitted)."""

    @abstractmethod
    def queued_spec(self, work: Work) -> port.AttemptSpec:
        """A spec that, once submitted, waits in the engine's queue until the test ends;
        ``pytest.skip`` with the reason when the engine has no queue."""

    @abstractmethod
    def kill_outside_veritask(self, spec: port.AttemptSpec) -> None:
        """Kill the running attempt's work the way something outside Veritask would (an
        operator's ``kill -9``, a database administrator's terminate), and return."""

    @abstractmethod
    def still_runs(self, spec: port.AttemptSpec) -> bool:
        """Whether any of the attempt's work still runs, seen without the executor (the
        process table, the server's activity): a confirmed stop is checked against it."""

    #: The executor name the engine registers (``execution/engines.py``).
    engine_name: ClassVar[str]
    #: Where each answer comes from: an attempt the engine never had, a queued one, one that
    #: ended by itself, one that a stop ended, one killed outside Veritask.
    unknown_source: ClassVar[port.ObservationSource]
    queued_source: ClassVar[port.ObservationSource]
    ended_source: ClassVar[port.ObservationSource]
    stopped_source: ClassVar[port.ObservationSource]
    killed_source: ClassVar[port.ObservationSource]
    #: Other places a stop's confirmation may come from first (an engine that answers from
    #: a second source while the first catches up).
    also_stopped_by: ClassVar[frozenset[port.ObservationSource]] = frozenset()
    #: The details an attempt killed outside Veritask is described with, beyond its category.
    killed_evidence: ClassVar[Mapping[str, port.DetailValue]] = {}

    # -- waiting ----------------------------------------------------------------------------

    def wait(self, condition: Callable[[], _T | None], what: str) -> _T:
        return wait_for(condition, what=what, timeout=self.patience, interval=0.05)

    def wait_state(self, external_id: str, *states: port.EngineState) -> port.Observation:
        def seen() -> port.Observation | None:
            observation = self.executor.describe(external_id=external_id)
            return observation if observation.engine_state in states else None

        return self.wait(seen, f"{external_id} to be one of {[s.value for s in states]}")

    def wait_ended(self, external_id: str) -> port.Observation:
        def ended() -> port.Observation | None:
            observation = self.executor.describe(external_id=external_id)
            return observation if observation.ended else None

        return self.wait(ended, f"{external_id} to end")

    def wait_started(self, spec: port.AttemptSpec) -> None:
        self.wait(lambda: self.starts(spec) > 0, f"the task of {spec.instance_id} to start")


class ExecutorContract:
    """The tests every executor passes. Subclasses provide the ``harness`` fixture."""

    @pytest.fixture
    def harness(self) -> Harness:
        raise NotImplementedError("a contract subclass provides the harness fixture")

    # -- registration -----------------------------------------------------------------------

    def test_it_is_registered_and_answers_from_its_own_sources(self, harness: Harness) -> None:
        registered = engines.registry().engines[harness.engine_name]
        queued = getattr(harness, "queued_source", None)  # an engine with no queue has none
        named = {
            harness.unknown_source,
            *([] if queued is None else [queued]),
            harness.ended_source,
            harness.stopped_source,
            harness.killed_source,
            *harness.also_stopped_by,
        }
        assert named <= registered.sources

    # -- submit -----------------------------------------------------------------------------

    def test_a_second_submit_of_the_same_attempt_starts_nothing_and_answers_the_same(
        self, harness: Harness
    ) -> None:
        spec = harness.spec(Work.QUICK)

        first = harness.executor.submit(spec=spec)
        again = harness.executor.submit(spec=spec)
        ended = harness.wait_ended(first.external_id)
        after_the_end = harness.executor.submit(spec=spec)

        assert first.created is True
        assert again == after_the_end == port.Submission(first.external_id, created=False)
        assert first.external_id == harness.external_id(spec.instance_id, spec.attempt_no)
        assert ended.engine_state is port.EngineState.SUCCEEDED
        assert harness.starts(spec) == 1

    def test_copies_of_one_attempt_submitted_at_once_start_it_once(self, harness: Harness) -> None:
        spec = harness.spec(Work.QUICK)
        submissions: list[port.Submission] = []
        barrier = threading.Barrier(4)

        def submit() -> None:
            barrier.wait()
            submissions.append(harness.executor.submit(spec=spec))

        threads = [threading.Thread(target=submit) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        harness.wait_ended(submissions[0].external_id)

        assert {s.external_id for s in submissions} == {
            harness.external_id(spec.instance_id, spec.attempt_no)
        }
        created = sorted(s.created for s in submissions)
        assert created == [False, False, False, True], submissions
        assert harness.starts(spec) == 1

    def test_a_resubmission_with_another_token_is_refused_for_good(self, harness: Harness) -> None:
        spec = harness.spec(Work.QUICK)
        harness.wait_ended(harness.executor.submit(spec=spec).external_id)
        impostor = port.AttemptSpec(
            instance_id=spec.instance_id,
            attempt_no=spec.attempt_no,
            attempt_token="another-token",
            task=spec.task,
            callback=spec.callback,
            queue=spec.queue,
        )

        with pytest.raises(errors.ExecutorError) as refused:
            harness.executor.submit(spec=impostor)

        assert refused.value.retryable is False
        assert harness.starts(spec) == 1

    # -- describe ---------------------------------------------------------------------------

    def test_describe_of_a_queued_attempt_is_pending_and_a_cancel_confirms_it_unstarted(
        self, harness: Harness
    ) -> None:
        spec = harness.queued_spec(Work.QUICK)
        external_id = harness.executor.submit(spec=spec).external_id

        queued = harness.executor.describe(external_id=external_id)
        harness.executor.cancel(external_id=external_id)
        cancelled = harness.wait_ended(external_id)

        assert queued.engine_state is port.EngineState.PENDING
        assert queued.source is harness.queued_source
        assert queued.external_id == external_id and not queued.ended
        assert cancelled.engine_state is port.EngineState.FAILED
        assert cancelled.error_category is port.ErrorCategory.CANCELLED
        assert cancelled.exit_code is None
        assert harness.starts(spec) == 0

    def test_describe_of_a_running_attempt_is_running_with_the_engines_identity(
        self, harness: Harness
    ) -> None:
        spec = harness.spec(Work.LONG)
        external_id = harness.executor.submit(spec=spec).external_id
        harness.wait_started(spec)

        running = harness.wait_state(external_id, port.EngineState.RUNNING)

        assert running.external_id == external_id and not running.ended
        assert running.error_category is None and running.exit_code is None
        assert running.details, "a running attempt is described with its evidence"
        harness.executor.cancel(external_id=external_id)
        harness.wait_ended(external_id)

    def test_describe_of_an_ended_attempt_is_its_outcome_and_cleanup_forgets_it(
        self, harness: Harness
    ) -> None:
        spec = harness.spec(Work.QUICK)
        external_id = harness.executor.submit(spec=spec).external_id

        ended = harness.wait_ended(external_id)
        again = harness.executor.describe(external_id=external_id)
        harness.executor.cleanup(external_id=external_id)
        harness.executor.cleanup(external_id=external_id)  # idempotent
        gone = harness.executor.describe(external_id=external_id)

        assert ended.engine_state is port.EngineState.SUCCEEDED
        assert ended.error_category is port.ErrorCategory.NONE
        assert ended.ended and ended.details
        assert ended.source is harness.ended_source
        assert again.engine_state is port.EngineState.SUCCEEDED  # an ending is not forgotten
        assert gone.engine_state is port.EngineState.NOT_FOUND

    def test_describe_of_an_unknown_attempt_is_not_found(self, harness: Harness) -> None:
        external_id = harness.external_id(harness.new_instance_id(), 1)

        observation = harness.executor.describe(external_id=external_id)

        assert observation.engine_state is port.EngineState.NOT_FOUND
        assert observation.external_id == external_id
        assert observation.source is harness.unknown_source
        assert not observation.ended

    # -- stop -------------------------------------------------------------------------------

    def test_a_stop_is_confirmed_by_the_engine(self, harness: Harness) -> None:
        spec = harness.spec(Work.LONG)
        external_id = harness.executor.submit(spec=spec).external_id
        harness.wait_started(spec)
        harness.wait_state(external_id, port.EngineState.RUNNING)

        harness.executor.cancel(external_id=external_id)
        stopped = harness.wait_ended(external_id)
        harness.executor.cancel(external_id=external_id)  # a repeated request is harmless

        assert stopped.engine_state is port.EngineState.FAILED
        assert stopped.error_category is port.ErrorCategory.CANCELLED
        assert stopped.source in {harness.stopped_source, *harness.also_stopped_by}
        assert not harness.still_runs(spec), "the engine confirmed a stop while the work runs"
        assert harness.executor.describe(external_id=external_id).ended
        # A copy delivered after the stop does not start the task again.
        assert harness.executor.submit(spec=spec).created is False
        assert harness.starts(spec) == 1

    # -- killed outside Veritask ------------------------------------------------------------

    def test_an_attempt_killed_outside_veritask_is_reported_with_evidence(
        self, harness: Harness
    ) -> None:
        spec = harness.spec(Work.LONG)
        external_id = harness.executor.submit(spec=spec).external_id
        harness.wait_started(spec)
        harness.wait_state(external_id, port.EngineState.RUNNING)

        harness.kill_outside_veritask(spec)
        killed = harness.wait_ended(external_id)

        assert killed.engine_state is port.EngineState.FAILED
        assert killed.error_category is port.ErrorCategory.KILLED
        assert killed.exit_code is None
        assert not harness.still_runs(spec)
        assert killed.source is harness.killed_source
        assert {key: killed.details.get(key) for key in harness.killed_evidence} == dict(
            harness.killed_evidence
        )

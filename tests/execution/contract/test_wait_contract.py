"""The executor contract, run against the wait executor (conditions checked in this process).

A wait's "task" is its checks: each attempt's condition is a callable that appends a line to a
log of its own each time it is checked, and holds at once (``Work.QUICK``) or never
(``Work.LONG``). A start is the ``started`` report the executor wrote to the outbox (the
scheduler's record of a start), counted without asking the executor; the work "still runs"
while the log grows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution.contract.suite import ExecutorContract, Harness, Work
from veritask.execution import port, waits, wire

EVERY = timedelta(milliseconds=50)


def check(log: str, holds: bool) -> bool:
    """The condition of the contract's attempts: one line per check."""
    with open(log, "a") as lines:
        lines.write("checked\n")
    return holds


class WaitHarness(Harness):
    engine_name = "wait"
    unknown_source = waits.Source.CHECKER
    queued_source = waits.Source.CHECKER
    ended_source = waits.Source.CHECKER
    stopped_source = waits.Source.CHECKER
    killed_source = waits.Source.CHECKER

    def __init__(self, home: Path) -> None:
        self.home = home
        self.outbox = home / "outbox"
        self.waits = waits.WaitExecutor(servers={})
        self.executor = self.waits

    def spec(self, work: Work, *, instance_id: str | None = None) -> port.AttemptSpec:
        instance_id = instance_id or self.new_instance_id()
        condition = port.WaitCondition(
            port.Condition.CALL,
            f"{__name__}:check",
            EVERY,
            timedelta(minutes=1),
            params={"log": str(self._log(instance_id)), "holds": work is Work.QUICK},
        )
        return port.AttemptSpec(
            instance_id=instance_id,
            attempt_no=1,
            attempt_token=f"token-{instance_id}",
            task=condition,
            callback=port.OutboxCallback(self.outbox),
        )

    def starts(self, spec: port.AttemptSpec) -> int:
        found = 0
        for path in self.outbox.glob(f"{spec.instance_id}.{spec.attempt_no}.*.json"):
            found += wire.decode(path.read_bytes())["kind"] == "started"
        return found

    def external_id(self, instance_id: str, attempt_no: int) -> str:
        return f"{waits.EXTERNAL_ID_PREFIX}{instance_id}/{attempt_no}"

    def still_runs(self, spec: port.AttemptSpec) -> bool:
        log = self._log(spec.instance_id)
        before = _lines(log)
        time.sleep(EVERY.total_seconds() * 6)
        return _lines(log) != before

    def queued_spec(self, work: Work) -> port.AttemptSpec:
        pytest.skip(
            "the wait executor has no queue: a submitted wait is checked at once, in this "
            "process, with no slot to wait for"
        )

    def kill_outside_veritask(self, spec: port.AttemptSpec) -> None:
        pytest.skip(
            "a wait has no process or server-side work to kill: its checks run in the "
            "scheduler's own threads, and a scheduler killed is a restart (resume)"
        )

    def _log(self, instance_id: str) -> Path:
        return self.home / f"{instance_id}.checks"


def _lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


class TestWaitExecutorContract(ExecutorContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[Harness]:
        made = WaitHarness(tmp_path)
        yield made
        made.waits.close()

    def test_describe_of_an_ended_attempt_is_its_outcome_and_cleanup_forgets_it(
        self, harness: Harness
    ) -> None:
        """Overridden: once forgotten, a wait is described as RUNNING, as any wait this process
        does not hold, so that a restarted scheduler's reconciler resumes it (docs/scheduling.md,
        "Waits that hold no slot"); the reconciler never asks about an ended attempt."""
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
        assert again.engine_state is port.EngineState.SUCCEEDED
        assert gone.engine_state is port.EngineState.RUNNING and gone.details["held"] is False

    def test_describe_of_an_unknown_attempt_is_not_found(self, harness: Harness) -> None:
        """Overridden: an unknown wait is RUNNING, not NOT_FOUND (see above): the reconciler
        then hands its spec to ``resume`` instead of declaring it lost."""
        external_id = harness.external_id(harness.new_instance_id(), 1)

        observation = harness.executor.describe(external_id=external_id)

        assert observation.engine_state is port.EngineState.RUNNING
        assert observation.details["held"] is False
        assert observation.external_id == external_id
        assert observation.source is harness.unknown_source
        assert not observation.ended

"""A real scheduler with the real local executor on a test database, driven tick by tick."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.execution.local import LocalExecutor
from veritask.ledger import dialects, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens


@dataclass
class RunView:
    execution_state: RunExecutionState
    execution_reason: str
    publication_state: PublicationState
    publication_reason: str
    instances: dict[str, InstanceState]


class Platform:
    """A ledger, a local executor and a scheduler sharing one home folder."""

    def __init__(self, engine: Engine, home: Path) -> None:
        self.ledger = Ledger(engine)
        self.executor = LocalExecutor(home=home, slots=4)
        self.scheduler = Scheduler(
            self.ledger,
            executors={"local": self.executor},
            tokens=AttemptTokens(b"pipeline-tests-secret-0123456789"),
            outbox=home / "outbox",
            settings=Settings(
                monitor_every=timedelta(milliseconds=200),
                reconcile_every=timedelta(milliseconds=500),
            ),
        )

    def run(self, run_id: str) -> RunView:
        with dialects.read_transaction(self.ledger.engine) as connection:
            r = schema.runs.c
            row = connection.execute(
                sa.select(
                    r.execution_state,
                    r.execution_reason,
                    r.publication_state,
                    r.publication_reason,
                ).where(r.id == run_id)
            ).one()
            t = schema.task_instances.c
            instances = connection.execute(
                sa.select(t.task_key, t.state).where(t.run_id == run_id)
            ).all()
        return RunView(
            RunExecutionState(row.execution_state),
            row.execution_reason or "",
            PublicationState(row.publication_state),
            row.publication_reason or "",
            {key: InstanceState(state) for key, state in instances},
        )

    def until(self, condition: Callable[[], bool], *, seconds: float = 30.0) -> None:
        """Tick the scheduler until ``condition`` holds; fail after ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.scheduler.tick()
            if condition():
                return
            time.sleep(0.01)
        raise AssertionError("the condition did not hold in time")

    def settle(self, run_id: str, *, seconds: float = 30.0) -> RunView:
        """Tick until the run's execution and publication are both finished."""
        finished = {
            RunExecutionState.SUCCESS,
            RunExecutionState.FAILED,
            RunExecutionState.CANCELLED,
        }
        unfinished_publication = {
            PublicationState.PENDING,
            PublicationState.CHECKING,
            PublicationState.PUBLISHING,
        }

        def done() -> bool:
            view = self.run(run_id)
            if view.execution_state not in finished:
                return False
            if view.execution_state is not RunExecutionState.SUCCESS:
                return True
            return view.publication_state not in unfinished_publication

        self.until(done, seconds=seconds)
        return self.run(run_id)

    def close(self) -> None:
        self.executor.shutdown_supervisor()


def platform_fixture(engine: Engine, tmp_path: Path) -> Iterator[Platform]:
    platform = Platform(engine, tmp_path / "home")
    try:
        yield platform
    finally:
        platform.close()

"""Many writers doing the same thing at once, in threads or in separate processes."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from multiprocessing.synchronize import Barrier
from typing import Final

from sqlalchemy.engine import Engine

from veritask.core import states
from veritask.ledger import dialects, runs

#: Long enough for a spawned process to import the package on a slow machine.
START_TIMEOUT_SECONDS: Final = 60.0


def trigger_run(engine: Engine, *, definition: tuple[str, int], key: str) -> tuple[str, bool]:
    """What a trigger does: create the run for ``key`` in its own transaction."""
    with engine.begin() as connection:
        return runs.create_run(
            connection,
            idempotency_key=key,
            definition_id=definition[0],
            definition_version=definition[1],
            trigger_kind=states.TriggerKind.API,
            execution_state=states.RunExecutionState.QUEUED,
            publication_state=states.PublicationState.NOT_REQUIRED,
            created_at=datetime.now(UTC),
        )


def in_threads(count: int, action: Callable[[], tuple[str, bool]]) -> list[tuple[str, bool]]:
    """Run ``action`` in ``count`` threads released together; return their results."""
    barrier = threading.Barrier(count)

    def released() -> tuple[str, bool]:
        barrier.wait(timeout=START_TIMEOUT_SECONDS)
        return action()

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(released) for _ in range(count)]
        return [future.result() for future in futures]


def _trigger_in_process(
    url: str,
    definition: tuple[str, int],
    key: str,
    barrier: Barrier,
    results: multiprocessing.Queue[tuple[str, bool]],
) -> None:
    engine = dialects.create_engine(url)
    try:
        with engine.connect():
            pass  # connect before the barrier, so that the race is the trigger itself
        barrier.wait(timeout=START_TIMEOUT_SECONDS)
        results.put(trigger_run(engine, definition=definition, key=key))
    finally:
        engine.dispose()


def trigger_in_processes(
    count: int, *, url: str, definition: tuple[str, int], key: str
) -> list[tuple[str, bool]]:
    """Trigger the same key from ``count`` fresh processes released together."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(count)
    results: multiprocessing.Queue[tuple[str, bool]] = context.Queue()
    processes = [
        context.Process(target=_trigger_in_process, args=(url, definition, key, barrier, results))
        for _ in range(count)
    ]
    for process in processes:
        process.start()
    try:
        collected = [results.get(timeout=START_TIMEOUT_SECONDS) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=START_TIMEOUT_SECONDS)
        results.close()
        results.join_thread()
    assert all(process.exitcode == 0 for process in processes)
    return collected

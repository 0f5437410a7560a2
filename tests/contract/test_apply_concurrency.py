"""Many writers, one truth: 8 threads and 4 processes fire overlapping, duplicated and
reordered events at shared instances, on SQLite and PostgreSQL.

Afterwards every snapshot must equal the pure fold of its recorded events, every event must
be recorded exactly once, and the version must count exactly the recorded events: a lost
compare-and-set that went unnoticed would break the last equality. Every instance's hash
chain must be one line: two appends chained to the same predecessor would break it.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
from collections import Counter

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.contract.test_apply_ledger import (
    FAILURE,
    POLICY,
    SUCCESS,
    acked,
    make_instance,
    opened,
    report,
)
from veritask.core.events import Event, EventKind
from veritask.core.fold import fold
from veritask.core.judge import Outcome
from veritask.core.states import InstanceState
from veritask.ledger import dialects, schema, seals
from veritask.ledger.ledger import Ledger

INSTANCES = 4
THREADS = 8
PROCESSES = 4


def facts_for(instance_id: str, *, succeed: bool) -> list[Event]:
    """The facts a worker and an executor send about one attempt."""
    events = [acked(instance_id), report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"})]
    for seq in range(2, 12):
        events.append(report(instance_id, EventKind.HEARTBEAT, seq))
    events.append(report(instance_id, EventKind.PROGRESS, 12, {"phase": "load", "done": 9}))
    events.append(report(instance_id, EventKind.COMPLETED, 13, SUCCESS if succeed else FAILURE))
    return events


def fire(url: str, events: list[Event], seed: int) -> list[str]:
    """One writer: its own engine, its own order, every event at least once."""
    rng = random.Random(seed)
    order = events + rng.sample(events, k=len(events) // 2)
    rng.shuffle(order)
    engine = dialects.create_engine(url)
    try:
        ledger = Ledger(engine)
        return [ledger.apply(event).outcome.value for event in order]
    finally:
        engine.dispose()


@pytest.mark.timeout(300)
def test_concurrent_writers_converge_to_the_fold(engine: Engine, database_url: str) -> None:
    ledger = Ledger(engine)
    instance_ids = [make_instance(ledger, f"task{n}") for n in range(INSTANCES)]
    for instance_id in instance_ids:
        ledger.apply(opened(instance_id))
    facts = [
        event
        for n, instance_id in enumerate(instance_ids)
        for event in facts_for(instance_id, succeed=n % 2 == 0)
    ]
    outcomes: list[str] = []
    lock = threading.Lock()

    def thread_main(seed: int) -> None:
        result = fire(database_url, facts, seed)
        with lock:
            outcomes.extend(result)

    threads = [threading.Thread(target=thread_main, args=(seed,)) for seed in range(THREADS)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        pending = pool.starmap_async(
            fire, [(database_url, facts, 100 + n) for n in range(PROCESSES)]
        )
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in pending.get(timeout=240):
            outcomes.extend(result)

    counts = Counter(outcomes)
    assert counts[Outcome.REJECTED.value] == 0, counts
    assert counts[Outcome.APPLIED.value] == len(facts), counts
    with engine.connect() as connection:
        rows = connection.execute(
            sa.select(schema.events.c.event_id, schema.events.c.instance_id)
        ).all()
    per_id = Counter(row.event_id for row in rows)
    assert all(n == 1 for n in per_id.values())
    assert {e.event_id for e in facts} <= set(per_id)
    for n, instance_id in enumerate(instance_ids):
        stored = ledger.snapshot(instance_id)
        assert stored is not None
        snapshot, version = stored
        recorded = ledger.recorded_events(instance_id)
        assert snapshot == fold(instance_id, recorded, POLICY)
        assert version == len(recorded), "a compare-and-set race went unnoticed"
        expected = InstanceState.SUCCESS if n % 2 == 0 else InstanceState.UP_FOR_RETRY
        assert snapshot.state is expected
    # Every append chained to the one committed before it: no two to one predecessor.
    with dialects.read_transaction(engine) as connection:
        chains = seals.audit(connection, trusted=())
    assert chains.breaks == []
    assert chains.events == len(rows)

"""``Ledger.apply`` holds the transition table as law, on SQLite and PostgreSQL.

An event whose fold would move the instance (or its attempt) along an edge the table lacks is
not folded: it is kept among the rejected events with the move and the rules of its kind in
its reason, and the snapshot stays as it was.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.contract.test_apply_ledger import T0, acked, make_instance, new_id, opened
from veritask.core import decide, new_events
from veritask.core.judge import Outcome
from veritask.core.states import EngineState, InstanceState
from veritask.ledger import schema
from veritask.ledger.ledger import Ledger


@pytest.fixture
def ledger(engine: Engine) -> Ledger:
    return Ledger(engine)


def test_a_stop_confirmed_that_nobody_asked_for_is_refused_and_kept(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    queued = ledger.apply(acked(instance_id))
    assert queued.state is InstanceState.QUEUED
    confirmed = new_events.cancel_confirmed(
        event_id=new_id(),
        instance_id=instance_id,
        attempt_no=1,
        event_time=T0,
        observation=decide.Observation(EngineState.NOT_FOUND, "process_table", T0),
    )
    applied = ledger.apply(confirmed)
    assert applied.outcome is Outcome.REJECTED
    reason = (
        "refused by the transition table: no rule moves the instance from QUEUED to CANCELLED "
        "on cancel_confirmed (the rules of that kind: engine_confirms_the_stop)"
    )
    assert applied.reason == reason
    assert applied.version == queued.version
    loaded = ledger.snapshot(instance_id)
    assert loaded is not None
    assert loaded[0].state is InstanceState.QUEUED
    assert loaded[1] == queued.version
    with ledger.engine.connect() as connection:
        kept = connection.execute(
            sa.select(schema.rejected_events.c.kind, schema.rejected_events.c.reason).where(
                schema.rejected_events.c.event_id == confirmed.event_id
            )
        ).one()
        folded = connection.execute(
            sa.select(sa.func.count()).where(schema.events.c.event_id == confirmed.event_id)
        ).scalar_one()
    assert tuple(kept) == ("cancel_confirmed", reason)
    assert folded == 0


def test_the_same_refusal_in_a_batch(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    confirmed = new_events.cancel_confirmed(
        event_id=new_id(),
        instance_id=instance_id,
        attempt_no=1,
        event_time=T0,
        observation=decide.Observation(EngineState.NOT_FOUND, "process_table", T0),
    )
    results = ledger.apply_batch([opened(instance_id), acked(instance_id), confirmed])
    assert [r.outcome for r in results] == [Outcome.APPLIED, Outcome.APPLIED, Outcome.REJECTED]
    assert results[2].state is InstanceState.QUEUED
    loaded = ledger.snapshot(instance_id)
    assert loaded is not None and loaded[0].state is InstanceState.QUEUED

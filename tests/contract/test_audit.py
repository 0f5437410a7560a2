"""verify, repair, export and replay on SQLite and PostgreSQL: the events are the truth."""

from __future__ import annotations

import json

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.contract.test_apply_ledger import SUCCESS, acked, opened, report
from veritask.core import codec
from veritask.core.events import EventKind
from veritask.core.facts import Mark
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import TaskPolicy
from veritask.core.states import PublicationState, TriggerKind
from veritask.ledger import audit, dialects, migrate, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers

#: Runs may overlap: the export test triggers a second run while the story's is retrying.
DEFINITION = """
name: audited
concurrency: allow
tasks:
  extract: {run: "true"}
  load: {run: "true", after: [extract], retry: {max_retries: 2, delay: 1s}}
"""


def _story(ledger: Ledger) -> str:
    """A run whose extract succeeded and whose load failed once, then is retrying."""
    triggers.apply_definition(ledger, DEFINITION)
    run_id = triggers.trigger(
        ledger, name="audited", kind=TriggerKind.MANUAL, actor="operator:ann"
    ).run_id
    t = schema.task_instances.c
    with dialects.read_transaction(ledger.engine) as connection:
        ids = dict(connection.execute(sa.select(t.task_key, t.id).where(t.run_id == run_id)).all())
    for instance_id in ids.values():
        ledger.apply(opened(instance_id))
        ledger.apply(acked(instance_id))
        ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"}))
    ledger.apply(report(ids["extract"], EventKind.COMPLETED, 2, SUCCESS))
    failure: JSONObject = {"exit_code": 1, "error_category": "task_error"}
    ledger.apply(report(ids["load"], EventKind.COMPLETED, 2, failure))
    return run_id


def _snapshots(engine: Engine) -> dict[str, tuple[object, ...]]:
    t = schema.task_instances.c
    with dialects.read_transaction(engine) as connection:
        rows = connection.execute(sa.select(t.id, t.state, t.epoch, t.retry_at, t.fold)).all()
        runs = connection.execute(sa.select(schema.runs.c.id, schema.runs.c.execution_state)).all()
    found: dict[str, tuple[object, ...]] = {
        row.id: (row.state, row.epoch, row.retry_at, json.dumps(row.fold, sort_keys=True))
        for row in rows
    }
    found.update({run.id: (run.execution_state,) for run in runs})
    return found


def test_verify_holds_for_a_ledger_written_by_apply(engine: Engine) -> None:
    ledger = Ledger(engine)
    _story(ledger)
    report = audit.verify(ledger)
    assert report.ok, report
    assert report.instances == 2


def test_verify_detects_a_snapshot_changed_behind_its_back_and_repair_fixes_it(
    engine: Engine,
) -> None:
    ledger = Ledger(engine)
    _story(ledger)
    with engine.begin() as connection:
        connection.execute(
            schema.task_instances.update()
            .where(schema.task_instances.c.state == "UP_FOR_RETRY")
            .values(state="SUCCESS")
        )
    found = audit.verify(ledger)
    assert not found.ok
    assert any("state is SUCCESS, its events say UP_FOR_RETRY" in m for m in found.mismatches)
    repaired = audit.verify(ledger, repair=True)
    assert repaired.repaired == 1
    assert audit.verify(ledger).ok


def test_export_then_replay_gives_identical_snapshots(
    engine: Engine, empty_database_url: str
) -> None:
    ledger = Ledger(engine)
    run_id = _story(ledger)
    lines = [json.loads(json.dumps(line)) for line in audit.export_run(ledger, run_id)]
    migrate.upgrade(empty_database_url)
    target = dialects.create_engine(empty_database_url)
    try:
        replayed = audit.replay(Ledger(target), lines)
        assert len(replayed) == 2
        assert _snapshots(target) == _snapshots(engine)
        assert audit.verify(Ledger(target)).ok
    finally:
        target.dispose()


def test_verify_detects_run_states_changed_behind_their_back_and_repair_restores_them(
    engine: Engine,
) -> None:
    ledger = Ledger(engine)
    run_id = _story(ledger)
    r = schema.runs.c
    with dialects.read_transaction(engine) as connection:
        before = connection.execute(
            sa.select(r.execution_state, r.execution_reason, r.publication_state)
        ).one()
    with engine.begin() as connection:
        connection.execute(
            schema.runs.update().values(execution_state="FAILED", publication_state="PUBLISHED")
        )
    found = audit.verify(ledger)
    assert found.mismatches == [
        f"run {run_id}: execution_state is FAILED, its events say {before.execution_state}",
        f"run {run_id}: publication_state is PUBLISHED, but no event ever moved it from "
        "where a run starts (NOT_REQUIRED or PENDING)",
    ]
    starts = {"audited": PublicationState.NOT_REQUIRED}
    with dialects.read_transaction(engine) as connection:
        names = dict(
            connection.execute(sa.select(schema.definitions.c.id, schema.definitions.c.name)).all()
        )
    repaired = audit.verify(
        ledger, repair=True, publication_start=lambda definition, _: starts[names[definition]]
    )
    assert (found.runs, repaired.repaired) == (1, 1)
    assert audit.verify(ledger).ok
    with dialects.read_transaction(engine) as connection:
        after = connection.execute(
            sa.select(r.execution_state, r.execution_reason, r.publication_state)
        ).one()
    assert tuple(after) == tuple(before)


def _in_the_first_format(fold: JSONObject) -> JSONObject:
    """The snapshot as ledgers before 0011 wrote it: every mark in full where it is used,
    times in ISO 8601, every key present."""
    facts = codec.facts_from_json(fold)

    def mark(m: Mark | None) -> JSONValue:
        if m is None:
            return None
        observed = m.observed_at.isoformat() if m.observed_at else None
        t = m.event_time.isoformat()
        return {
            "id": m.event_id,
            "k": m.kind.value,
            "a": m.actor,
            "t": t,
            "o": observed,
            "e": m.evidence,
        }

    attempts: list[JSONValue] = []
    for a in facts.attempts:
        out: JSONObject = {"n": a.attempt_no, "seq": a.max_report_seq, "pseq": a.progress_seq}
        for name in ("opened", "acknowledged", "started", "first_report", "last_report"):
            if getattr(a, name) is not None:
                out[name] = mark(getattr(a, name))
        out["done"] = []
        attempts.append(out)
    return {
        "v": 1,
        "id": facts.instance_id,
        "created": mark(facts.created),
        "attempts": attempts,
        "decisions": [[epoch, mark(m)] for epoch, m in facts.decisions],
    }


def test_snapshots_in_the_first_format_are_verified_and_folded_on(engine: Engine) -> None:
    """A ledger upgraded past 0011 keeps its old snapshots as they are (no row is moved):
    verify reads them as the same facts, and the next event writes the new format."""
    ledger = Ledger(engine)
    triggers.apply_definition(ledger, DEFINITION)
    run_id = triggers.trigger(
        ledger, name="audited", kind=TriggerKind.MANUAL, actor="operator:ann"
    ).run_id
    t = schema.task_instances.c
    with dialects.read_transaction(engine) as connection:
        ids = list(connection.execute(sa.select(t.id).where(t.run_id == run_id)).scalars())
    for instance_id in ids:
        ledger.apply(opened(instance_id))
        ledger.apply(acked(instance_id))
        ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"}))
    with engine.begin() as connection:
        for row in connection.execute(sa.select(t.id, t.fold, t.policy)).all():
            policy = TaskPolicy.from_json(row.policy).full_json()
            first = _in_the_first_format(row.fold)
            assert codec.facts_from_json(first) == codec.facts_from_json(row.fold)
            connection.execute(
                schema.task_instances.update()
                .where(t.id == row.id)
                .values(fold=first, policy=policy)
            )
    assert audit.verify(ledger).ok

    later = Ledger(engine)  # judges from the rows, not from what this process wrote
    for instance_id in ids:
        later.apply(report(instance_id, EventKind.COMPLETED, 2, SUCCESS))
    found = audit.verify(later)
    assert found.ok, found
    with dialects.read_transaction(engine) as connection:
        rows = connection.execute(sa.select(t.state, t.fold)).all()
    assert {(row.state, row.fold["v"]) for row in rows} == {("SUCCESS", codec.FORMAT_VERSION)}

"""0016 hashes the events recorded before it, once, in order per subject: the migrated ledger
verifies, and the platform's next appends chain on from the heads it wrote."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from tests.contract.test_apply_ledger import report
from tests.contract.test_audit import _story
from veritask.core.events import EventKind
from veritask.ledger import audit, dialects, migrate, run_store, schema
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import SubjectType

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_a_ledger_from_before_the_chain_is_hashed_and_verifies(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url)
    engine = dialects.create_engine(empty_database_url)
    try:
        ledger = Ledger(engine)
        run_id = _story(ledger)
        with engine.begin() as connection:
            # Evidence whose JSON a database may give back in another shape.
            run_store.record_subject_event(
                connection,
                subject_type=SubjectType.RUN,
                subject_id=run_id,
                run_id=run_id,
                kind="run_noted",
                actor="operator:ann",
                event_id="noted-1",
                now=NOW,
                evidence={"big": 1e16, "name": "é✓", "nested": [1.5, {"b": None}]},
                reason="a note",
            )
        engine.dispose()
        # The ledger as it was before 0016: no hashes, no heads.
        migrate.downgrade(empty_database_url, "0015")
        with engine.connect() as connection:
            columns = {c["name"] for c in sa.inspect(connection).get_columns("events")}
        assert "chain_hash" not in columns

        migrate.upgrade(empty_database_url)

        engine.dispose()
        found = audit.verify(Ledger(engine))
        assert found.ok, (found.chains.breaks, found.mismatches)
        with dialects.read_transaction(engine) as connection:
            count = connection.execute(
                sa.select(sa.func.count()).where(schema.events.c.chain_hash.is_(None))
            ).scalar_one()
            load = connection.execute(
                sa.select(schema.task_instances.c.id).where(
                    schema.task_instances.c.run_id == run_id,
                    schema.task_instances.c.task_key == "load",
                )
            ).scalar_one()
        assert count == 0
        assert found.chains.events > 10

        Ledger(engine).apply(report(load, EventKind.HEARTBEAT, 9))
        again = audit.verify(Ledger(engine))
        assert again.ok, again.chains.breaks
    finally:
        engine.dispose()

"""Definitions that publish and one started by their publications, and runs made PUBLISHED
by moving their states in the ledger, as the publication phase does at its end."""

from __future__ import annotations

from datetime import datetime

from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.ledger import run_store
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers
from veritask.scheduling.dispatch import new_event_id


def upstream(name: str) -> str:
    return f"name: {name}\npublish:\n  commit: {{run: 'true'}}\ntasks:\n  t: {{run: 'true'}}\n"


def downstream(*upstreams: str, when: str = "all", concurrency: str = "allow") -> str:
    return (
        f"name: report\nconcurrency: {concurrency}\n"
        f"trigger: {{on_published: [{', '.join(upstreams)}], when: {when}}}\n"
        "tasks:\n  t: {run: 'true'}\n"
    )


def published_run(ledger: Ledger, name: str, logical_time: datetime) -> str:
    """A run of ``name`` for ``logical_time``, moved to SUCCESS and PUBLISHED."""
    run_id = triggers.trigger(
        ledger, name=name, kind=TriggerKind.API, actor="test", logical_time=logical_time
    ).run_id
    with ledger.engine.begin() as connection:
        version, _ = run_store.run_version(connection, run_id)
        version = run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=RunExecutionState.SUCCESS,
            reason="test",
            previous=RunExecutionState.RUNNING,
            actor="test",
            event_id=new_event_id(),
            now=ledger.clock(),
            evidence={"by": "the test"},
        )
        run_store.set_publication_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=PublicationState.PUBLISHED,
            reason="test",
            previous=PublicationState.PENDING,
            actor="test",
            event_id=new_event_id(),
            now=ledger.clock(),
            evidence={"by": "the test"},
        )
    return run_id

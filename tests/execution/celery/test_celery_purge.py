"""Purging a deleted definition removes what Celery keeps of its attempts in Redis.

A scheduler in this process runs a task on a real Celery worker (RabbitMQ, Redis) over a
real ledger, on SQLite and PostgreSQL; the delete lifecycle then asks the Celery executor
to forget the attempt: its result, claim, lease, submission and shipped log are gone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.execution.celery.conftest import Hosts
from tests.scheduling.harness import FAST, SECRET, Ledgers, wait_for
from veritask.core.states import DefinitionLifecycle, RunExecutionState, TriggerKind
from veritask.ledger import dialects, queries
from veritask.scheduling import triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.tokens import AttemptTokens
from veritask.services import definitions
from veritask.services.platform import Platform

REMOTE = """\
name: remote
tasks:
  say: {run: "echo from celery", executor: celery}
"""

KINDS = ("submitted", "claim", "lease", "cancel", "refused", "log", "result")


def test_purging_a_deleted_definition_forgets_its_attempts_in_redis(
    make_hosts: Callable[..., Hosts], database_url: str, tmp_path: Path
) -> None:
    hosts = make_hosts()
    hosts.start("w1")
    executor = hosts.executor()
    db = Ledgers(dialects.create_engine(database_url))
    scheduler = Scheduler(
        db.ledger,
        executors={"celery": executor},
        tokens=AttemptTokens(SECRET.encode()),
        outbox=tmp_path / "outbox",
        settings=FAST,
    )
    try:
        triggers.apply_definition(db.ledger, REMOTE)
        run_id = triggers.trigger(
            db.ledger, name="remote", kind=TriggerKind.MANUAL, actor="operator:test"
        ).run_id

        def ended() -> RunExecutionState | None:
            state, _ = db.run(run_id)
            return state if state is RunExecutionState.SUCCESS else None

        wait_for(ended, what="the Celery run", step=scheduler.tick, interval=0.05)
        key = f"{db.instances(run_id)['say'].id}/1"
        redis = hosts.claims().client
        held = [kind for kind in KINDS if redis.exists(f"veritask:{kind}:{key}")]
        assert "result" in held and "log" in held
        platform = Platform(db.ledger, tmp_path / "home")
        definitions.delete_definition(platform, "remote", actor="operator:test", purge=True)

        assert definitions.advance_deletions(platform, executors={}) == 0  # not served here
        assert definitions.advance_deletions(platform, executors={"celery": executor}) == 2

        with db.engine.connect() as connection:
            row = queries.get_definition(connection, name="remote")
        assert row is not None and row.lifecycle == DefinitionLifecycle.PURGED
        assert [kind for kind in KINDS if redis.exists(f"veritask:{kind}:{key}")] == []
        assert db.run(run_id)[0] is RunExecutionState.SUCCESS  # the history is kept
    finally:
        scheduler.close()
        db.engine.dispose()

"""The hash chain and its signed checkpoints on SQLite and PostgreSQL: a ledger written by the
platform verifies; deleting, changing or reordering any event behind its back (with the
append-only guards lifted, as the file's owner or PostgreSQL's superuser can) does not, and
``verify`` names the subject and the place; a forged checkpoint or one signed by another
key is refused; a purged range still verifies."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from sqlalchemy.engine import Engine

from tests.contract.test_apply_ledger import report
from tests.contract.test_audit import _story
from veritask.core.events import EventKind
from veritask.ledger import (
    audit,
    chain,
    dialects,
    retention,
    run_store,
    schema,
    seals,
    signing,
)
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import SubjectType

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def signer() -> signing.Signer:
    return signing.Signer(ed25519.Ed25519PrivateKey.generate())


def tamper(engine: Engine, *statements: str) -> None:
    """Run ``statements`` past the append-only guards: on SQLite from a plain connection that
    drops the triggers first; on PostgreSQL as the superuser, triggers off for the session."""
    if engine.dialect.name == "sqlite":
        database = engine.url.database
        assert database is not None
        engine.dispose()
        raw = sqlite3.connect(database)
        try:
            names = raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
            for (name,) in names:
                raw.execute(f"DROP TRIGGER {name}")
            for statement in statements:
                raw.execute(statement)
            raw.commit()
        finally:
            raw.close()
        return
    with engine.begin() as connection:
        connection.exec_driver_sql("SET LOCAL session_replication_role = replica")
        for statement in statements:
            connection.exec_driver_sql(statement)


def chain_of(engine: Engine, subject_id: str) -> list[int]:
    """The positions of a subject's events, in order."""
    e = schema.events.c
    with dialects.read_transaction(engine) as connection:
        return list(
            connection.execute(
                sa.select(e.position).where(e.subject_id == subject_id).order_by(e.position)
            ).scalars()
        )


def instance_ids(engine: Engine, run_id: str) -> dict[str, str]:
    t = schema.task_instances.c
    with dialects.read_transaction(engine) as connection:
        rows = connection.execute(sa.select(t.task_key, t.id).where(t.run_id == run_id)).all()
    return {row.task_key: row.id for row in rows}


def verified(engine: Engine, trusted: Sequence[str]) -> audit.Report:
    engine.dispose()  # a tampering connection may have changed the file under the pool
    return audit.verify(Ledger(engine), trusted_keys=trusted)


def only_break(found: audit.Report) -> chain.Break:
    assert len(found.chains.breaks) == 1, found.chains.breaks
    return found.chains.breaks[0]


@pytest.fixture
def story(engine: Engine, signer: signing.Signer) -> tuple[str, str, list[int]]:
    """A run (its extract done, its load retrying), sealed: (run id, load's id, positions)."""
    run_id = _story(Ledger(engine))
    load = instance_ids(engine, run_id)["load"]
    assert seals.seal(engine, signer, now=NOW) is not None
    return run_id, load, chain_of(engine, load)


def test_a_ledger_written_by_the_platform_verifies(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    _, load, _ = story
    Ledger(engine).apply(report(load, EventKind.HEARTBEAT, 9))
    assert seals.seal(engine, signer, now=NOW) is not None
    assert seals.seal(engine, signer, now=NOW) is None  # nothing moved since

    found = verified(engine, [signer.public_key])

    assert found.ok, (found.chains.breaks, found.chains.problems)
    assert found.chains.checkpoints == 2
    with dialects.read_transaction(engine) as connection:
        total = connection.execute(sa.select(sa.func.count()).select_from(schema.events))
        assert found.chains.events == total.scalar_one()


def test_a_deleted_middle_event_is_the_next_ones_broken_link(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    _, load, positions = story
    tamper(engine, f"DELETE FROM events WHERE position = {positions[2]}")

    broken = only_break(verified(engine, [signer.public_key]))

    assert (broken.subject_type, broken.subject_id) == ("instance", load)
    assert (broken.index, broken.position) == (3, positions[3])


def test_a_changed_column_is_its_events_broken_link(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    _, load, positions = story
    tamper(engine, f"UPDATE events SET actor = 'operator:mallory' WHERE position = {positions[1]}")

    broken = only_break(verified(engine, [signer.public_key]))

    assert (broken.subject_id, broken.index, broken.position) == (load, 2, positions[1])


def test_two_swapped_events_break_the_chain_where_the_first_moved(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    _, load, positions = story
    first, second = positions[1], positions[2]
    tamper(
        engine,
        f"UPDATE events SET position = -1 WHERE position = {first}",
        f"UPDATE events SET position = {first} WHERE position = {second}",
        f"UPDATE events SET position = {second} WHERE position = -1",
    )

    broken = only_break(verified(engine, [signer.public_key]))

    assert (broken.subject_id, broken.index, broken.position) == (load, 2, first)


def test_a_deleted_last_event_is_caught_by_its_row_and_by_the_seal(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    _, load, positions = story
    tamper(engine, f"DELETE FROM events WHERE position = {positions[-1]}")

    by_row = only_break(verified(engine, [signer.public_key]))
    assert (by_row.subject_id, by_row.index) == (load, len(positions))
    assert "its row records head" in by_row.problem

    # One who knows to move the row's head back too is caught by the sealed head.
    tamper(
        engine,
        f"UPDATE task_instances SET chain_head = (SELECT chain_hash FROM events "
        f"WHERE position = {positions[-2]}) WHERE id = '{load}'",
    )
    by_seal = only_break(verified(engine, [signer.public_key]))
    assert (by_seal.subject_id, by_seal.position) == (load, positions[-1])
    assert "checkpoint 1 sealed its head" in by_seal.problem


def test_a_forged_checkpoint_signature_is_refused(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    del story
    forged = "ab" * 64
    tamper(engine, f"UPDATE chain_checkpoints SET signature = '{forged}'")

    found = verified(engine, [signer.public_key])

    assert not found.ok
    assert len(found.chains.problems) == 1
    assert found.chains.problems[0].startswith("checkpoint 1 (seal, ")
    assert found.chains.problems[0].endswith(": its signature does not hold (forged or changed)")


def test_a_checkpoint_signed_by_another_key_is_refused(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    _, load, _ = story
    Ledger(engine).apply(report(load, EventKind.HEARTBEAT, 9))
    stranger = signing.Signer(ed25519.Ed25519PrivateKey.generate())
    assert seals.seal(engine, stranger, now=NOW) is not None

    found = verified(engine, [signer.public_key])

    assert len(found.chains.problems) == 1
    assert f"signed by key {signing.key_id(stranger.public_key)}" in found.chains.problems[0]
    assert not verified(engine, []).ok  # no trusted key at all: nothing vouches for them


def test_a_purged_run_leaves_a_ledger_that_verifies(
    engine: Engine,
    signer: signing.Signer,
    story: tuple[str, str, list[int]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id, load, _ = story
    key_file = tmp_path / "key.pem"
    key_file.write_bytes(
        signer.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    monkeypatch.setenv(signing.KEY_FILE_ENV, str(key_file))
    kept = _story(Ledger(engine))
    with engine.begin() as connection:
        retention.purge_events(connection, run_ids=[run_id], now=NOW)
        retention.delete_run_snapshots(connection, [run_id])

    found = verified(engine, [signer.public_key])

    assert found.ok, (found.chains.breaks, found.chains.problems)
    assert chain_of(engine, load) == []
    assert found.chains.checkpoints == 2  # the seal, then the purge's own
    # What remains is still guarded.
    kept_load = instance_ids(engine, kept)["load"]
    tamper(engine, f"DELETE FROM events WHERE position = {chain_of(engine, kept_load)[1]}")
    assert only_break(verified(engine, [signer.public_key])).subject_id == kept_load


def test_concurrent_run_events_chain_one_after_another(
    engine: Engine, story: tuple[str, str, list[int]]
) -> None:
    run_id, _, _ = story
    failures: list[BaseException] = []

    def append(writer: int) -> None:
        try:
            for n in range(5):
                with engine.begin() as connection:
                    run_store.record_subject_event(
                        connection,
                        subject_type=SubjectType.RUN,
                        subject_id=run_id,
                        run_id=run_id,
                        kind="run_noted",
                        actor="operator:ann",
                        event_id=f"note-{writer}-{n}",
                        now=NOW,
                        evidence={"writer": writer, "n": n},
                        reason="a note",
                    )
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=append, args=(writer,)) for writer in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    found = verified(engine, [])
    assert found.chains.breaks == []
    assert len(chain_of(engine, run_id)) >= 30


def test_a_checkpoint_removed_from_the_middle_is_named_by_the_next(
    engine: Engine, signer: signing.Signer, story: tuple[str, str, list[int]]
) -> None:
    _, load, _ = story
    Ledger(engine).apply(report(load, EventKind.HEARTBEAT, 9))
    assert seals.seal(engine, signer, now=NOW) == 2
    tamper(engine, "DELETE FROM chain_checkpoints WHERE id = 1")

    found = verified(engine, [signer.public_key])

    assert len(found.chains.problems) == 1
    assert found.chains.problems[0].startswith("checkpoint 2 (seal, ")
    assert "does not follow the checkpoint before it" in found.chains.problems[0]

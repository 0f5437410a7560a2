"""The database-direct verbs in real subprocesses, on SQLite and PostgreSQL: ``verify`` (and
``--repair``) with their exit codes, ``export`` then ``replay`` into an empty database,
``doctor``, and ``purge`` recorded as operations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.contract.test_audit import _snapshots, _story
from veritask.core.states import DefinitionLifecycle, TriggerKind
from veritask.ledger import dialects, migrate, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers
from veritask.services import definitions
from veritask.services.platform import Platform


def veritask(*args: str, home: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m veritask.cli.main ARGS`` with only VERITASK_HOME set (no API anywhere)."""
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("VERITASK_")
    }
    environment["VERITASK_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "veritask.cli.main", *args],
        capture_output=True,
        text=True,
        env=environment,
        input=stdin,
        timeout=60,
        check=False,
    )


def test_verify_detects_a_snapshot_changed_with_plain_sql_and_repair_fixes_it(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    _story(Ledger(engine))
    held = veritask("verify", "--database-url", database_url, "--json", home=tmp_path)
    assert held.returncode == 0, held.stderr
    assert json.loads(held.stdout)["ok"] is True

    with engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE task_instances SET state = 'SUCCESS' WHERE state = 'UP_FOR_RETRY'")
        )

    broken = veritask("verify", "--database-url", database_url, home=tmp_path)
    assert broken.returncode == 1
    assert "state is SUCCESS, its events say UP_FOR_RETRY" in broken.stdout
    assert "NOT all held" in broken.stdout

    repaired = veritask("verify", "--repair", "--database-url", database_url, home=tmp_path)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "1 repaired" in repaired.stdout
    assert veritask("verify", "--database-url", database_url, home=tmp_path).returncode == 0
    with dialects.read_transaction(engine) as connection:
        kinds = connection.execute(sa.select(schema.operations.c.kind)).scalars().all()
    assert kinds == ["repair"]


def test_export_then_replay_in_an_empty_database_gives_identical_snapshots(
    engine: Engine, database_url: str, empty_database_url: str, tmp_path: Path
) -> None:
    run_id = _story(Ledger(engine))
    exported = tmp_path / "run.jsonl"
    done = veritask(
        "export", run_id, "-o", str(exported), "--database-url", database_url, home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(exported.read_text().splitlines()[0])["format"] == "veritask-export/1"
    migrate.upgrade(empty_database_url)

    replayed = veritask(
        "replay", str(exported), "--database-url", empty_database_url, "--json", home=tmp_path
    )

    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == {"instances": 2}
    target = dialects.create_engine(empty_database_url)
    try:
        assert _snapshots(target) == _snapshots(engine)
    finally:
        target.dispose()
    again = veritask("replay", str(exported), "--database-url", empty_database_url, home=tmp_path)
    assert again.returncode == 4, "a replay into a database that is not empty is refused"
    missing = veritask("export", "no-such-run", "--database-url", database_url, home=tmp_path)
    assert missing.returncode == 3


def test_export_of_a_definition_replays_every_run(
    engine: Engine, database_url: str, empty_database_url: str, tmp_path: Path
) -> None:
    ledger = Ledger(engine)
    _story(ledger)
    triggers.trigger(ledger, name="audited", kind=TriggerKind.MANUAL, actor="operator:bo")
    done = veritask(
        "export", "--definition", "audited", "--database-url", database_url, home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    migrate.upgrade(empty_database_url)
    replayed = veritask(
        "replay", "-", "--database-url", empty_database_url, home=tmp_path, stdin=done.stdout
    )
    assert replayed.returncode == 0, replayed.stderr
    target = dialects.create_engine(empty_database_url)
    try:
        assert _snapshots(target) == _snapshots(engine)
    finally:
        target.dispose()


def test_doctor_reports_each_check_and_fails_without_a_scheduler(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    found = veritask("doctor", "--database-url", database_url, "--json", home=tmp_path)

    assert found.returncode == 1, "no scheduler is alive"
    checks = {c["name"]: c for c in json.loads(found.stdout)["checks"]}
    assert checks["database"]["status"] == "ok"
    assert checks["schedulers"]["status"] == "fail"
    assert checks["clock skew"]["status"] == "ok"
    assert {"disk: logs", "disk: spool", "executor"} <= checks.keys()

    now = Ledger(engine).clock()
    with engine.begin() as connection:
        connection.execute(
            schema.schedulers.insert().values(
                id="s1", host="h", pid=1, started_at=now, heartbeat_at=now, last_tick_at=now
            )
        )
    healthy = veritask("doctor", "--database-url", database_url, home=tmp_path)
    assert healthy.returncode == 0, healthy.stdout
    assert "OK    schedulers: 1 alive" in healthy.stdout


def test_doctor_fails_on_a_database_that_is_not_migrated(
    empty_database_url: str, tmp_path: Path
) -> None:
    empty = dialects.database_file(empty_database_url)
    if empty is not None:
        empty.touch()  # an empty SQLite database is a file with no tables
    found = veritask("doctor", "--database-url", empty_database_url, "--json", home=tmp_path)
    assert found.returncode == 1
    checks = {c["name"]: c for c in json.loads(found.stdout)["checks"]}
    assert checks["database"]["status"] == "fail"
    assert "veritask db upgrade" in checks["database"]["detail"]


def test_verify_and_doctor_never_create_a_ledger_and_name_the_one_they_open(
    database_url: str, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("VERITASK_")
    }
    for verb in ("verify", "doctor"):
        done = subprocess.run(
            [sys.executable, "-m", "veritask.cli.main", verb],
            capture_output=True,
            text=True,
            env=environment,
            cwd=elsewhere,
            timeout=60,
            check=False,
        )
        assert done.returncode == 3, done.stdout + done.stderr
        assert f"no Veritask database at {elsewhere / '.veritask' / 'veritask.db'}" in done.stderr
        assert "db upgrade" in done.stderr
        assert list(elsewhere.iterdir()) == [], "nothing is created"

    shown = dialects.shown_url(database_url)
    verified = veritask("verify", "--database-url", database_url, home=tmp_path)
    assert verified.stdout.splitlines()[0] == f"database: {shown}"
    doctor = veritask("doctor", "--database-url", database_url, "--json", home=tmp_path)
    assert json.loads(doctor.stdout)["database"] == shown


def test_purge_removes_old_history_of_deleted_definitions_only(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    ledger = Ledger(engine)
    _story(ledger)
    with engine.begin() as connection:
        # The story's run is still RUNNING; finish it and delete its definition by hand.
        connection.execute(schema.runs.update().values(execution_state="FAILED"))
    dry = veritask(
        "purge",
        "--older-than",
        "90d",
        "--dry-run",
        "--database-url",
        database_url,
        "--json",
        home=tmp_path,
    )
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["runs"] == 0, "the definition is not deleted"
    # Deleted as Veritask deletes: each lifecycle step an event (verify follows them).
    platform = Platform.open(database_url, tmp_path)
    try:
        deleted = definitions.delete_definition(
            platform, "audited", actor="operator:test", purge=False
        )
    finally:
        platform.close()
    assert deleted.lifecycle is DefinitionLifecycle.DELETED
    recent = veritask(
        "purge", "--older-than", "90d", "--database-url", database_url, "--json", home=tmp_path
    )
    assert json.loads(recent.stdout)["runs"] == 0, "its events are younger than 90 days"

    # The events were recorded before this process started: a millisecond's retention is past.
    purged = veritask(
        "purge", "--older-than", "0.001s", "--database-url", database_url, "--json", home=tmp_path
    )
    assert purged.returncode == 0, purged.stderr
    result = json.loads(purged.stdout)
    assert result["runs"] == 1
    assert result["events"] > 0
    with dialects.read_transaction(engine) as connection:
        runs_left = connection.execute(sa.select(sa.func.count()).select_from(schema.runs))
        assert runs_left.scalar_one() == 0
        operations = connection.execute(
            sa.select(schema.operations.c.kind, schema.operations.c.dry_run)
        ).all()
    assert ("purge_events", True) in operations
    assert ("purge_events", False) in operations
    assert ("remove_logs", False) in operations
    assert veritask("verify", "--database-url", database_url, home=tmp_path).returncode == 0
    bad = veritask("purge", "--older-than", "soon", "--database-url", database_url, home=tmp_path)
    assert bad.returncode == 2


def test_verify_seals_then_names_the_first_broken_link(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    from tests.contract.test_chain import chain_of, instance_ids, tamper

    load = instance_ids(engine, _story(Ledger(engine)))["load"]
    sealed = veritask("verify", "--seal", "--database-url", database_url, "--json", home=tmp_path)
    assert sealed.returncode == 0, sealed.stdout + sealed.stderr
    chains = json.loads(sealed.stdout)["chains"]
    assert (chains["ok"], chains["checkpoints"], chains["broken_links"]) == (True, 1, [])
    assert (tmp_path / "signing-key.pem").stat().st_mode & 0o777 == 0o600
    public = veritask("public-key", home=tmp_path)
    assert public.stdout.startswith("-----BEGIN PUBLIC KEY-----"), public.stderr
    (tmp_path / "public.pem").write_text(public.stdout)

    positions = chain_of(engine, load)
    tamper(engine, f"DELETE FROM events WHERE position = {positions[1]}")

    # Checked by another host that has only the public key.
    elsewhere = tmp_path / "auditor"
    broken = veritask(
        "verify",
        "--public-key",
        str(tmp_path / "public.pem"),
        "--database-url",
        database_url,
        "--json",
        home=elsewhere,
    )
    assert broken.returncode == 1, broken.stderr
    found = json.loads(broken.stdout)["chains"]
    assert found["checkpoint_problems"] == []
    assert found["broken_links"] == [
        {
            "subject_type": "instance",
            "subject_id": load,
            "index": 2,
            "position": positions[2],
            "problem": found["broken_links"][0]["problem"],
        }
    ]
    missing = veritask("verify", "--public-key", str(tmp_path / "none.pem"), home=tmp_path)
    assert missing.returncode == 2

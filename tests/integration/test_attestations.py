"""A PUBLISHED run carries a signed attestation, on SQLite and PostgreSQL: the definition's
version and content hash, the parameters, each task's attempt (engine, id, token hash), the
checks and their results, the overrides; its signature verifies with the platform's public
key; an unpublished run has none (404 naming why). ``veritask export --signed`` of the run
holds under ``veritask verify-export``, run with no database, no home and a clean
environment (docs/integrity.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.acceptance.test_operations import veritask
from tests.integration.conftest import Api
from tests.pipelines.harness import Platform as Scheduled
from tests.scheduling.publications import published_run, upstream
from veritask.ledger import attestations, dialects, schema, signing

PUBLISHING = """\
name: attested
parameters: {table: users}
publish:
  checks:
    - {name: rows, run: "true"}
  commit: {run: "true"}
tasks:
  extract: {run: "true"}
  load: {run: "false", after: [extract]}
"""


def _token_hashes(api: Api, run_id: str) -> dict[str, str]:
    t, a = schema.task_instances.c, schema.attempts.c
    with dialects.read_transaction(api.platform.engine) as connection:
        rows = connection.execute(
            sa.select(t.task_key, a.token_hash)
            .join(schema.attempts, a.instance_id == t.id)
            .where(t.run_id == run_id)
        )
        return {row.task_key: row.token_hash for row in rows}


def test_a_published_run_is_attested_and_its_signed_export_verifies_offline(
    api: Api, database_url: str, tmp_path: Path
) -> None:
    api.apply(PUBLISHING)
    run_id = api.trigger("attested", parameters={"table": "orders"})
    scheduled = Scheduled(api.platform.engine, tmp_path / "scheduler")
    try:
        scheduled.until(lambda: api.run(run_id)["execution_state"] == "FAILED")
        # An operator vouches for the failed load: the run succeeds and publishes.
        load = api.instance_ids(run_id)["load"]
        overridden = api.http.post(
            f"/api/v2/instances/{load}/override",
            json={"state": "SUCCESS", "reason": "loaded by hand", "scope": "instance"},
        )
        assert overridden.status_code in (200, 202), overridden.text
        scheduled.until(lambda: api.run(run_id)["publication_state"] == "PUBLISHED")
    finally:
        scheduled.close()

    served = api.http.get(f"/api/v2/runs/{run_id}/attestation")
    assert served.status_code == 200, served.text
    document = served.json()
    body = document["attestation"]
    public_key = signing.load_signer(api.platform.home, create=False)
    assert public_key is not None
    assert document["signature"]["key_id"] == signing.key_id(public_key.public_key)
    assert attestations.check(document, public_key.public_key) is None
    v = schema.definition_versions.c
    with dialects.read_transaction(api.platform.engine) as connection:
        content_hash = connection.execute(sa.select(v.content_hash)).scalar_one()
    assert body["definition"]["version"] == 1
    assert body["definition"]["content_hash"] == content_hash
    assert body["parameters"] == {"table": "orders"}
    tokens = _token_hashes(api, run_id)
    tasks = {task["task"]: task for task in body["tasks"]}
    assert set(tasks) == {"extract", "load", "publish.commit"}
    for key in ("extract", "publish.commit"):
        assert tasks[key]["state"] == "SUCCESS" and tasks[key]["override"] is None
        assert tasks[key]["attempt"]["attempt_no"] == 1
        assert tasks[key]["attempt"]["engine"] == "local"
        assert tasks[key]["attempt"]["token_sha256"] == tokens[key]
    [override] = body["overrides"]
    assert (override["task"], override["to_state"], override["reason"]) == (
        "load",
        "SUCCESS",
        "loaded by hand",
    )
    assert override["operator"] == "operator:admin" and override["scope"] == "instance"
    # Its output is the operator's word, not an attempt's.
    assert tasks["load"]["attempt"] is None and tasks["load"]["override"] == override["event_id"]
    assert [(c["check"], c["state"]) for c in body["checks"]] == [("rows", "SUCCESS")]
    assert body["upstream_runs"] == []
    # One changed field and the signature no longer holds.
    forged = {**document, "attestation": {**body, "parameters": {"table": "other"}}}
    assert attestations.check(forged, public_key.public_key) is not None

    waiting = api.trigger("attested", idempotency_key="not-yet")  # no scheduler runs it
    missing = api.http.get(f"/api/v2/runs/{waiting}/attestation")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert "no attestation" in missing.json()["detail"]

    home = api.platform.home
    bundle = tmp_path / "run.bundle.jsonl"
    exported = veritask(
        "export", run_id, "--signed", "-o", str(bundle), "--database-url", database_url, home=home
    )
    assert exported.returncode == 0, exported.stderr
    pem = veritask("public-key", home=home)
    assert pem.returncode == 0, pem.stderr
    key_file = tmp_path / "exporter.pem"
    key_file.write_text(pem.stdout)
    # The auditor: an empty folder, no VERITASK_* variable, no database anywhere.
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "veritask.cli.main",
            "verify-export",
            str(bundle),
            "--public-key",
            str(key_file),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=auditor,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(auditor)},
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["ok"] is True and report["attestations"] == 1
    assert report["events"] > 0 and report["chains"] >= 5
    assert list(auditor.iterdir()) == []

    # A definition's export: its own events' chain too, and both runs.
    whole = tmp_path / "definition.bundle.jsonl"
    exported = veritask(
        "export",
        "--definition",
        "attested",
        "--signed",
        "-o",
        str(whole),
        "--database-url",
        database_url,
        home=home,
    )
    assert exported.returncode == 0, exported.stderr
    checked = veritask(
        "verify-export", str(whole), "--public-key", str(key_file), "--json", home=auditor
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["attestations"] == 1


def test_a_run_whose_attestation_cannot_be_signed_is_not_published(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.apply(upstream("keyless"))
    monkeypatch.setenv(signing.KEY_FILE_ENV, str(tmp_path / "absent.pem"))
    with pytest.raises(attestations.Unattested, match=r"absent\.pem"):
        published_run(api.platform.ledger, "keyless", datetime(2026, 12, 5, tzinfo=UTC))
    [run] = api.http.get("/api/v2/runs").json()["items"]
    assert run["publication_state"] == "PENDING"  # nothing of that transaction was kept

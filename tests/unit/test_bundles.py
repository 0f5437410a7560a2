"""A signed export bundle checked with nothing but its text and a public key
(ledger/bundles.py): an untouched bundle holds; one byte of an event changed, an event
dropped, the manifest edited, the bundle re-signed with another key, or an attestation
edited is found, and the finding names the part, the chain and the event's line. The CLI's
``verify-export`` exits 0, 1 or 2 by the scripting contract (docs/cli.md)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from veritask.core.jsontypes import JSONObject
from veritask.ledger import attestations, bundles, chain, signing
from veritask.ledger.bundles import line_text

T0 = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)
RUN = "run-1"


def _events() -> list[JSONObject]:
    """A run's chain of three events and an instance's of two, hashed as the ledger does."""
    subjects = [("run", RUN, None), ("instance", "inst-1", "inst-1")]
    lines: list[JSONObject] = []
    for subject_type, subject_id, instance in subjects:
        prev = None
        for seq in range(3 if subject_type == "run" else 2):
            moment = T0 + timedelta(seconds=seq)
            row: dict[str, object] = {
                "event_id": f"{subject_id}-e{seq}",
                "subject_type": subject_type,
                "subject_id": subject_id,
                "run_id": RUN,
                "instance_id": instance,
                "attempt_no": 1 if instance else None,
                "kind": "state_changed",
                "actor": "scheduler",
                "seq": seq,
                "from_state": None,
                "to_state": "RUNNING",
                "event_time": moment,
                "observed_at": moment,
                "evidence": {"n": seq, "ratio": 1.5, "note": "caf\u00e9"},
                "outcome": "applied",
                "reason": "because",
                "fingerprint": None,
            }
            prev = chain.link(row, prev)
            plain: JSONObject = json.loads(json.dumps(row, default=datetime.isoformat))
            lines.append({"table": "events", "row": {**plain, "chain_hash": prev}})
    return lines


def _attestation(signer: signing.Signer) -> JSONObject:
    body: JSONObject = {"format": attestations.FORMAT, "run_id": RUN, "parameters": {"a": 1}}
    message = attestations.encoding(body)
    return {
        "attestation": body,
        "signature": {
            "algorithm": "ed25519",
            "digest": hashlib.sha256(message).hexdigest(),
            "key_id": signing.key_id(signer.public_key),
            "public_key": signer.public_key,
            "value": signer.sign(message),
        },
    }


def _bundle(signer: signing.Signer) -> str:
    lines: list[JSONObject] = [
        {"format": "veritask-export/1", "run_id": RUN},
        {"table": "runs", "row": {"id": RUN, "parameters": {"a": 1}}},
        {"table": "task_instances", "row": {"id": "inst-1", "run_id": RUN}},
        *_events(),
    ]
    return bundles.sign(lines, [_attestation(signer)], signer, now=T0)


@pytest.fixture(scope="module")
def signer() -> signing.Signer:
    return signing.Signer(ed25519.Ed25519PrivateKey.generate())


@pytest.fixture(scope="module")
def bundle(signer: signing.Signer) -> str:
    return _bundle(signer)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _first(text: str, public_key: str) -> str:
    found = bundles.check(text, public_key)
    assert not found.ok
    return str(found.findings[0])


def test_an_untouched_bundle_holds(bundle: str, signer: signing.Signer) -> None:
    found = bundles.check(bundle, signer.public_key)
    assert found.ok, found.findings
    assert (found.events, found.chains, found.attestations) == (5, 2, 1)


def test_one_byte_of_an_event_changed_is_named_by_part_and_event(
    bundle: str, signer: signing.Signer
) -> None:
    lines = _lines(bundle)
    assert '"actor": "scheduler"' in lines[4]  # the run's second event
    lines[4] = lines[4].replace('"actor": "scheduler"', '"actor": "schedulex"')
    found = bundles.check("".join(lines), signer.public_key)
    shown = [str(finding) for finding in found.findings]
    assert shown[0] == "part events: its SHA-256 is not the manifest's: a line of it was changed"
    assert any(s.startswith("event 2 of run run-1 (line 5): its content") for s in shown)


def test_a_dropped_event_breaks_its_chain_at_the_next_event(
    bundle: str, signer: signing.Signer
) -> None:
    lines = _lines(bundle)
    del lines[4]
    shown = [str(f) for f in bundles.check("".join(lines), signer.public_key).findings]
    assert shown[0] == "part events: 4 lines, the manifest says 5"
    assert "event 2 of run run-1 (line 5): its content or its predecessor" in shown[1]
    assert "chain of run run-1: 2 events, the manifest says 3" in shown


def test_a_dropped_last_event_is_caught_by_the_manifest_head(
    bundle: str, signer: signing.Signer
) -> None:
    lines = _lines(bundle)
    del lines[5]  # the run's last event: nothing after it in its chain
    shown = [str(f) for f in bundles.check("".join(lines), signer.public_key).findings]
    assert "chain of run run-1: 2 events, the manifest says 3" in shown


def test_an_edited_manifest_fails_its_signature(bundle: str, signer: signing.Signer) -> None:
    lines = _lines(bundle)
    last = json.loads(lines[-1])
    last["manifest"]["chains"][0]["events"] = 2
    lines[-1] = line_text(last)
    assert _first("".join(lines), signer.public_key).startswith(
        f"manifest (line {len(lines)}): its signature does not verify"
    )


def test_a_bundle_re_signed_with_another_key_names_both_keys(
    signer: signing.Signer,
) -> None:
    other = signing.Signer(ed25519.Ed25519PrivateKey.generate())
    forged = _bundle(other)
    assert bundles.check(forged, other.public_key).ok
    first = _first(forged, signer.public_key)
    assert signing.key_id(other.public_key) in first
    assert f"not by the given key {signing.key_id(signer.public_key)}" in first


def test_an_edited_attestation_is_named(bundle: str, signer: signing.Signer) -> None:
    lines = _lines(bundle)
    assert '"attestation"' in lines[-2]
    lines[-2] = lines[-2].replace('"a": 1', '"a": 2')
    shown = [str(f) for f in bundles.check("".join(lines), signer.public_key).findings]
    assert (
        shown[0] == "part attestations: its SHA-256 is not the manifest's: a line of it was changed"
    )
    assert shown[1].startswith(f"attestation of run {RUN} (line {len(lines) - 1}): its body")


def test_verify_export_exits_0_1_or_2_with_no_home(
    bundle: str, signer: signing.Signer, tmp_path: Path
) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(bundle)
    bad.write_text(bundle.replace('"n": 1', '"n": 7', 1))

    def verify_export(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "veritask.cli.main", "verify-export", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={"PATH": os.environ.get("PATH", "")},
            timeout=60,
            check=False,
        )

    held = verify_export(str(good), "--public-key", signer.public_key)
    assert held.returncode == 0, held.stdout + held.stderr
    assert "the bundle holds" in held.stdout
    broken = verify_export(str(bad), "--public-key", signer.public_key)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert broken.stdout.startswith("part events: its SHA-256")
    assert verify_export(str(good), "--public-key", "not-a-key").returncode == 2
    assert (
        verify_export(str(tmp_path / "absent"), "--public-key", signer.public_key).returncode == 2
    )

"""Signed export bundles, and their check by anyone holding the public key
(docs/integrity.md, 'Signed exports').

A bundle is one JSON Lines file: the export's lines (``audit.export_run`` or
``export_definition``), then every attestation of the exported runs, then, last, the
manifest with its signature::

    {"manifest": {...}, "signature": {"algorithm": "ed25519", "key_id": ..., "value": ...}}

The manifest names each part (the header, each table's rows, the events, the attestations)
with its number of lines and the SHA-256 of its lines as written, in file order; each event
chain (subject, number of events, head hash) as the chains of the ledger have it; and the
exporter's public key. The signature is over the manifest's canonical encoding
(:func:`encoding`). :func:`check` needs nothing but the bundle's text and a public key: no
database, no server, no VERITASK_HOME.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.ledger import attestations, chain, signing

FORMAT: Final = "veritask-signed-export/1"
HEADER: Final = "header"
EVENTS: Final = "events"
ATTESTATIONS: Final = "attestations"


def encoding(manifest: Mapping[str, object]) -> bytes:
    """What is signed: the manifest as JSON, keys sorted, no spaces, non-ASCII escaped."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def line_text(line: Mapping[str, object]) -> str:
    """One line of a bundle as written (the same text ``veritask export`` writes)."""
    return json.dumps(line, sort_keys=True) + "\n"


def part_of(line: Mapping[str, object]) -> str:
    """Which part a line belongs to: the header, a table's rows, or the attestations."""
    if "format" in line:
        return HEADER
    if "attestation" in line:
        return ATTESTATIONS
    return str(line.get("table"))


@dataclass
class _Part:
    lines: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)


def _parts(texts: Iterable[tuple[str, str]]) -> dict[str, _Part]:
    """(part name, line text) in file order -> each part's count and running SHA-256."""
    parts: dict[str, _Part] = {}
    for name, text in texts:
        part = parts.setdefault(name, _Part())
        part.lines += 1
        part.digest.update(text.encode())
    return parts


def sign(
    lines: Sequence[JSONObject],
    attested: Sequence[JSONObject],
    signer: signing.Signer,
    *,
    now: datetime,
) -> str:
    """The bundle's whole text: ``lines`` (an export), the attestations, the signed manifest."""
    body = [*lines, *attested]
    texts = [line_text(line) for line in body]
    parts = _parts((part_of(line), text) for line, text in zip(body, texts, strict=True))
    chains: dict[chain.Subject, tuple[int, str]] = {}
    for line in lines:
        row = line.get("row")
        if line.get("table") != EVENTS or not isinstance(row, dict):
            continue
        subject = (str(row["subject_type"]), str(row["subject_id"]))
        count, _ = chains.get(subject, (0, ""))
        chains[subject] = (count + 1, str(row.get("chain_hash")))
    manifest: JSONObject = {
        "format": FORMAT,
        "exported_at": now.astimezone(UTC).isoformat(),
        "export": dict(lines[0]) if lines else {},
        "public_key": signer.public_key,
        "key_id": signing.key_id(signer.public_key),
        "parts": [
            {"name": name, "lines": part.lines, "sha256": part.digest.hexdigest()}
            for name, part in parts.items()
        ],
        "chains": [
            {"subject_type": kind, "subject_id": subject_id, "events": count, "head": head}
            for (kind, subject_id), (count, head) in chains.items()
        ],
    }
    signature: JSONObject = {
        "algorithm": "ed25519",
        "key_id": signing.key_id(signer.public_key),
        "value": signer.sign(encoding(manifest)),
    }
    return "".join(texts) + line_text({"manifest": manifest, "signature": signature})


# -- the check ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One thing that does not match: where (a part, a line, an event) and what."""

    where: str
    problem: str
    line: int | None = None

    def __str__(self) -> str:
        at = "" if self.line is None else f" (line {self.line})"
        return f"{self.where}{at}: {self.problem}"

    def as_json(self) -> JSONObject:
        return {"where": self.where, "line": self.line, "problem": self.problem}


@dataclass
class Check:
    """What :func:`check` found; ``ok`` when nothing."""

    findings: list[Finding] = field(default_factory=list)
    key_id: str = ""
    parts: int = 0
    events: int = 0
    chains: int = 0
    attestations: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_json(self) -> JSONObject:
        return {
            "ok": self.ok,
            "key_id": self.key_id,
            "parts": self.parts,
            "events": self.events,
            "chains": self.chains,
            "attestations": self.attestations,
            "findings": [finding.as_json() for finding in self.findings],
        }


def check(text: str, public_key: str) -> Check:
    """Check a bundle against ``public_key`` (hex): the manifest's signature, every part's
    lines and hash, every event chain recomputed from the events, every attestation's
    signature. The first finding is the first thing that did not match, in that order."""
    found = Check(key_id=signing.key_id(public_key))
    raw = text.splitlines(keepends=True)
    while raw and not raw[-1].strip():
        raw.pop()
    if not raw:
        found.findings.append(Finding("bundle", "empty"))
        return found
    parsed: list[JSONObject] = []
    for number, line in enumerate(raw, start=1):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            found.findings.append(Finding("bundle", f"not JSON: {exc.msg}", number))
            return found
        if not isinstance(value, dict):
            found.findings.append(Finding("bundle", "not a JSON object", number))
            return found
        parsed.append(value)
    last = parsed.pop()
    manifest, signature = last.get("manifest"), last.get("signature")
    if not isinstance(manifest, dict) or not isinstance(signature, dict):
        found.findings.append(Finding("manifest", "the last line is not a signed manifest"))
        return found
    _check_signature(found, manifest, signature, public_key, len(raw))
    _check_parts(found, manifest, parsed, raw)
    _check_chains(found, manifest, parsed)
    _check_attestations(found, parsed, public_key)
    return found


def _check_signature(
    found: Check,
    manifest: JSONObject,
    signature: JSONObject,
    public_key: str,
    line: int,
) -> None:
    if manifest.get("format") != FORMAT:
        found.findings.append(
            Finding("manifest", f"format {manifest.get('format')!r}, not {FORMAT}", line)
        )
    signed_by = manifest.get("public_key")
    if signed_by != public_key:
        named = signature.get("key_id") or signed_by
        found.findings.append(
            Finding(
                "manifest",
                f"signed by key {named}, not by the given key {found.key_id}",
                line,
            )
        )
    elif not signing.verify(public_key, str(signature.get("value")), encoding(manifest)):
        found.findings.append(
            Finding(
                "manifest",
                "its signature does not verify with the given key (the manifest was changed "
                "after it was signed)",
                line,
            )
        )


def _check_parts(
    found: Check, manifest: JSONObject, parsed: list[JSONObject], raw: list[str]
) -> None:
    expected = {str(item.get("name")): item for item in _objects(manifest.get("parts"))}
    actual = _parts((part_of(line), text) for line, text in zip(parsed, raw, strict=False))
    found.parts = len(actual)
    first_line: dict[str, int] = {}
    for number, line in enumerate(parsed, start=1):
        first_line.setdefault(part_of(line), number)
    for name in [*expected, *(name for name in actual if name not in expected)]:
        part, wanted = actual.get(name), expected.get(name)
        where = f"part {name}"
        if wanted is None:
            found.findings.append(Finding(where, "not in the manifest", first_line.get(name)))
        elif part is None:
            found.findings.append(Finding(where, "in the manifest, missing from the bundle"))
        elif part.lines != wanted.get("lines"):
            found.findings.append(
                Finding(where, f"{part.lines} lines, the manifest says {wanted.get('lines')}")
            )
        elif part.digest.hexdigest() != wanted.get("sha256"):
            found.findings.append(
                Finding(where, "its SHA-256 is not the manifest's: a line of it was changed")
            )


def _check_chains(found: Check, manifest: JSONObject, parsed: list[JSONObject]) -> None:
    """Recompute every exported subject's chain from its first event and compare each link
    with the hash the event carries, and the heads and lengths with the manifest's."""
    heads: dict[chain.Subject, tuple[int, str | None]] = {}
    broken: set[chain.Subject] = set()
    for number, line in enumerate(parsed, start=1):
        row = line.get("row")
        if line.get("table") != EVENTS or not isinstance(row, dict):
            continue
        found.events += 1
        subject = (str(row.get("subject_type")), str(row.get("subject_id")))
        count, prev = heads.get(subject, (0, None))
        count += 1
        stored = row.get("chain_hash")
        where = f"event {count} of {subject[0]} {subject[1]}"
        try:
            expected = chain.link(_typed(row), prev)
        except (KeyError, TypeError, ValueError) as exc:
            found.findings.append(Finding(where, f"cannot be read: {exc}", number))
            broken.add(subject)
            heads[subject] = (count, str(stored))
            continue
        if stored != expected and subject not in broken:
            broken.add(subject)
            found.findings.append(
                Finding(
                    where,
                    "its content or its predecessor is not what was hashed (an event changed, "
                    "dropped or moved)",
                    number,
                )
            )
        heads[subject] = (count, stored if isinstance(stored, str) else expected)
    found.chains = len(heads)
    sealed = {
        (str(item.get("subject_type")), str(item.get("subject_id"))): item
        for item in _objects(manifest.get("chains"))
    }
    for subject in [*sealed, *(s for s in heads if s not in sealed)]:
        where = f"chain of {subject[0]} {subject[1]}"
        wanted, have = sealed.get(subject), heads.get(subject)
        if wanted is None:
            found.findings.append(Finding(where, "not in the manifest"))
        elif have is None:
            found.findings.append(Finding(where, "in the manifest, no event of it in the bundle"))
        elif have[0] != wanted.get("events"):
            found.findings.append(
                Finding(where, f"{have[0]} events, the manifest says {wanted.get('events')}")
            )
        elif have[1] != wanted.get("head"):
            found.findings.append(Finding(where, "its head is not the manifest's"))


def _objects(value: JSONValue | None) -> list[JSONObject]:
    """The objects of a manifest's list (anything else in it is not a part or a chain)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _typed(row: JSONObject) -> dict[str, JSONValue | datetime]:
    typed: dict[str, JSONValue | datetime] = dict(row)
    for name in ("event_time", "observed_at"):
        value = row[name]
        if not isinstance(value, str):
            raise TypeError(f"{name}: a time, not {value!r}")
        typed[name] = datetime.fromisoformat(value)
    return typed


def _check_attestations(found: Check, parsed: list[JSONObject], public_key: str) -> None:
    runs = {
        str(row.get("id"))
        for line in parsed
        if line.get("table") == "runs" and isinstance(row := line.get("row"), dict)
    }
    for number, line in enumerate(parsed, start=1):
        if part_of(line) != ATTESTATIONS:
            continue
        found.attestations += 1
        body = line.get("attestation")
        run_id = body.get("run_id") if isinstance(body, dict) else None
        where = f"attestation of run {run_id}"
        problem = attestations.check(line, public_key)
        if problem is not None:
            found.findings.append(Finding(where, problem, number))
        elif run_id not in runs:
            found.findings.append(Finding(where, "its run is not in the bundle", number))

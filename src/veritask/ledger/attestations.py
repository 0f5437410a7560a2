"""A PUBLISHED run's attestation: what was published and what it rests on, signed once
(docs/integrity.md, 'Attestations').

Made in the transaction that moves the run to PUBLISHED (``run_store``), from the ledger as
it is then, and stored: a later change of the ledger cannot change it silently, because
the body is signed with the platform's key (``signing``) and kept beside the signature. The
body names the definition (its version and content hash), the effective parameters, for each
task the attempt whose output it gave (number, engine and its id, the hash of its token), the
upstream runs the run was started by or waited for, the publication's checks with their
results, and every override with its operator and reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.errors import VeritaskError
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import InstanceState
from veritask.ledger import errors, schema, seals, signing

FORMAT: Final = "veritask-attestation/1"
#: The task keys of the publication's steps (scheduling/publication.py names them).
CHECK_PREFIX: Final = "publish.check."
#: Run events whose evidence names the upstream runs a run waited for.
_RELEASED_KIND: Final = "dependencies_released"
_OVERRIDE_KIND: Final = "override"

_a = schema.run_attestations.c


class Unattested(VeritaskError):
    """A run could not be attested (the signing key cannot be read): it is not published."""


def encoding(body: Mapping[str, object]) -> bytes:
    """What is signed: the body as JSON, keys sorted, no spaces, non-ASCII escaped."""
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


@dataclass(frozen=True)
class Attestation:
    """A stored attestation: its body, the digest of its encoding, the signature and key."""

    run_id: str
    number: int
    attested_at: datetime
    body: JSONObject
    digest: str
    signature: str
    public_key: str

    @property
    def key_id(self) -> str:
        return signing.key_id(self.public_key)

    def as_json(self) -> JSONObject:
        """The attestation as served and exported: the body and its signature."""
        return {
            "attestation": self.body,
            "signature": {
                "algorithm": "ed25519",
                "digest": self.digest,
                "key_id": self.key_id,
                "public_key": self.public_key,
                "value": self.signature,
            },
        }


def check(document: Mapping[str, object], public_key: str) -> str | None:
    """Why an attestation (as :meth:`Attestation.as_json` writes it) does not hold under
    ``public_key`` (hex); None when it does."""
    body, signature = document.get("attestation"), document.get("signature")
    if not isinstance(body, dict) or not isinstance(signature, dict):
        return "not an attestation (expected 'attestation' and 'signature' objects)"
    message = encoding(body)
    if signature.get("digest") != hashlib.sha256(message).hexdigest():
        return "its body is not what was signed (the digest differs)"
    signed_by = signature.get("public_key")
    if signed_by != public_key:
        named = signing.key_id(str(signed_by)) if _is_hex(signed_by) else repr(signed_by)
        return f"signed by key {named}, not by the given key {signing.key_id(public_key)}"
    if not signing.verify(public_key, str(signature.get("value")), message):
        return "its signature does not verify with the given key"
    return None


def _is_hex(value: object) -> bool:
    try:
        bytes.fromhex(str(value))
    except ValueError:
        return False
    return isinstance(value, str)


def attest(connection: Connection, *, run_id: str, event_id: str, now: datetime) -> Attestation:
    """Build, sign (with the key of the connection's home) and store the run's attestation,
    in the caller's transaction: the one that records the ``PUBLISHED`` event ``event_id``."""
    try:
        signer = seals.signer_for(connection)
    except errors.LedgerError as exc:
        # Not a LedgerError: the scheduler stops its tick for those (the database is
        # unwell); a key it cannot read holds back this run's publication, not the others.
        raise Unattested(f"run {run_id}: cannot sign its attestation: {exc}") from exc
    body = build(connection, run_id=run_id, event_id=event_id, now=now)
    number = 1 + int(
        connection.execute(
            sa.select(sa.func.count())
            .select_from(schema.run_attestations)
            .where(_a.run_id == run_id)
        ).scalar_one()
    )
    body["number"] = number
    message = encoding(body)
    attestation = Attestation(
        run_id=run_id,
        number=number,
        attested_at=now,
        body=body,
        digest=hashlib.sha256(message).hexdigest(),
        signature=signer.sign(message),
        public_key=signer.public_key,
    )
    connection.execute(
        schema.run_attestations.insert().values(
            run_id=run_id,
            number=number,
            attested_at=now,
            body=body,
            digest=attestation.digest,
            signature=attestation.signature,
            public_key=attestation.public_key,
        )
    )
    return attestation


def latest(connection: Connection, run_id: str) -> Attestation | None:
    """The run's latest attestation (its latest publication's), or None."""
    row = connection.execute(
        sa.select(schema.run_attestations)
        .where(_a.run_id == run_id)
        .order_by(_a.number.desc())
        .limit(1)
    ).first()
    return None if row is None else _from_row(row)


def of_runs(connection: Connection, run_ids: list[str]) -> list[Attestation]:
    """Every attestation of these runs, in the order of ``run_ids``, then by number."""
    found: list[Attestation] = []
    for run_id in run_ids:
        rows = connection.execute(
            sa.select(schema.run_attestations).where(_a.run_id == run_id).order_by(_a.number)
        )
        found.extend(_from_row(row) for row in rows)
    return found


def _from_row(row: sa.Row) -> Attestation:  # type: ignore[type-arg]
    return Attestation(
        run_id=row.run_id,
        number=row.number,
        attested_at=row.attested_at,
        body=dict(row.body),
        digest=row.digest,
        signature=row.signature,
        public_key=row.public_key,
    )


# -- the body ---------------------------------------------------------------------------------


def build(connection: Connection, *, run_id: str, event_id: str, now: datetime) -> JSONObject:
    """The attestation's body, from the ledger as the transaction sees it."""
    r, v, d = schema.runs.c, schema.definition_versions.c, schema.definitions.c
    run = connection.execute(
        sa.select(
            r.id,
            r.definition_version,
            r.parameters,
            r.logical_time,
            r.trigger_kind,
            r.execution_state,
            d.id.label("definition_id"),
            d.name,
            v.content_hash,
        )
        .join(schema.definitions, d.id == r.definition_id)
        .join(
            schema.definition_versions,
            sa.and_(v.definition_id == r.definition_id, v.version == r.definition_version),
        )
        .where(r.id == run_id)
    ).one()
    overrides = _overrides(connection, run_id)
    tasks, checks = _tasks(connection, run_id, overrides)
    return {
        "format": FORMAT,
        "run_id": run_id,
        "published_at": _iso(now),
        "publication_event_id": event_id,
        "definition": {
            "id": run.definition_id,
            "name": run.name,
            "version": run.definition_version,
            "content_hash": run.content_hash,
        },
        "parameters": run.parameters,
        "logical_time": _iso(run.logical_time),
        "trigger_kind": run.trigger_kind,
        "execution_state": run.execution_state,
        "tasks": tasks,
        "upstream_runs": _upstreams(connection, run_id),
        "checks": checks,
        "overrides": overrides,
    }


def _tasks(
    connection: Connection, run_id: str, overrides: list[JSONObject]
) -> tuple[list[JSONValue], list[JSONValue]]:
    """Each instance with the attempt whose output it gave (its current attempt, if it
    succeeded; none for one skipped or never run, nor for one whose state an operator set:
    that one names the override instead); the publication's checks apart."""
    set_by = {str(item["instance_id"]): item for item in overrides}  # the last one wins
    t, a = schema.task_instances.c, schema.attempts.c
    rows = connection.execute(
        sa.select(
            t.id,
            t.task_key,
            t.map_index,
            t.state,
            a.attempt_no,
            a.executor,
            a.external_id,
            a.token_hash,
        )
        .outerjoin(
            schema.attempts,
            sa.and_(a.instance_id == t.id, a.attempt_no == t.epoch),
        )
        .where(t.run_id == run_id)
        .order_by(t.task_key, t.map_index)
    )
    tasks: list[JSONValue] = []
    checks: list[JSONValue] = []
    for row in rows:
        override = set_by.get(row.id)
        overridden = override is not None and override["to_state"] == row.state
        produced = (
            row.state == InstanceState.SUCCESS.value
            and row.attempt_no is not None
            and not overridden
        )
        attempt: JSONValue = (
            {
                "attempt_no": row.attempt_no,
                "engine": row.executor,
                "external_id": row.external_id,
                "token_sha256": row.token_hash,
            }
            if produced
            else None
        )
        entry: JSONObject = {
            "task": row.task_key,
            "map_index": row.map_index,
            "instance_id": row.id,
            "state": row.state,
            "attempt": attempt,
            "override": override["event_id"] if overridden and override else None,
        }
        if str(row.task_key).startswith(CHECK_PREFIX):
            entry["check"] = str(row.task_key).removeprefix(CHECK_PREFIX)
            checks.append(entry)
        else:
            tasks.append(entry)
    return tasks, checks


def _upstreams(connection: Connection, run_id: str) -> list[JSONValue]:
    """The runs whose publication started this one, then those it waited for (the run ids
    its ``dependencies_released`` events name)."""
    u, e = schema.run_upstreams.c, schema.events.c
    found: list[JSONValue] = [
        {"run_id": upstream, "why": "started_by"}
        for upstream in connection.execute(
            sa.select(u.upstream_run_id).where(u.run_id == run_id).order_by(u.upstream_run_id)
        ).scalars()
    ]
    released = connection.execute(
        sa.select(e.evidence)
        .where(e.run_id == run_id, e.subject_id == run_id, e.kind == _RELEASED_KIND)
        .order_by(e.position)
    ).scalars()
    waited: list[str] = []
    for evidence in released:
        listed = evidence.get("dependencies", []) if isinstance(evidence, dict) else []
        for item in listed:
            upstream = item.get("run_id") if isinstance(item, dict) else None
            if isinstance(upstream, str) and upstream not in waited:
                waited.append(upstream)
    found.extend({"run_id": upstream, "why": "waited_for"} for upstream in waited)
    return found


def _overrides(connection: Connection, run_id: str) -> list[JSONObject]:
    """Every override of the run's instances: operator, reason, the state it set."""
    e, t = schema.events.c, schema.task_instances.c
    rows = connection.execute(
        sa.select(
            e.event_id,
            e.instance_id,
            t.task_key,
            e.actor,
            e.evidence,
            e.reason,
            e.to_state,
            e.event_time,
        )
        .join(schema.task_instances, t.id == e.instance_id)
        .where(e.run_id == run_id, e.kind == _OVERRIDE_KIND)
        .order_by(e.position)
    )
    return [
        {
            "event_id": row.event_id,
            "instance_id": row.instance_id,
            "task": row.task_key,
            "operator": _said(row.evidence, "operator") or row.actor,
            "reason": _said(row.evidence, "reason") or row.reason,
            "scope": _said(row.evidence, "scope"),
            "to_state": _said(row.evidence, "to_state") or row.to_state,
            "recorded_reason": row.reason,
            "at": _iso(row.event_time),
        }
        for row in rows
    ]


def _said(evidence: object, key: str) -> str | None:
    """A text the override's evidence holds (the operator's own words, not the sentence the
    platform recorded around them)."""
    value = evidence.get(key) if isinstance(evidence, dict) else None
    return value if isinstance(value, str) else None

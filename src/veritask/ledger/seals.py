"""Signed checkpoints of the event chains (docs/integrity.md).

A ``seal`` checkpoint names, for every subject whose chain moved since the checkpoint before,
its head then (subject, position, hash); a ``purge`` checkpoint names what a retention purge
removed of each subject (its positions, how many events, and the hash of the last one, the
anchor the rest of the chain goes on from). Each checkpoint carries the digest of the one
before it and an Ed25519 signature over its canonical encoding (:func:`encoding`), with the
public key that made it.

A seal covers every event up to ``through_position``, and every one of those was committed
when it was taken: on PostgreSQL a moment's ``SHARE`` lock on ``events`` waits for the
transactions that are appending (new appends wait that moment too) before the highest
position is read; SQLite has one writer. Checkpoints are written one at a time (an
``EXCLUSIVE`` lock on their table), so their chain never forks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from veritask.ledger import chain, dialects, errors, schema, signing

FORMAT: Final = "veritask-checkpoint/1"
SEAL: Final = "seal"
PURGE: Final = "purge"
#: How long a seal waits for the appends in flight before it gives up until the next time.
LOCK_TIMEOUT: Final = "5s"

_c = schema.chain_checkpoints.c


def encoding(
    *,
    kind: str,
    sealed_at: datetime,
    through_position: int,
    previous: str | None,
    body: object,
) -> bytes:
    """What is signed: a JSON object of the format, the kind, the time (as events' times),
    the position covered, the previous checkpoint's digest ("" for the first) and the body;
    keys sorted, no spaces, ASCII."""
    content = {
        "format": FORMAT,
        "kind": kind,
        "sealed_at": sealed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "through_position": through_position,
        "previous": previous or "",
        "body": body,
    }
    return json.dumps(content, sort_keys=True, separators=(",", ":")).encode()


def signer_for(connection: Connection) -> signing.Signer:
    """The key of the home the connection's engine was opened with (``dialects``)."""
    home = connection.get_execution_options().get(dialects.HOME_OPTION)
    signer = signing.load_signer(Path(home) if home else dialects.default_home())
    if signer is None:  # pragma: no cover - load_signer creates it
        raise errors.LedgerError("no signing key")
    return signer


def _append(
    connection: Connection,
    signer: signing.Signer,
    *,
    kind: str,
    now: datetime,
    through: int | None,
    body: dict[str, object],
) -> int:
    """Sign and insert one checkpoint after the latest; the caller holds the table's lock."""
    last = connection.execute(
        sa.select(_c.digest, _c.through_position).order_by(_c.id.desc()).limit(1)
    ).first()
    previous = None if last is None else str(last.digest)
    covered = through if through is not None else (0 if last is None else last.through_position)
    message = encoding(
        kind=kind, sealed_at=now, through_position=covered, previous=previous, body=body
    )
    inserted = connection.execute(
        schema.chain_checkpoints.insert().returning(_c.id),
        {
            "kind": kind,
            "sealed_at": now,
            "through_position": covered,
            "previous": previous,
            "body": body,
            "digest": hashlib.sha256(message).hexdigest(),
            "signature": signer.sign(message),
            "public_key": signer.public_key,
        },
    ).scalar_one()
    return int(inserted)


def _lock_checkpoints(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("LOCK TABLE chain_checkpoints IN EXCLUSIVE MODE")


def _committed_through(engine: Engine) -> int:
    """The highest position below which every event is committed (see the module's doc)."""
    e = schema.events.c
    if engine.dialect.name != "postgresql":
        with dialects.read_transaction(engine) as connection:
            return int(connection.execute(sa.select(sa.func.max(e.position))).scalar() or 0)
    with engine.begin() as connection:
        connection.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        connection.exec_driver_sql("LOCK TABLE events IN SHARE MODE")
        return int(connection.execute(sa.select(sa.func.max(e.position))).scalar() or 0)


def seal(engine: Engine, signer: signing.Signer, *, now: datetime) -> int | None:
    """Seal the heads of the chains that moved since the last checkpoint; the new
    checkpoint's id, or None when nothing moved."""
    through = _committed_through(engine)
    e = schema.events.c
    with engine.begin() as connection:
        _lock_checkpoints(connection)
        low = connection.execute(sa.select(sa.func.max(_c.through_position))).scalar() or 0
        if through <= low:
            return None
        last = (
            sa.select(sa.func.max(e.position).label("position"))
            .where(e.position > low, e.position <= through)
            .group_by(e.subject_type, e.subject_id)
            .subquery()
        )
        rows = connection.execute(
            sa.select(e.subject_type, e.subject_id, e.position, e.chain_hash)
            .join(last, e.position == last.c.position)
            .order_by(e.subject_type, e.subject_id)
        ).all()
        heads: list[object] = [
            [row.subject_type, row.subject_id, row.position, row.chain_hash] for row in rows
        ]
        return _append(
            connection, signer, kind=SEAL, now=now, through=through, body={"heads": heads}
        )


def record_purge(
    connection: Connection, conditions: Collection[sa.ColumnElement[bool]], *, now: datetime
) -> int | None:
    """Before the purge deletes the events matching any of ``conditions``, in its
    transaction: a signed checkpoint of what goes, per subject; None when nothing matches."""
    e = schema.events.c
    removed: list[object] = []
    for condition in conditions:
        ranges = (
            sa.select(
                e.subject_type,
                e.subject_id,
                sa.func.min(e.position).label("first"),
                sa.func.max(e.position).label("last"),
                sa.func.count().label("count"),
            )
            .where(condition)
            .group_by(e.subject_type, e.subject_id)
            .subquery()
        )
        rows = connection.execute(
            sa.select(ranges, e.chain_hash)
            .join(schema.events, e.position == ranges.c["last"])
            .order_by(ranges.c.subject_type, ranges.c.subject_id)
        ).all()
        removed.extend(
            [r.subject_type, r.subject_id, r.first, r.last, r.count, r.chain_hash] for r in rows
        )
    if not removed:
        return None
    signer = signer_for(connection)
    _lock_checkpoints(connection)
    return _append(connection, signer, kind=PURGE, now=now, through=None, body={"removed": removed})


# -- verification ---------------------------------------------------------------------------


@dataclass
class Audit:
    """What the chains and checkpoints showed."""

    checkpoints: int = 0
    events: int = 0
    subjects: int = 0
    breaks: list[chain.Break] = field(default_factory=list)
    #: Checkpoints that do not hold: changed, removed, forged, or signed by an unknown key.
    problems: list[str] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.breaks and not self.problems


@dataclass(frozen=True)
class _Sealed:
    checkpoint: int
    subject: chain.Subject
    position: int
    head: str


def audit(connection: Connection, *, trusted: Collection[str]) -> Audit:
    """Check every checkpoint (its digest, its link to the one before, its signature, its
    key among ``trusted`` public keys, hex), then every chain, then that each sealed head is
    still in its chain unless a later purge removed it."""
    found = Audit()
    sealed: list[_Sealed] = []
    anchors: dict[chain.Subject, list[chain.Anchor]] = {}
    purged_at: dict[chain.Subject, list[tuple[int, int]]] = {}
    previous: str | None = None
    for row in connection.execute(sa.select(schema.chain_checkpoints).order_by(_c.id)):
        found.checkpoints += 1
        if _checkpoint_holds(row, previous, trusted, found):
            for head in _items(row.body, "heads"):
                subject = (str(head[0]), str(head[1]))
                sealed.append(_Sealed(row.id, subject, _int(head[2]), str(head[3])))
            for gone in _items(row.body, "removed"):
                subject = (str(gone[0]), str(gone[1]))
                anchors.setdefault(subject, []).append(chain.Anchor(_int(gone[3]), str(gone[5])))
                purged_at.setdefault(subject, []).append((row.id, _int(gone[3])))
        previous = row.digest
    if found.checkpoints and not trusted:
        found.problems.append(
            "no trusted public key to check the checkpoints against: run where the signing "
            f"key is ({signing.KEY_FILE_ENV} or VERITASK_HOME), or give --public-key"
        )
    wanted = {(s.subject, s.head) for s in sealed}
    chains = chain.walk(connection, wanted=wanted, anchors=anchors)
    found.events, found.subjects = chains.events, len(chains.walks)
    broken = {(b.subject_type, b.subject_id) for b in chains.breaks}
    found.breaks.extend(chains.breaks)
    for by_row in chain.check_rows(connection, chains):
        if (by_row.subject_type, by_row.subject_id) not in broken:
            broken.add((by_row.subject_type, by_row.subject_id))
            found.breaks.append(by_row)
    for seal_of in sealed:
        if (seal_of.subject, seal_of.head) in chains.found or seal_of.subject in broken:
            continue
        later_purge = any(
            checkpoint > seal_of.checkpoint and last >= seal_of.position
            for checkpoint, last in purged_at.get(seal_of.subject, ())
        )
        if later_purge:
            continue
        broken.add(seal_of.subject)
        found.breaks.append(
            chain.Break(
                *seal_of.subject,
                None,
                seal_of.position,
                f"checkpoint {seal_of.checkpoint} sealed its head at this position and the "
                "chain no longer holds it (events deleted or changed after the seal)",
            )
        )
    found.breaks.sort(key=lambda b: (b.position is None, b.position or 0, b.subject_id))
    return found


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise errors.LedgerError(f"a checkpoint's body holds {value!r} where a position goes")
    return value


def _items(body: object, key: str) -> list[list[object]]:
    if not isinstance(body, Mapping):
        return []
    items = body.get(key, [])
    return [item for item in items if isinstance(item, list)] if isinstance(items, list) else []


def _checkpoint_holds(
    row: sa.Row,  # type: ignore[type-arg]
    previous: str | None,
    trusted: Collection[str],
    found: Audit,
) -> bool:
    name = f"checkpoint {row.id} ({row.kind}, {row.sealed_at.isoformat()})"
    message = encoding(
        kind=row.kind,
        sealed_at=row.sealed_at,
        through_position=row.through_position,
        previous=row.previous,
        body=row.body,
    )
    found.keys.add(row.public_key)
    problems = []
    if hashlib.sha256(message).hexdigest() != row.digest:
        problems.append("its content is not what its digest says (changed after it was signed)")
    if (row.previous or None) != previous:
        problems.append("it does not follow the checkpoint before it (one removed or changed)")
    if not signing.verify(row.public_key, row.signature, message):
        problems.append("its signature does not hold (forged or changed)")
    elif trusted and row.public_key not in trusted:
        problems.append(f"it is signed by key {signing.key_id(row.public_key)}, not a trusted one")
    found.problems.extend(f"{name}: {problem}" for problem in problems)
    return not problems

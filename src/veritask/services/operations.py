"""Operations on the data itself — verify and repair, export, replay, the retention purge —
each recorded as a row of ``operations`` (who, when, what was asked, what was done).

These work on the database directly, not through the API: they must work when the API is
down, and a repair or a replay is exactly what one does when something is wrong.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

from veritask.core import refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.ledger import (
    attestations,
    audit,
    bundles,
    dialects,
    operations_log,
    queries,
    retention,
    seals,
    signing,
)
from veritask.ledger.vocabulary import OperationKind
from veritask.services import logs, reading, run_checks
from veritask.services.definitions import ACTIVE_RUN_STATES
from veritask.services.errors import Conflict, NotFound
from veritask.services.platform import Platform

log = logging.getLogger(__name__)

#: Runs per purge transaction: bounded work and locks.
_PURGE_CHUNK: Final = 200


@dataclass
class Recorded:
    """The result an operation fills in while it runs; written when it ends."""

    result: JSONObject = field(default_factory=dict)


@contextmanager
def recorded(
    platform: Platform, kind: OperationKind, *, actor: str, dry_run: bool, parameters: JSONObject
) -> Iterator[Recorded]:
    """Record the operation's start, let it run, record its result (or its error)."""
    with platform.engine.begin() as connection:
        operation_id = operations_log.record_start(
            connection,
            kind=kind.value,
            actor=actor,
            started_at=platform.now(),
            dry_run=dry_run,
            parameters=parameters,
        )
    found = Recorded()
    try:
        yield found
    except Exception as exc:
        found.result = {**found.result, "error": str(exc)}
        raise
    finally:
        with platform.engine.begin() as connection:
            operations_log.record_end(
                connection, operation_id, finished_at=platform.now(), result=found.result
            )


def recent_operations(platform: Platform, *, limit: int = 50) -> list[JSONObject]:
    """The newest operations, as plain JSON (for people and ``--json``)."""
    with dialects.read_transaction(platform.engine) as connection:
        rows = operations_log.newest(connection, limit=limit)
    return [
        {
            "id": row.id,
            "kind": row.kind,
            "actor": row.actor,
            "started_at": row.started_at.isoformat(),
            "finished_at": row.finished_at.isoformat() if row.finished_at else None,
            "dry_run": row.dry_run,
            "parameters": row.parameters,
            "result": row.result,
        }
        for row in rows
    ]


# -- verify, export, replay --------------------------------------------------------------------


def verify(
    platform: Platform,
    *,
    repair: bool,
    actor: str,
    public_keys: Sequence[str] = (),
    seal: bool = False,
) -> audit.Report:
    """Check every event's hash chain and every signed checkpoint; re-fold every instance,
    compare with its snapshot; follow every run's events, compare with its stored states and
    with what its instances imply; check the invariants at rest.

    Checkpoints are trusted when signed by this host's key (if it has one) or one of
    ``public_keys`` (hex). With ``seal``, the chains' heads are sealed first (this host's key,
    made if it has none), so that what is verified now is also what a later verify holds to.

    With ``repair``, snapshots (of instances and runs) that differ are rebuilt from their
    events, then each finished run whose instances imply another state moves there by a
    recorded run event (a recorded operation); then everything is verified again: the
    report returned is that second look.
    """
    if seal:
        seal_chains(platform)
    trusted = trusted_keys(platform, public_keys)
    found, disagreeing = _verify(platform, repair=False, trusted=trusted)
    if not repair or not (found.mismatches or disagreeing):
        return found
    parameters: JSONObject = {"mismatches": len(found.mismatches), "disagreements": disagreeing}
    with recorded(
        platform, OperationKind.REPAIR, actor=actor, dry_run=False, parameters=parameters
    ) as operation:
        repaired, _ = _verify(platform, repair=True, trusted=trusted)
        # After the snapshots: a run follows its instances as their events say they are.
        repaired.repaired += run_checks.follow_instances(platform, actor=actor)
        operation.result = {"repaired": repaired.repaired}
    after, _ = _verify(platform, repair=False, trusted=trusted)
    after.repaired = repaired.repaired
    return after


def seal_chains(platform: Platform) -> int | None:
    """Seal the heads of the chains that moved since the last checkpoint, signed with this
    host's key (made if it has none); the checkpoint's id, or None if nothing moved."""
    signer = signing.load_signer(platform.home)
    if signer is None:  # pragma: no cover - load_signer makes one
        return None
    return seals.seal(platform.engine, signer, now=platform.now())


def trusted_keys(platform: Platform, public_keys: Sequence[str] = ()) -> set[str]:
    """This host's public key, if it has a key, and the ones given."""
    signer = signing.load_signer(platform.home, create=False)
    return {*public_keys, *([] if signer is None else [signer.public_key])}


def _verify(platform: Platform, *, repair: bool, trusted: set[str]) -> tuple[audit.Report, int]:
    """The report, and how many finished runs disagree with their instances."""
    report = audit.verify(
        platform.ledger,
        repair=repair,
        publication_start=run_checks.publication_start(platform),
        trusted_keys=trusted,
    )
    disagreeing = run_checks.disagreements_with_instances(platform)
    report.violations.extend(disagreeing)
    return report, len(disagreeing)


def export_run(platform: Platform, run_id: str) -> Iterator[JSONObject]:
    """A run's full history as export lines (``NotFound`` if there is no such run)."""
    with dialects.read_transaction(platform.engine) as connection:
        if queries.get_run(connection, run_id) is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
    return audit.export_run(platform.ledger, run_id)


def export_definition(platform: Platform, name: str) -> Iterator[JSONObject]:
    """A definition's full history (every version and run) as export lines."""
    with dialects.read_transaction(platform.engine) as connection:
        row = reading.definition_named(connection, name)
    return audit.export_definition(platform.ledger, row.id)


def export_signed(platform: Platform, lines: Iterable[JSONObject]) -> str:
    """A signed bundle of an export (``export_run``'s or ``export_definition``'s lines):
    the lines, every attestation of the exported runs, and the manifest signed with this
    host's key (made if it has none); see ledger/bundles.py."""
    exported = list(lines)
    signer = signing.load_signer(platform.home)
    if signer is None:  # pragma: no cover - load_signer makes one
        raise NotFound("no signing key")
    run_ids = [
        str(row["id"])
        for line in exported
        if line.get("table") == "runs" and isinstance(row := line.get("row"), dict)
    ]
    with dialects.read_transaction(platform.engine) as connection:
        attested = [item.as_json() for item in attestations.of_runs(connection, run_ids)]
    return bundles.sign(exported, attested, signer, now=platform.now())


def replay(platform: Platform, lines: Iterable[JSONObject], *, actor: str) -> list[str]:
    """Load an export into this empty database and rebuild every snapshot from its events.

    ``Conflict`` if the database already holds definitions: a replay is the proof that the
    events alone rebuild the state, so it starts from nothing.
    """
    with dialects.read_transaction(platform.engine) as connection:
        if queries.count_definitions(connection):
            raise Conflict(refusals.NOT_EMPTY.format())
    with recorded(
        platform, OperationKind.REPLAY, actor=actor, dry_run=False, parameters={}
    ) as operation:
        replayed = audit.replay(platform.ledger, lines)
        operation.result = {"instances": len(replayed)}
    return replayed


# -- retention ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PurgeReport:
    """What the purge removed (or, on a dry run, would remove)."""

    dry_run: bool
    cutoff: datetime
    runs: int
    events: int
    rejected_events: int
    log_files: int
    log_bytes: int

    def as_json(self) -> JSONObject:
        return {
            "dry_run": self.dry_run,
            "cutoff": self.cutoff.isoformat(),
            "runs": self.runs,
            "events": self.events,
            "rejected_events": self.rejected_events,
            "log_files": self.log_files,
            "log_bytes": self.log_bytes,
        }


def purge(
    platform: Platform,
    *,
    older_than: timedelta,
    dry_run: bool,
    actor: str,
    history: bool = True,
    logs: bool = True,
    live_definitions: bool = False,
) -> PurgeReport:
    """The retention purge (docs/operations.md), each part a recorded operation.

    ``history``: the runs of deleted and purged definitions whose last event is older than
    ``older_than`` lose their events and their snapshot rows together (so that ``verify``
    still holds: no snapshot outlives its events); with ``live_definitions``, the finished
    runs of the other definitions too, but each one's newest run (what bounds the ledger).
    ``logs``: the logs of attempts that ended before the cutoff are removed from
    ``VERITASK_HOME``.
    """
    cutoff = platform.now() - older_than
    runs = events = rejected = files = size = 0
    parameters: JSONObject = {"older_than_seconds": older_than.total_seconds()}
    if live_definitions:
        parameters["live_definitions"] = True
    if history:
        with recorded(
            platform,
            OperationKind.PURGE_EVENTS,
            actor=actor,
            dry_run=dry_run,
            parameters=parameters,
        ) as operation:
            runs, events, rejected = _purge_history(
                platform, cutoff, dry_run=dry_run, live_definitions=live_definitions
            )
            operation.result = {"runs": runs, "events": events, "rejected_events": rejected}
    if logs:
        with recorded(
            platform, OperationKind.REMOVE_LOGS, actor=actor, dry_run=dry_run, parameters=parameters
        ) as operation:
            files, size = _remove_logs(platform, cutoff, dry_run=dry_run)
            operation.result = {"files": files, "bytes": size}
    return PurgeReport(dry_run, cutoff, runs, events, rejected, files, size)


def last_purge_at(platform: Platform, *, actor: str) -> datetime | None:
    """When ``actor`` last started a history purge (housekeeping runs one a day at most)."""
    with dialects.read_transaction(platform.engine) as connection:
        return operations_log.last_started_at(
            connection, kind=OperationKind.PURGE_EVENTS.value, actor=actor
        )


def _purgeable_runs(platform: Platform, cutoff: datetime, *, live_definitions: bool) -> list[str]:
    with dialects.read_transaction(platform.engine) as connection:
        return retention.purgeable_runs(
            connection,
            cutoff=cutoff,
            active_states=[s.value for s in ACTIVE_RUN_STATES],
            live_definitions=live_definitions,
        )


def _purge_history(
    platform: Platform, cutoff: datetime, *, dry_run: bool, live_definitions: bool
) -> tuple[int, int, int]:
    run_ids = _purgeable_runs(platform, cutoff, live_definitions=live_definitions)
    events = rejected = 0
    for start in range(0, len(run_ids), _PURGE_CHUNK):
        chunk = run_ids[start : start + _PURGE_CHUNK]
        if dry_run:
            with dialects.read_transaction(platform.engine) as connection:
                counted = retention.count_events_of_runs(connection, chunk)
            events += counted.events
            rejected += counted.rejected_events
            continue
        with platform.engine.begin() as connection:
            result = retention.purge_events(connection, run_ids=chunk, now=platform.now())
            events += result.events
            rejected += result.rejected_events
            retention.delete_run_snapshots(connection, chunk)
    rejected += _purge_orphaned_rejections(platform, cutoff, dry_run=dry_run)
    return len(run_ids), events, rejected


def _purge_orphaned_rejections(platform: Platform, cutoff: datetime, *, dry_run: bool) -> int:
    """Refused events older than the cutoff whose run is gone, or that never had one."""
    if not dry_run:
        with platform.engine.begin() as connection:
            return retention.purge_orphaned_rejections(connection, observed_before=cutoff)
    with dialects.read_transaction(platform.engine) as connection:
        return retention.count_orphaned_rejections(connection, observed_before=cutoff)


def _remove_logs(platform: Platform, cutoff: datetime, *, dry_run: bool) -> tuple[int, int]:
    with dialects.read_transaction(platform.engine) as connection:
        ended = retention.logged_attempts_ended_before(connection, cutoff)
    files = size = 0
    for instance_id, attempt_no in ended:
        # The attempt's own log, derived from its identity: a location a report named is
        # data, never a file to delete.
        location = logs.own_log_file(platform, instance_id, attempt_no)
        if location is None:
            continue
        path = Path(location)
        files += 1
        size += path.stat().st_size
        if not dry_run:
            try:
                path.unlink()
            except OSError as exc:
                log.warning("could not remove %s: %s", path, exc)
    return files, size


def as_json_lines(lines: Iterable[JSONObject]) -> Iterator[str]:
    """Export lines as JSON Lines text."""
    for line in lines:
        yield json.dumps(line, sort_keys=True, default=_jsonable) + "\n"


def _jsonable(value: object) -> JSONValue:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")

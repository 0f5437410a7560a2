"""Proof that the events are the truth: verify snapshots, export histories, replay them.

``verify`` re-folds every instance's recorded events with the pure core and compares the
result with the stored snapshot and attempt rows, follows every run's run-level events to
the states they leave it in (ledger/run_audit.py), and every definition's own events to its
versions, current version and lifecycle (ledger/definition_audit.py); ``repair`` rewrites
what differs (with compare-and-set). It also checks the invariants that can be checked at
rest. ``export`` writes a run's whole history as JSON Lines; ``replay`` rebuilds every
snapshot from such an export in an empty database.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core import codec
from veritask.core.fold import InstanceSnapshot, fold
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import TaskPolicy
from veritask.core.states import (
    ACTIVE_ATTEMPT_STATES,
    TERMINAL_INSTANCE_STATES,
    RunExecutionState,
)
from veritask.ledger import (
    attempt_reports,
    chain,
    definition_audit,
    dialects,
    run_audit,
    schema,
    seals,
    statements,
)
from veritask.ledger.ledger import Ledger

FORMAT = "veritask-export/1"


@dataclass
class Report:
    """What ``verify`` found; ``ok`` when every snapshot and invariant held."""

    instances: int = 0
    runs: int = 0
    definitions: int = 0
    mismatches: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    repaired: int = 0
    #: The hash chains and their signed checkpoints (ledger/seals.py); never repaired.
    chains: seals.Audit = field(default_factory=seals.Audit)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.violations and self.chains.ok


def verify(
    ledger: Ledger,
    *,
    repair: bool = False,
    publication_start: run_audit.PublicationStart | None = None,
    trusted_keys: Collection[str] = (),
) -> Report:
    """Check every event's hash chain and every signed checkpoint (against ``trusted_keys``,
    hex public keys); re-fold every instance and compare; follow every run's events and
    compare; check the invariants at rest.

    ``publication_start`` says where a run of (definition id, version) starts its publication
    (no event records it); without it, a run no publication event moved may be in either.
    """
    report = Report()
    # One snapshot: the heads in the subjects' rows and the events they point at are read as
    # of the same moment, while schedulers go on appending.
    with dialects.snapshot_transaction(ledger.engine) as connection:
        report.chains = seals.audit(connection, trusted=trusted_keys)
    t = schema.task_instances.c
    with dialects.read_transaction(ledger.engine) as connection:
        rows = connection.execute(
            sa.select(t.id, t.state, t.epoch, t.retry_at, t.fold, t.policy, t.version)
        ).all()
    for row in rows:
        report.instances += 1
        policy = TaskPolicy.from_json(row.policy)
        expected = fold(row.id, ledger.recorded_events(row.id), policy)
        problems = _compare(ledger, row, expected, policy)
        if problems:
            report.mismatches.extend(f"instance {row.id}: {p}" for p in problems)
            if repair:
                _rewrite(ledger, row.id, row.version, expected, policy)
                report.repaired += 1
    _verify_runs(ledger, report, repair=repair, publication_start=publication_start)
    _verify_definitions(ledger, report, repair=repair)
    report.violations.extend(_invariants(ledger))
    return report


def _verify_definitions(ledger: Ledger, report: Report, *, repair: bool) -> None:
    with dialects.read_transaction(ledger.engine) as connection:
        histories = definition_audit.definition_histories(connection)
    for history in histories:
        check = definition_audit.check_definition(history)
        if check is None:
            continue
        report.definitions += 1
        subject = f"definition {history.name} ({history.definition_id})"
        report.mismatches.extend(f"{subject}: {p}" for p in check.problems)
        report.violations.extend(f"{subject}: {p}" for p in check.broken_links)
        values = check.restoring(history)
        if repair and values:
            with ledger.engine.begin() as connection:
                if definition_audit.restore_definition(
                    connection, history.definition_id, expected=history, values=values
                ):
                    report.repaired += 1


def _verify_runs(
    ledger: Ledger,
    report: Report,
    *,
    repair: bool,
    publication_start: run_audit.PublicationStart | None,
) -> None:
    with dialects.read_transaction(ledger.engine) as connection:
        histories = run_audit.run_histories(connection)
    for history in histories:
        report.runs += 1
        start = (
            None
            if publication_start is None
            else publication_start(history.definition_id, history.definition_version)
        )
        check = run_audit.check_run(history, start)
        report.mismatches.extend(f"run {history.run_id}: {p}" for p in check.problems)
        report.violations.extend(f"run {history.run_id}: {p}" for p in check.broken_links)
        values = check.restoring(history)
        if repair and values:
            with ledger.engine.begin() as connection:
                if run_audit.restore_run_states(
                    connection, history.run_id, version=history.version, values=values
                ):
                    report.repaired += 1


def _compare(ledger: Ledger, row: Any, expected: InstanceSnapshot, policy: TaskPolicy) -> list[str]:
    problems = []
    if row.state != expected.state.value:
        problems.append(f"state is {row.state}, its events say {expected.state}")
    if row.epoch != expected.epoch:
        problems.append(f"epoch is {row.epoch}, its events say {expected.epoch}")
    if row.retry_at != expected.retry_at:
        problems.append(f"retry_at is {row.retry_at}, its events say {expected.retry_at}")
    # Compared as facts, not as JSON: a snapshot in an older format says the same thing.
    try:
        stored_facts = None if row.fold is None else codec.facts_from_json(row.fold)
    except ValueError as exc:
        problems.append(f"its stored facts cannot be read: {exc}")
    else:
        if stored_facts != expected.facts:
            problems.append("its stored facts differ from the fold of its events")
    a = schema.attempts.c
    with dialects.read_transaction(ledger.engine) as connection:
        stored = {
            r.attempt_no: r
            for r in connection.execute(
                sa.select(a.attempt_no, a.state, a.external_id, a.exit_code).where(
                    a.instance_id == row.id
                )
            )
        }
    for view in expected.attempts:
        found = stored.get(view.attempt_no)
        if found is None:
            problems.append(f"attempt {view.attempt_no} has no row")
        elif (found.state, found.external_id, found.exit_code) != (
            view.state.value,
            view.external_id,
            view.exit_code,
        ):
            problems.append(
                f"attempt {view.attempt_no} row says {found.state}, its events say {view.state}"
            )
    return problems


def _rewrite(
    ledger: Ledger, instance_id: str, version: int, snapshot: InstanceSnapshot, policy: TaskPolicy
) -> None:
    t, a = schema.task_instances.c, schema.attempts
    with ledger.engine.begin() as connection:
        connection.execute(
            schema.task_instances.update()
            .where(t.id == instance_id, t.version == version)
            .values(
                state=snapshot.state.value,
                epoch=snapshot.epoch,
                retry_at=snapshot.retry_at,
                fold=codec.facts_to_json(snapshot.facts),
                reason=snapshot.reason,
                version=t.version + 1,
            )
        )
        connection.execute(a.delete().where(a.c.instance_id == instance_id))
        for view in snapshot.attempts:
            connection.execute(a.insert(), statements.attempt_row(instance_id, view, policy))
        attempt_reports.record_again(connection, instance_id)


def _invariants(ledger: Ledger) -> list[str]:
    a, r, t = schema.attempts.c, schema.runs.c, schema.task_instances.c
    active = [s.value for s in ACTIVE_ATTEMPT_STATES]
    found = []
    with dialects.read_transaction(ledger.engine) as connection:
        for instance_id, count in connection.execute(
            sa.select(a.instance_id, sa.func.count())
            .where(a.state.in_(active))
            .group_by(a.instance_id)
            .having(sa.func.count() > 1)
        ):
            found.append(f"instance {instance_id}: {count} attempts are active at once")
        for instance_id, attempt_no in connection.execute(
            sa.select(a.instance_id, a.attempt_no).where(
                a.state == "RUNNING", a.lease_expires_at.is_(None)
            )
        ):
            found.append(f"instance {instance_id}: RUNNING attempt {attempt_no} has no lease")
        terminal = [state.value for state in TERMINAL_INSTANCE_STATES]
        unfinished = sa.select(t.id).where(t.run_id == r.id, t.state.not_in(terminal)).exists()
        for run_id, reason in connection.execute(
            sa.select(r.id, r.execution_reason).where(
                r.execution_state == RunExecutionState.RUNNING.value, ~unfinished
            )
        ):
            if not reason:
                found.append(f"run {run_id}: RUNNING with no active instance and no reason")
    return found


# -- export and replay --------------------------------------------------------------------


def export_run(ledger: Ledger, run_id: str) -> Iterator[JSONObject]:
    """The run's whole history as JSON-ready lines: its rows first, then every event."""
    d, v, r = schema.definitions, schema.definition_versions, schema.runs
    with dialects.read_transaction(ledger.engine) as connection:
        run = connection.execute(sa.select(r).where(r.c.id == run_id)).mappings().one()
        definition = (
            connection.execute(sa.select(d).where(d.c.id == run["definition_id"])).mappings().one()
        )
        version = (
            connection.execute(
                sa.select(v).where(
                    v.c.definition_id == run["definition_id"],
                    v.c.version == run["definition_version"],
                )
            )
            .mappings()
            .one()
        )
        body = list(_run_lines(connection, run))
    yield {"format": FORMAT, "run_id": run_id}
    yield {"table": "definitions", "row": _plain(definition, drop=("current_version",))}
    yield {"table": "definition_versions", "row": _plain(version)}
    yield from body


def export_definition(ledger: Ledger, definition_id: str) -> Iterator[JSONObject]:
    """A definition's whole history: every version, its own lifecycle events, then every run
    (oldest first) as :func:`export_run` writes it, without repeating the definition."""
    d, v, r, e = (
        schema.definitions,
        schema.definition_versions,
        schema.runs,
        schema.events,
    )
    with dialects.read_transaction(ledger.engine) as connection:
        definition = (
            connection.execute(sa.select(d).where(d.c.id == definition_id)).mappings().one()
        )
        versions = (
            connection.execute(
                sa.select(v).where(v.c.definition_id == definition_id).order_by(v.c.version)
            )
            .mappings()
            .all()
        )
        own_events = (
            connection.execute(
                sa.select(e)
                .where(
                    sa.text(schema.DEFINITION_EVENT_PREDICATE),
                    e.c.subject_id == definition_id,
                )
                .order_by(e.c.position)
            )
            .mappings()
            .all()
        )
        runs = (
            connection.execute(
                sa.select(r)
                .where(r.c.definition_id == definition_id)
                .order_by(r.c.created_at, r.c.id)
            )
            .mappings()
            .all()
        )
        body = [line for run in runs for line in _run_lines(connection, run)]
    yield {"format": FORMAT, "definition_id": definition_id}
    yield {"table": "definitions", "row": _plain(definition)}
    for version in versions:
        yield {"table": "definition_versions", "row": _plain(version)}
    for event in own_events:
        yield {"table": "events", "row": _plain(event, drop=("position",))}
    yield from body


def _run_lines(connection: Connection, run: Any) -> Iterator[JSONObject]:
    t, e = schema.task_instances, schema.events
    instances = (
        connection.execute(
            sa.select(t.c.id, t.c.run_id, t.c.task_key, t.c.map_index, t.c.policy).where(
                t.c.run_id == run["id"]
            )
        )
        .mappings()
        .all()
    )
    events = (
        connection.execute(sa.select(e).where(e.c.run_id == run["id"]).order_by(e.c.position))
        .mappings()
        .all()
    )
    yield {"table": "runs", "row": _plain(run, drop=("fold",))}
    for instance in instances:
        yield {"table": "task_instances", "row": _plain(instance)}
    for event in events:
        yield {"table": "events", "row": _plain(event, drop=("position",))}


def replay(ledger: Ledger, lines: Iterable[JSONObject]) -> list[str]:
    """Load an export into this (empty) database and rebuild every snapshot from the events.

    Returns the replayed instance ids. Snapshot columns are never taken from the export: the
    instances' states come from folding their events, the run's from its recorded changes.
    """
    rows: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if "manifest" in line or "attestation" in line:
            continue  # a signed bundle's (ledger/bundles.py): not rows
        if "format" in line:
            if line["format"] != FORMAT:
                raise ValueError(f"format: expected {FORMAT}, got {line['format']!r}")
            continue
        table, row = str(line["table"]), line["row"]
        if not isinstance(row, dict):
            raise ValueError(f"row of {table}: expected an object")
        rows.setdefault(table, []).append(_typed(schema.metadata.tables[table], row))
    with ledger.engine.begin() as connection:
        for table in ("definitions", "definition_versions", "runs"):
            for row in rows.get(table, []):
                connection.execute(schema.metadata.tables[table].insert().values(**row))
        for row in rows.get("task_instances", []):
            connection.execute(
                schema.task_instances.insert().values(**row, state="CREATED", epoch=0, version=0)
            )
        for row in rows.get("events", []):
            connection.execute(schema.events.insert().values(**row))
        # The rows came before their events: each subject's head is its last replayed event.
        chain.restore_heads(connection)
        _replay_runs(connection, rows.get("runs", []), rows.get("events", []))
    replayed = []
    for row in rows.get("task_instances", []):
        instance_id = str(row["id"])
        stored_policy = row["policy"]
        if not isinstance(stored_policy, dict):
            raise ValueError(f"task_instances {instance_id}: policy must be an object")
        policy = TaskPolicy.from_json(stored_policy)
        snapshot = fold(instance_id, ledger.recorded_events(instance_id), policy)
        _rewrite(ledger, instance_id, 0, snapshot, policy)
        replayed.append(instance_id)
    return replayed


def _replay_runs(
    connection: Connection, runs: list[dict[str, Any]], events: list[dict[str, Any]]
) -> None:
    for run in runs:
        execution, publication = None, None
        for event in events:
            if event["subject_id"] != run["id"] or event["subject_type"] != "run":
                continue
            if event["kind"] in ("run_created", "run_state_changed"):
                execution = (event["to_state"], event["reason"])
            elif event["kind"] == "publication_changed":
                publication = (event["to_state"], event["reason"])
        values: dict[str, Any] = {}
        if execution is not None:
            values.update(execution_state=execution[0], execution_reason=execution[1])
        if publication is not None:
            values.update(publication_state=publication[0], publication_reason=publication[1])
        if values:
            connection.execute(
                schema.runs.update().where(schema.runs.c.id == run["id"]).values(**values)
            )


def _plain(row: Any, drop: tuple[str, ...] = ()) -> JSONObject:
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in dict(row).items()
        if key not in drop
    }


def _typed(table: sa.Table, row: dict[str, Any]) -> dict[str, Any]:
    """Turn the ISO strings of datetime columns back into datetimes."""
    typed = dict(row)
    for column in table.columns:
        value = typed.get(column.name)
        if isinstance(value, str) and isinstance(column.type, sa.types.TypeDecorator):
            typed[column.name] = datetime.fromisoformat(value)
    return typed

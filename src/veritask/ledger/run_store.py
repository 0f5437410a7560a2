"""Runs in the ledger: created with their instances, their state moved with compare-and-set.

A run's execution state is derived from its leaves (docs/definitions.md); each change the
scheduler derives is recorded as a run event (``run_state_changed``) with the reason, so the
run's history explains itself like an instance's does. Definition-level events (applied,
enabled, deleted) go through :func:`record_subject_event` too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import TaskPolicy
from veritask.core.states import (
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.ledger import attestations, chain, errors, runs, schema
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import EventOutcome, SubjectType

NewId = Callable[[], str]


@dataclass(frozen=True)
class NewRun:
    """What a trigger asks for."""

    definition_id: str
    definition_version: int
    idempotency_key: str
    trigger_kind: TriggerKind
    tasks: Sequence[tuple[str, TaskPolicy]]
    parameters: Mapping[str, JSONValue]
    execution_state: RunExecutionState
    execution_reason: str
    publication_state: PublicationState
    actor: str = "scheduler"
    logical_time: datetime | None = None
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None
    rerun_of: str | None = None
    upstream_run_ids: tuple[str, ...] = ()
    """The runs whose publication started this one (``TriggerKind.PUBLISHED``)."""
    queued_behind: tuple[str, ...] = ()
    """The active runs a QUEUED run waits behind (its release names them)."""
    logical_time_given: bool = False
    """A run by hand whose caller chose its logical time (it waits for that time's
    upstream publication, not the latest one)."""


class InstanceBrief(NamedTuple):
    """The columns the scheduler needs to move a run on, without the fold.

    A tuple, not a frozen dataclass: a scheduler reads every instance of a run each time it
    moves it, and building a tuple costs a tenth of a frozen dataclass's ``__init__``.
    """

    id: str
    task_key: str
    map_index: int
    state: InstanceState
    epoch: int
    retry_at: datetime | None
    version: int


def create_run(ledger: Ledger, request: NewRun, *, new_id: NewId) -> tuple[str, bool]:
    """Create the run, its instances and their creation events in one transaction.

    Idempotent on the key: a second trigger with the same key returns the existing run and
    creates nothing (docs/state-machine.md, 'Runs, task instances and attempts').
    """
    now = ledger.clock()
    with ledger.engine.begin() as connection:
        run_id, created = runs.create_run(
            connection,
            idempotency_key=request.idempotency_key,
            definition_id=request.definition_id,
            definition_version=request.definition_version,
            trigger_kind=request.trigger_kind,
            execution_state=request.execution_state,
            execution_reason=request.execution_reason,
            publication_state=request.publication_state,
            created_at=now,
            logical_time=request.logical_time,
            data_interval_start=request.data_interval_start,
            data_interval_end=request.data_interval_end,
            parameters=request.parameters,
            rerun_of=request.rerun_of,
        )
        if not created:
            return run_id, False
        if request.upstream_run_ids:
            connection.execute(
                schema.run_upstreams.insert(),
                [{"run_id": run_id, "upstream_run_id": u} for u in request.upstream_run_ids],
            )
        record_subject_event(
            connection,
            subject_type=SubjectType.RUN,
            subject_id=run_id,
            run_id=run_id,
            kind="run_created",
            actor=request.actor,
            event_id=new_id(),
            now=now,
            to_state=request.execution_state.value,
            evidence={
                "idempotency_key": request.idempotency_key,
                "trigger_kind": request.trigger_kind.value,
                "definition_version": request.definition_version,
                "logical_time": request.logical_time.isoformat() if request.logical_time else None,
                "parameters": dict(request.parameters),
                **(
                    {"upstream_runs": list(request.upstream_run_ids)}
                    if request.upstream_run_ids
                    else {}
                ),
                **({"queued_behind": list(request.queued_behind)} if request.queued_behind else {}),
                **({"logical_time_given": True} if request.logical_time_given else {}),
            },
            reason=request.execution_reason,
        )
        ledger.create_new_run_instances_in(
            connection, run_id=run_id, tasks=request.tasks, new_id=new_id
        )
    return run_id, True


_t = schema.task_instances.c
_SELECT_BRIEFS = (
    sa.select(_t.id, _t.task_key, _t.map_index, _t.state, _t.epoch, _t.retry_at, _t.version)
    .where(_t.run_id == sa.bindparam("run_id"))
    .order_by(_t.task_key, _t.map_index)
)


def instances_brief(connection: Connection, run_id: str) -> list[InstanceBrief]:
    """The run's instances, light: no fold, no policy."""
    rows = connection.execute(_SELECT_BRIEFS, {"run_id": run_id}).all()
    # A scheduler reads every instance of a run each time it moves it: a dict lookup for
    # the state is much cheaper than the enum's constructor on runs of thousands.
    return [
        InstanceBrief(id_, key, index, _STATES[state], epoch, retry_at, version)
        for id_, key, index, state, epoch, retry_at, version in rows
    ]


_STATES = {state.value: state for state in InstanceState}

#: What a run's instances are, in sum: per state, how many and the sum of their attempt
#: numbers. A task that moves, retries or is added changes it.
StatesDigest = frozenset[tuple[str, int, int]]


def digest_of(briefs: Iterable[InstanceBrief]) -> StatesDigest:
    """The digest of instances already read, as ``states_digests`` computes it."""
    counts: dict[str, list[int]] = {}
    for brief in briefs:
        tally = counts.setdefault(brief.state.value, [0, 0])
        tally[0] += 1
        tally[1] += brief.epoch
    return frozenset((state, count, epochs) for state, (count, epochs) in counts.items())


_SELECT_DIGESTS = (
    sa.select(_t.run_id, _t.state, sa.func.count(), sa.func.sum(_t.epoch))
    .where(_t.run_id.in_(sa.bindparam("run_ids", expanding=True)))
    .group_by(_t.run_id, _t.state)
)


def states_digests(connection: Connection, run_ids: Sequence[str]) -> dict[str, StatesDigest]:
    """Each run's digest, computed by the database without sending its instances."""
    tallies: dict[str, set[tuple[str, int, int]]] = {run_id: set() for run_id in run_ids}
    for run_id, state, count, epochs in connection.execute(
        _SELECT_DIGESTS, {"run_ids": list(run_ids)}
    ):
        tallies[run_id].add((state, int(count), int(epochs or 0)))
    return {run_id: frozenset(tally) for run_id, tally in tallies.items()}


# -- what triggers, queues and dependencies read -----------------------------------------------

_r = schema.runs.c


class QueuedRun(NamedTuple):
    """A run waiting for its definition's active runs to end."""

    id: str
    definition_id: str
    version: int


def queued_runs(connection: Connection) -> list[QueuedRun]:
    """Every QUEUED run, oldest first."""
    rows = connection.execute(
        sa.select(_r.id, _r.definition_id, _r.version)
        .where(
            _r.execution_state == RunExecutionState.QUEUED.value,
            # Implied; verbatim for SQLite's planner (the partial index of unsettled runs).
            sa.text(f"({schema.UNSETTLED_RUN_PREDICATE})"),
        )
        .order_by(_r.created_at, _r.id)
    )
    return [QueuedRun(*row) for row in rows]


def active_run_ids(connection: Connection, definition_id: str) -> list[str]:
    """The definition's runs that execute or are being cancelled."""
    return list(
        connection.execute(
            sa.select(_r.id).where(
                _r.definition_id == definition_id,
                _r.execution_state.in_(
                    [RunExecutionState.RUNNING.value, RunExecutionState.CANCELLING.value]
                ),
            )
        ).scalars()
    )


def parameters_of(connection: Connection, run_id: str) -> JSONObject:
    """The parameters the run was triggered with."""
    value = connection.execute(sa.select(_r.parameters).where(_r.id == run_id)).scalar_one()
    return dict(value or {})


def run_with_key(connection: Connection, idempotency_key: str) -> str | None:
    """The id of the run with this idempotency key, if there is one."""
    found = connection.execute(
        sa.select(_r.id).where(_r.idempotency_key == idempotency_key)
    ).scalar_one_or_none()
    return None if found is None else str(found)


def execution_of(connection: Connection, run_id: str) -> tuple[RunExecutionState, str]:
    """The run's execution state and its reason (empty if none was recorded)."""
    row = connection.execute(
        sa.select(_r.execution_state, _r.execution_reason).where(_r.id == run_id)
    ).one()
    return RunExecutionState(row.execution_state), row.execution_reason or ""


#: The newest logical time of one definition's runs that its schedule made, at or after a
#: floor (when the definition was applied): the definition's index read from its newest
#: logical time back to the first such run or the floor, so one row in the usual case,
#: however long the history (never a scan of every run, nor of a backfill of years before).
_LATEST_SCHEDULED_TIME = (
    sa.select(_r.logical_time)
    .where(
        _r.definition_id == sa.bindparam("definition_id"),
        _r.logical_time >= sa.bindparam("floor"),
        _r.trigger_kind == TriggerKind.SCHEDULE.value,
    )
    .order_by(_r.logical_time.desc())
    .limit(1)
)


def latest_logical_times(
    connection: Connection, floors: Mapping[str, datetime]
) -> dict[str, datetime]:
    """For each definition (id to floor) with scheduled runs at or after its floor, the latest
    of their logical times.

    Only runs the schedule made count: a run by hand at 10:00 does not mean 10:00's run was
    made, nor does a run an upstream's publication of 10:00 started, nor a backfilled run (a
    backfill of an old day says nothing of the fire times after it: catch-up never starts
    there, docs/definitions.md, "Catch-up")."""
    found: dict[str, datetime] = {}
    for definition_id, floor in floors.items():
        latest = connection.execute(
            _LATEST_SCHEDULED_TIME, {"definition_id": definition_id, "floor": floor}
        ).scalar_one_or_none()
        if latest is not None:
            found[definition_id] = latest
    return found


def latest_publication(
    connection: Connection, definition_name: str, logical_time: datetime | None
) -> PublicationState | None:
    """The publication state of the definition's newest run (of ``logical_time``, if given)."""
    found = latest_upstream(connection, definition_name, logical_time)
    return None if found is None else found.publication_state


class UpstreamRun(NamedTuple):
    """The run of another definition that a ``wait_for`` looks at."""

    id: str
    logical_time: datetime | None
    publication_state: PublicationState


def latest_upstream(
    connection: Connection, definition_name: str, logical_time: datetime | None
) -> UpstreamRun | None:
    """The definition's newest run (of ``logical_time``, if given), with its publication."""
    d = schema.definitions.c
    statement = (
        sa.select(_r.id, _r.logical_time, _r.publication_state)
        .join(schema.definitions, d.id == _r.definition_id)
        .where(d.name == definition_name)
    )
    if logical_time is not None:
        statement = statement.where(_r.logical_time == logical_time)
    row = connection.execute(statement.order_by(_r.created_at.desc()).limit(1)).first()
    if row is None:
        return None
    return UpstreamRun(row.id, row.logical_time, PublicationState(row.publication_state))


_e = schema.events.c


def published_event_id(connection: Connection, run_id: str) -> str | None:
    """The id of the event that made the run PUBLISHED (its latest, if cleared since)."""
    return connection.execute(
        sa.select(_e.event_id)
        .where(
            _e.run_id == run_id,
            _e.subject_type == SubjectType.RUN.value,
            _e.kind == _PUBLICATION.kind,
            _e.to_state == PublicationState.PUBLISHED.value,
        )
        .order_by(_e.position.desc())
        .limit(1)
    ).scalar_one_or_none()


def creation_evidence(connection: Connection, run_id: str) -> JSONObject:
    """The evidence of the run's ``run_created`` event (what its trigger asked for)."""
    value = connection.execute(
        sa.select(_e.evidence)
        .where(
            _e.run_id == run_id,
            _e.subject_type == SubjectType.RUN.value,
            _e.kind == "run_created",
        )
        .order_by(_e.position)
        .limit(1)
    ).scalar_one_or_none()
    return dict(value) if isinstance(value, dict) else {}


def rerun_origin(connection: Connection, run_id: str) -> tuple[str, TriggerKind]:
    """The run a rerun (of a rerun…) was first made from, and how that one was triggered;
    the run itself when it is no rerun."""
    current = run_id
    for _ in range(_RERUN_DEPTH):
        row = connection.execute(
            sa.select(_r.trigger_kind, _r.rerun_of).where(_r.id == current)
        ).first()
        if row is None:
            break
        kind = TriggerKind(row.trigger_kind)
        if kind is not TriggerKind.RERUN or row.rerun_of is None:
            return current, kind
        current = row.rerun_of
    return current, TriggerKind.RERUN


#: How far back a chain of reruns is followed (a guard, not a limit anyone meets).
_RERUN_DEPTH = 1000


def execution_states(connection: Connection, run_ids: Iterable[str]) -> dict[str, str]:
    """The execution state of each of these runs (those that exist)."""
    ids = list(run_ids)
    if not ids:
        return {}
    rows = connection.execute(sa.select(_r.id, _r.execution_state).where(_r.id.in_(ids)))
    return {row.id: row.execution_state for row in rows}


def set_execution_reason(
    connection: Connection,
    *,
    run_id: str,
    expected_version: int,
    kind: str,
    reason: str,
    actor: str,
    event_id: str,
    now: datetime,
    evidence: JSONObject,
) -> int:
    """Say why a run that keeps its state is where it is (it waits for another pipeline, or
    that wait is over): the reason with compare-and-set, and an event of ``kind``."""
    if not evidence:
        raise errors.EvidenceMissing(f"run {run_id}: {kind} needs evidence")
    version = runs.compare_and_set(
        connection,
        schema.runs,
        row_id=run_id,
        expected_version=expected_version,
        values={"execution_reason": reason},  # a reason, not a state: no state change time
    )
    record_subject_event(
        connection,
        subject_type=SubjectType.RUN,
        subject_id=run_id,
        run_id=run_id,
        kind=kind,
        actor=actor,
        event_id=event_id,
        now=now,
        evidence=evidence,
        reason=reason,
    )
    return version


class _Axis(NamedTuple):
    """One of a run's two states: its columns and the kind of event that moves it."""

    state_column: str
    reason_column: str
    kind: str


_EXECUTION = _Axis("execution_state", "execution_reason", "run_state_changed")
_PUBLICATION = _Axis("publication_state", "publication_reason", "publication_changed")


def set_execution_state(
    connection: Connection,
    *,
    run_id: str,
    expected_version: int,
    state: RunExecutionState,
    reason: str,
    previous: RunExecutionState,
    actor: str,
    event_id: str,
    now: datetime,
    evidence: JSONObject,
) -> int:
    """Move the run's execution state with compare-and-set and record why; the new version.

    ``evidence`` is what proves the move (the instances' states, the runs a queue waited
    behind, the operator and reason…); an empty one is refused (``EvidenceMissing``).
    Raises ``LedgerConflict`` when another writer moved the run first.
    """
    return _move_run(
        connection,
        _EXECUTION,
        run_id,
        expected_version,
        state,
        previous,
        reason=reason,
        actor=actor,
        event_id=event_id,
        now=now,
        evidence=evidence,
    )


def set_publication_state(
    connection: Connection,
    *,
    run_id: str,
    expected_version: int,
    state: PublicationState,
    reason: str,
    previous: PublicationState,
    actor: str,
    event_id: str,
    now: datetime,
    evidence: JSONObject,
) -> int:
    """Move the run's publication state with compare-and-set; each change is an event, with
    the steps (instance and attempt) that decided it as its evidence, never empty. A move to
    PUBLISHED also signs and stores the run's attestation, in the same transaction."""
    version = _move_run(
        connection,
        _PUBLICATION,
        run_id,
        expected_version,
        state,
        previous,
        reason=reason,
        actor=actor,
        event_id=event_id,
        now=now,
        evidence=evidence,
    )
    if state is PublicationState.PUBLISHED:
        attestations.attest(connection, run_id=run_id, event_id=event_id, now=now)
    return version


def _move_run(
    connection: Connection,
    axis: _Axis,
    run_id: str,
    expected_version: int,
    state: RunExecutionState | PublicationState,
    previous: RunExecutionState | PublicationState,
    *,
    reason: str,
    actor: str,
    event_id: str,
    now: datetime,
    evidence: JSONObject,
) -> int:
    """Both states move the same way: the row with compare-and-set, then the event saying why."""
    if not evidence:
        raise errors.EvidenceMissing(
            f"run {run_id}: {axis.kind} to {state.value} needs evidence (what proves the move)"
        )
    version = runs.compare_and_set(
        connection,
        schema.runs,
        row_id=run_id,
        expected_version=expected_version,
        values={
            axis.state_column: state.value,
            axis.reason_column: reason,
            "updated_observed_at": now,
        },
    )
    record_subject_event(
        connection,
        subject_type=SubjectType.RUN,
        subject_id=run_id,
        run_id=run_id,
        kind=axis.kind,
        actor=actor,
        event_id=event_id,
        now=now,
        from_state=previous.value,
        to_state=state.value,
        evidence=evidence,
        reason=reason,
    )
    return version


def record_subject_event(
    connection: Connection,
    *,
    subject_type: SubjectType,
    subject_id: str,
    kind: str,
    actor: str,
    event_id: str,
    now: datetime,
    evidence: JSONObject,
    reason: str,
    run_id: str | None = None,
    from_state: str | None = None,
    to_state: str | None = None,
    event_time: datetime | None = None,
) -> None:
    """Append a run- or definition-level event (the platform's own, so its time is ours)."""
    content = json.dumps(
        [subject_type.value, subject_id, kind, actor, evidence], sort_keys=True, default=str
    )
    subject = (subject_type.value, subject_id)
    row: dict[str, object] = {
        "event_id": event_id,
        "subject_type": subject_type.value,
        "subject_id": subject_id,
        "run_id": run_id,
        "instance_id": None,
        "attempt_no": None,
        "kind": kind,
        "actor": actor,
        "seq": None,
        "from_state": from_state,
        "to_state": to_state,
        "event_time": event_time or now,
        "observed_at": now,
        "evidence": evidence,
        "outcome": EventOutcome.APPLIED.value,
        "reason": reason,
        "fingerprint": hashlib.sha256(content.encode()).hexdigest(),
    }
    # The subject's row stays locked to the end of the transaction: its appends chain in turn.
    head = row["chain_hash"] = chain.link(row, chain.head_for_update(connection, *subject))
    connection.execute(schema.events.insert(), row)
    chain.write_head(connection, *subject, head)


def run_version(
    connection: Connection, run_id: str, *, lock: bool = False
) -> tuple[int, RunExecutionState]:
    """The run's version and execution state, for a compare-and-set; with ``lock``, the row
    stays locked until the transaction ends (PostgreSQL; SQLite has one writer anyway), so
    that a writer deciding on the run's instances sees what another one committed first."""
    query = sa.select(schema.runs.c.version, schema.runs.c.execution_state).where(
        schema.runs.c.id == run_id
    )
    row = connection.execute(query.with_for_update() if lock else query).first()
    if row is None:
        raise errors.LedgerError(f"no run {run_id}")
    return row.version, RunExecutionState(row.execution_state)

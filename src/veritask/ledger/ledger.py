"""``apply(event)``: record an event once, fold it, and write the snapshot with compare-and-set.

One code path for SQLite and PostgreSQL. In one transaction the ledger reads the instance's
snapshot (its facts, version and policy), classifies the event with the pure ``judge``, inserts
the event row (``ON CONFLICT (event_id) DO NOTHING`` tells a duplicate), and writes the new
snapshot with ``UPDATE … WHERE id = :id AND version = :expected``. Zero rows updated means
another writer moved the instance first: the transaction rolls back and the event is read,
folded and classified again (bounded) — never overwritten, never retried blindly.

Decisions pass the version of the snapshot they were based on (``expected_version``); if the
instance moved since, :class:`StaleDecision` is raised and nothing is recorded, so the decider
re-reads and decides again (docs/outcomes-and-fencing.md, 'Facts and decisions').
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from veritask.core import admission, codec, judge, new_events, outputs, reports
from veritask.core.events import Event, EventKind
from veritask.core.fold import AttemptView, InstanceSnapshot, derive, empty
from veritask.core.jsontypes import JSONValue
from veritask.core.judge import Outcome
from veritask.core.policy import TaskPolicy
from veritask.core.states import InstanceState
from veritask.ledger import (
    attempt_reports,
    chain,
    dialects,
    errors,
    metric_values,
    pools,
    rejections,
    runs,
    schema,
    statements,
)

Clock = Callable[[], datetime]

#: Snapshots kept decoded between transactions (see ``Ledger._snapshots``).
_SNAPSHOT_CACHE = 10_000
#: Reports refused for their attempt's limits, by kind and limit (``/metrics``).
REFUSED_METRIC = "reports_refused_total"
#: How many times a lost compare-and-set race is re-read and re-classified before giving up.
MAX_RACES = 64


class StaleDecision(errors.LedgerConflict):
    """The snapshot moved since the decision was taken; re-read and decide again."""

    retryable = True


@dataclass(frozen=True)
class Applied:
    """What became of one event."""

    event_id: str
    outcome: Outcome
    reason: str
    snapshot: InstanceSnapshot | None
    version: int | None
    #: For a duplicate: the outcome the event got when it was first recorded.
    original_outcome: Outcome | None = None
    #: For a recorded event: the instance's state just before it (what it may have moved).
    previous_state: InstanceState | None = None
    #: For a report refused for its attempt's limit (``core.reports``): why.
    over_limit: reports.Refusal | None = None

    @property
    def state(self) -> InstanceState | None:
        return None if self.snapshot is None else self.snapshot.state


@dataclass
class _Loaded:
    """An instance as read in this transaction, and as folded since."""

    run_id: str
    version: int
    policy: TaskPolicy
    base: InstanceSnapshot
    snapshot: InstanceSnapshot
    dirty: bool = False
    #: The version this transaction wrote, once it did.
    written: int | None = None
    #: Taken from what this process last wrote, not read: only a compare-and-set proves it.
    unproven: bool = False
    #: The hash of the instance's last event (``ledger.chain``), read and written with it.
    head: str | None = None


@dataclass(frozen=True)
class _Written:
    """An instance as this process last committed it."""

    run_id: str
    version: int
    policy: TaskPolicy
    snapshot: InstanceSnapshot
    head: str | None


@dataclass(frozen=True)
class _Known:
    """An event already recorded under the same id."""

    fingerprint: str
    outcome: str
    reason: str | None


class _LostRace(Exception):
    """A compare-and-set matched no row: roll back and classify again."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class Ledger:
    """The durable event log and the snapshots folded from it."""

    def __init__(self, engine: Engine, *, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.clock = clock
        self._policies = statements.PolicyTexts()
        # What this process last wrote, by instance: a row still at that version need not be
        # decoded and derived again, and a single event may be judged against it without
        # reading the row first (see ``apply``). Bounded; a miss only costs the read.
        self._snapshots: dict[str, _Written] = {}

    # -- creation --------------------------------------------------------------------------

    def create_instance(
        self,
        *,
        run_id: str,
        task_key: str,
        policy: TaskPolicy,
        event_id: str,
        map_index: int = runs.UNMAPPED,
        instance_id: str | None = None,
        event_time: datetime | None = None,
    ) -> tuple[str, bool]:
        """Create the instance with its ``instance_created`` event; idempotent on its key."""
        with self.engine.begin() as connection:
            return self.create_instance_in(
                connection,
                run_id=run_id,
                task_key=task_key,
                policy=policy,
                event_id=event_id,
                map_index=map_index,
                instance_id=instance_id,
                event_time=event_time,
            )

    def create_instance_in(
        self,
        connection: Connection,
        *,
        run_id: str,
        task_key: str,
        policy: TaskPolicy,
        event_id: str,
        map_index: int = runs.UNMAPPED,
        instance_id: str | None = None,
        event_time: datetime | None = None,
    ) -> tuple[str, bool]:
        """:meth:`create_instance` inside the caller's transaction (a run and its instances
        are created together)."""
        now = self.clock()
        created_id, created = runs.create_instance(
            connection,
            run_id=run_id,
            task_key=task_key,
            state=InstanceState.CREATED,
            policy=policy.to_json(),
            map_index=map_index,
            instance_id=instance_id,
            observed_at=now,
        )
        if created:
            event = _created_event(
                event_id, created_id, run_id, task_key, map_index, event_time or now, now
            )
            blank = derive(empty(created_id), policy)
            loaded = _Loaded(run_id, 0, policy, blank, blank)
            self._record(connection, loaded, event, expected_version=None)
            self._write_snapshot(connection, created_id, loaded)
        return created_id, created

    def create_new_run_instances_in(
        self,
        connection: Connection,
        *,
        run_id: str,
        tasks: Sequence[tuple[str, TaskPolicy]],
        new_id: Callable[[], str],
        map_indexes: Sequence[int] | None = None,
    ) -> list[str]:
        """The instances of a run created in this same transaction, three statements in all.

        What :meth:`create_instance_in` does one instance at a time (a run of thousands of
        tasks is triggered in a fraction of the time), and only for a run no one else can have
        given instances yet: the caller created it in ``connection``.
        """
        now = self.clock()
        instance_rows: list[dict[str, object]] = []
        event_rows: list[dict[str, object]] = []
        snapshot_rows: list[dict[str, object]] = []
        for place, (task_key, policy) in enumerate(tasks):
            instance_id = new_id()
            map_index = runs.UNMAPPED if map_indexes is None else map_indexes[place]
            instance_rows.append(
                runs.instance_row(
                    instance_id,
                    run_id,
                    task_key,
                    map_index,
                    InstanceState.CREATED,
                    policy.to_json(),
                    now,
                )
            )
            event = _created_event(new_id(), instance_id, run_id, task_key, map_index, now, now)
            verdict = judge.judge(derive(empty(instance_id), policy), event, policy)
            if verdict.outcome is not Outcome.APPLIED:
                raise errors.LedgerError(f"instance {task_key}: created {verdict.outcome}")
            row = statements.event_row(event, run_id, verdict)
            head = row["chain_hash"] = chain.link(row, None)
            event_rows.append(row)
            snapshot_rows.append(_snapshot_row(instance_id, 0, verdict.after, now, head))
        if not tasks:
            return []
        connection.execute(schema.task_instances.insert(), instance_rows)
        connection.execute(statements.statements_for(connection).insert_events, event_rows)
        if connection.execute(statements.UPDATE_INSTANCE, snapshot_rows).rowcount != len(tasks):
            raise errors.LedgerConflict(f"run {run_id}: its new instances were changed meanwhile")
        return [str(row["id"]) for row in instance_rows]

    # -- reads -----------------------------------------------------------------------------

    def snapshot(self, instance_id: str) -> tuple[InstanceSnapshot, int] | None:
        """The instance's snapshot and its version, or None if there is no such instance."""
        with dialects.read_transaction(self.engine) as connection:
            loaded = self._load(connection, instance_id)
        return None if loaded is None else (loaded.snapshot, loaded.version)

    def expand_map(
        self,
        event: Event,
        *,
        expected_version: int,
        run_id: str,
        task_key: str,
        policy: TaskPolicy,
        new_id: Callable[[], str],
    ) -> Applied:
        """Record a mapped task's ``map_expanded`` on its unmapped instance and create its
        instances (map index 0..n-1) in the same transaction: both or neither. A decision
        taken on a snapshot that moved since raises :class:`StaleDecision`, so two
        schedulers (or one restarted) never expand a task twice."""
        count = event.evidence["count"]
        if not isinstance(count, int):
            raise errors.LedgerError("map_expanded needs its count")
        with self.engine.begin() as connection:
            loaded = self._load(connection, event.instance_id)
            if loaded is None:
                raise errors.LedgerError(f"no instance {event.instance_id}")
            if loaded.version != expected_version:  # decided meanwhile: no rejection to keep
                raise StaleDecision(f"instance {event.instance_id} moved since it was read")
            stamped = replace(event, observed_at=self.clock())
            applied = self._record(connection, loaded, stamped, expected_version=expected_version)
            if applied.outcome is not Outcome.APPLIED:
                return applied
            try:
                self._write_snapshot(connection, event.instance_id, loaded)
            except _LostRace:
                raise StaleDecision(f"instance {event.instance_id} moved meanwhile") from None
            self.create_new_run_instances_in(
                connection,
                run_id=run_id,
                tasks=[(task_key, policy)] * count,
                new_id=new_id,
                map_indexes=range(count),
            )
        self._snapshots.pop(event.instance_id, None)
        return applied

    def map_items(self, run_id: str, task_key: str) -> list[JSONValue] | None:
        """The items a mapped task was expanded over, from its ``map_expanded`` (None before)."""
        t = schema.task_instances.c
        statement = sa.select(t.id).where(
            t.run_id == run_id, t.task_key == task_key, t.map_index == runs.UNMAPPED
        )
        with dialects.read_transaction(self.engine) as connection:
            instance_id = connection.execute(statement).scalar()
            loaded = None if instance_id is None else self._load(connection, instance_id)
        if loaded is None:
            return None
        facts = loaded.snapshot.facts
        mark = facts.decision(facts.epoch, EventKind.MAP_EXPANDED)
        items = None if mark is None else mark.evidence.get("items")
        return items if isinstance(items, list) else None

    def current_outputs(self, run_id: str, task_keys: Sequence[str]) -> dict[str, JSONValue]:
        """What each of the run's tasks gives downstream, by task key (``core.outputs``): the
        current attempt's output, or null; a mapped task's is the list of its instances'
        outputs in map-index order. Tasks without an instance are left out."""
        t = schema.task_instances.c
        statement = (
            sa.select(t.id, t.task_key, t.map_index)
            .where(t.run_id == run_id, t.task_key.in_(sorted(set(task_keys))))
            .order_by(t.task_key, t.map_index)
        )
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(statement).all()
            loaded = self._load_many(connection, {row.id for row in rows})
        found: dict[str, JSONValue] = {}
        for row in rows:  # a mapped task's unmapped instance comes first: its items replace it
            item = loaded.get(row.id)
            value = None if item is None else outputs.current_output(item.snapshot)
            if row.map_index < 0:
                found[row.task_key] = value
            else:
                group = found.get(row.task_key)
                if not isinstance(group, list):
                    group = found[row.task_key] = []
                group.append(value)
        return found

    def recorded_events(self, instance_id: str) -> list[Event]:
        """The instance's recorded events (rejected ones are not), as the fold takes them."""
        e = schema.events.c
        statement = (
            sa.select(*statements.EVENT_FIELDS)
            .where(e.instance_id == instance_id)
            .order_by(e.position)
        )
        with dialects.read_transaction(self.engine) as connection:
            rows = connection.execute(statement).all()
        return [statements.event_from_row(row) for row in rows]

    def refresh_lease(self, instance_id: str, attempt_no: int, view: AttemptView) -> None:
        """Write an attempt's live lease and last heartbeat into its row (a cache column),
        as ``statements.attempt_row`` maps them, the one mapping of a view to its row."""
        policy = self.policy_of(instance_id) or TaskPolicy()
        row = statements.attempt_row(instance_id, view, policy)
        with self.engine.begin() as connection:
            connection.execute(
                schema.attempts.update()
                .where(
                    schema.attempts.c.instance_id == instance_id,
                    schema.attempts.c.attempt_no == attempt_no,
                )
                .values(
                    lease_expires_at=row["lease_expires_at"],
                    monitor_due_at=row["monitor_due_at"],
                    last_heartbeat_at=row["last_heartbeat_at"],
                )
            )

    def policy_of(self, instance_id: str) -> TaskPolicy | None:
        """The task policy stored with the instance."""
        with dialects.read_transaction(self.engine) as connection:
            loaded = self._load(connection, instance_id)
        return None if loaded is None else loaded.policy

    # -- writes ----------------------------------------------------------------------------

    def apply(self, event: Event, *, expected_version: int | None = None) -> Applied:
        """Record, fold and classify one event in one transaction.

        The first try judges the event against what this process last wrote for the instance,
        without reading the row: the compare-and-set on ``version`` that records any event
        proves that nobody wrote since, or rolls everything back. An answer that would not be
        proven that way (a rejection, an id already known, a stale decision) is taken again
        from the row as read, like every retry after a lost race.
        """
        for tries in range(MAX_RACES):
            touched: dict[str, _Loaded | None] = {}
            believed = self._snapshots.get(event.instance_id) if tries == 0 else None
            try:
                with self.engine.begin() as connection:
                    applied = self._apply_one(
                        connection, event, expected_version, touched, believed
                    )
            except _LostRace:
                self._snapshots.pop(event.instance_id, None)
                continue
            self._remember(touched)
            _count((event,), (applied,))
            return applied
        raise errors.LedgerConflict(
            f"instance {event.instance_id}: lost {MAX_RACES} compare-and-set races in a row"
        )

    def apply_batch(
        self,
        events: Sequence[Event],
        *,
        expected_versions: Mapping[str, int] | None = None,
        then: Callable[[Connection], None] | None = None,
    ) -> list[Applied]:
        """Apply many events in one transaction, in the order given, for high-rate callers.

        Each instance is read once and written once per batch; a lost race anywhere rolls the
        whole batch back and it is classified again.

        With ``expected_versions`` (instance id → the version a decision was taken on) the
        batch is one decision over several instances, all or nothing: if any of them moved
        since, :class:`StaleDecision` is raised, and if any event would be refused,
        :class:`errors.LedgerConflict`; either way nothing at all is recorded. ``then`` runs
        in the same transaction once the events are written (it sees them); whatever it
        raises rolls the whole batch back.
        """
        for _ in range(MAX_RACES):
            touched: dict[str, _Loaded | None] = {}
            try:
                with self.engine.begin() as connection:
                    applied = self._apply_many(connection, events, touched, expected_versions)
                    if then is not None:
                        then(connection)
            except _LostRace:
                continue
            self._remember(touched)
            _count(events, applied)
            return applied
        raise errors.LedgerConflict(f"a batch of {len(events)} lost {MAX_RACES} races in a row")

    def open_attempts(
        self,
        openings: Sequence[tuple[Event | None, pools.Wanted]],
        *,
        aging: timedelta | None,
    ) -> list[Applied | admission.Verdict]:
        """Record ``attempt_opened`` events that their pools admit, in one transaction.

        The pools the openings name are locked, their slots counted and the openings ranked
        against the pools' other waiters (``core.admission``); the admitted ones are recorded
        as :meth:`apply_batch` records them, and each recorded attempt's row is given its pool
        in the same commit, which takes its slots. For each opening: what was recorded, or the
        verdict that keeps it waiting (its wait is recorded for the ranking). An opening
        without an event only takes its place among the waiters: nothing opens for it now.
        """
        for _ in range(MAX_RACES):
            touched: dict[str, _Loaded | None] = {}
            try:
                with self.engine.begin() as connection:
                    now = self.clock()
                    # Only openings with an event compete for slots: one without (a task its
                    # run ranked after these) must not be given a slot it cannot take.
                    asking = [w for e, w in openings if e is not None]
                    verdicts = pools.admit(connection, asking, now=now, aging=aging)
                    admitted = [
                        (e, w)
                        for e, w in openings
                        if e is not None and verdicts[w.claim.instance_id].admitted
                    ]
                    applied = self._apply_many(connection, [e for e, _ in admitted], touched)
                    opened = {e.event_id for (e, _), a in zip(admitted, applied, strict=True)}
                    pools.settle(
                        connection,
                        opened=[
                            (w.claim.instance_id, e.attempt_no, w.claim)
                            for (e, w), a in zip(admitted, applied, strict=True)
                            if a.outcome is Outcome.APPLIED
                        ],
                        waiting=[w for e, w in openings if e is None or e.event_id not in opened],
                        now=now,
                    )
            except _LostRace:
                continue
            self._remember(touched)
            _count([e for e, _ in admitted], applied)
            recorded = {a.event_id: a for a in applied}
            held = admission.Verdict(False)
            return [
                recorded[e.event_id]
                if e is not None and e.event_id in recorded
                else held
                if e is None or verdicts[w.claim.instance_id].admitted
                else verdicts[w.claim.instance_id]
                for e, w in openings
            ]
        raise errors.LedgerConflict(f"{len(openings)} openings lost {MAX_RACES} races in a row")

    # -- the transaction's steps -----------------------------------------------------------

    def _remember(self, touched: dict[str, _Loaded | None]) -> None:
        """Keep what a committed transaction wrote, to skip reading and decoding it next time."""
        if len(self._snapshots) >= _SNAPSHOT_CACHE:
            self._snapshots.clear()
        for instance_id, loaded in touched.items():
            if loaded is not None and loaded.written is not None:
                self._snapshots[instance_id] = _Written(
                    loaded.run_id, loaded.written, loaded.policy, loaded.snapshot, loaded.head
                )

    def _apply_one(
        self,
        connection: Connection,
        event: Event,
        expected_version: int | None,
        touched: dict[str, _Loaded | None],
        believed: _Written | None = None,
    ) -> Applied:
        stamped = replace(event, observed_at=self.clock())
        if believed is not None:
            loaded: _Loaded | None = _Loaded(
                believed.run_id,
                believed.version,
                believed.policy,
                believed.snapshot,
                believed.snapshot,
                unproven=True,
                head=believed.head,
            )
        else:
            loaded = self._load(connection, event.instance_id)
        touched[event.instance_id] = loaded
        if loaded is None:
            return self._reject(
                connection, stamped, f"instance_id: no instance {event.instance_id}"
            )
        applied = self._record(connection, loaded, stamped, expected_version=expected_version)
        self._write_snapshot(connection, event.instance_id, loaded)
        attempt_reports.record(connection, [(stamped, applied.outcome)])
        return applied

    def _apply_many(
        self,
        connection: Connection,
        events: Sequence[Event],
        loaded_by_id: dict[str, _Loaded | None],
        expected_versions: Mapping[str, int] | None = None,
    ) -> list[Applied]:
        """The batch path: every read and write is one statement per kind, not per event.

        Instances and already known event ids are read in bulk; new events are inserted with
        one executemany (``ON CONFLICT DO NOTHING``: an id another writer inserts meanwhile
        also moved that writer's snapshot, so our compare-and-set fails and the batch is
        classified again, finding the id known); snapshots are written with one
        compare-and-set executemany whose row count must match.
        """
        now = self.clock()
        missing = {e.instance_id for e in events} - loaded_by_id.keys()
        loaded_by_id.update(self._load_many(connection, missing))
        if expected_versions is not None:
            _check_versions(loaded_by_id, expected_versions)
        known = self._known_many(connection, [e.event_id for e in events])
        spent = attempt_reports.progress_spent(
            connection, {e.instance_id for e in events if e.kind is EventKind.PROGRESS}
        )
        rows: list[dict[str, object]] = []
        recorded: list[tuple[Event, Outcome]] = []
        results = []
        for event in events:
            stamped = replace(event, observed_at=now)
            loaded = loaded_by_id.get(event.instance_id)
            if loaded is None:
                reason = f"instance_id: no instance {event.instance_id}"
                results.append(self._reject(connection, stamped, reason))
                continue
            prior = known.get(event.event_id)
            if prior is not None:
                results.append(self._as_known(connection, loaded, stamped, prior))
                continue
            attempt_key = (event.instance_id, event.attempt_no)
            verdict = judge.judge(
                loaded.snapshot,
                stamped,
                loaded.policy,
                progress_bytes=spent.get(attempt_key, 0),
            )
            if verdict.outcome is Outcome.REJECTED and expected_versions is not None:
                raise errors.LedgerConflict(
                    f"instance {event.instance_id}: {event.kind} refused ({verdict.reason})"
                )
            if verdict.outcome is Outcome.REJECTED:
                results.append(
                    self._reject(
                        connection, stamped, verdict.reason, loaded, over_limit=verdict.over_limit
                    )
                )
                continue
            row = statements.event_row(stamped, loaded.run_id, verdict)
            # Chained in batch order; if an id here was inserted meanwhile by another writer,
            # that writer moved the instance too and the compare-and-set below rolls back.
            loaded.head = row["chain_hash"] = chain.link(row, loaded.head)
            rows.append(row)
            recorded.append((stamped, verdict.outcome))
            if event.kind is EventKind.PROGRESS:  # counted for the batch's later progress
                spent[attempt_key] = spent.get(attempt_key, 0) + reports.evidence_bytes(
                    event.evidence
                )
            # A second copy later in this batch is a duplicate of this one.
            known[event.event_id] = _Known(str(row["fingerprint"]), verdict.outcome, verdict.reason)
            loaded.snapshot = verdict.after
            loaded.dirty = True
            results.append(
                Applied(
                    event.event_id,
                    verdict.outcome,
                    verdict.reason,
                    verdict.after,
                    loaded.version + 1,
                    previous_state=verdict.before.state,
                )
            )
        if rows:
            connection.execute(statements.statements_for(connection).insert_events, rows)
        self._write_snapshots(connection, loaded_by_id)
        attempt_reports.record(connection, recorded)
        return results

    def _load_many(
        self, connection: Connection, instance_ids: set[str]
    ) -> dict[str, _Loaded | None]:
        found: dict[str, _Loaded | None] = dict.fromkeys(instance_ids)
        ids = sorted(instance_ids)
        for start in range(0, len(ids), statements.CHUNK):
            chunk = ids[start : start + statements.CHUNK]
            for row in connection.execute(statements.SELECT_INSTANCES, {"ids": chunk}):
                found[row.id] = self._loaded(row.id, row)
        return found

    def _known_many(self, connection: Connection, event_ids: list[str]) -> dict[str, _Known]:
        known: dict[str, _Known] = {}
        unique = sorted(set(event_ids))
        for start in range(0, len(unique), statements.CHUNK):
            chunk = unique[start : start + statements.CHUNK]
            for row in connection.execute(statements.SELECT_KNOWN_MANY, {"ids": chunk}):
                known[row.event_id] = _Known(row.fingerprint, row.outcome, row.reason)
        return known

    def _write_snapshots(
        self, connection: Connection, loaded_by_id: dict[str, _Loaded | None]
    ) -> None:
        """Compare-and-set every changed instance in one statement; then their attempts."""
        dirty = [
            (instance_id, loaded)
            for instance_id, loaded in sorted(loaded_by_id.items())
            if loaded is not None and loaded.dirty
        ]
        if not dirty:
            return
        now = self.clock()
        result = connection.execute(
            statements.UPDATE_INSTANCE,
            [
                _snapshot_row(instance_id, loaded.version, loaded.snapshot, now, loaded.head)
                for instance_id, loaded in dirty
            ],
        )
        if result.rowcount != len(dirty):
            raise _LostRace
        attempts = []
        for instance_id, loaded in dirty:
            loaded.written = loaded.version + 1
            before = {view.attempt_no: view for view in loaded.base.attempts}
            for view in loaded.snapshot.attempts:
                previous = before.get(view.attempt_no)
                if previous is None or statements.row_changed(previous, view):
                    attempts.append(statements.attempt_row(instance_id, view, loaded.policy))
        if attempts:
            connection.execute(statements.statements_for(connection).upsert_attempt, attempts)

    def _load(self, connection: Connection, instance_id: str) -> _Loaded | None:
        row = connection.execute(statements.SELECT_INSTANCE, {"id": instance_id}).first()
        return None if row is None else self._loaded(instance_id, row)

    def _loaded(self, instance_id: str, row: Any) -> _Loaded:
        policy = self._policies.parse(row.policy)
        cached = self._snapshots.get(instance_id)
        if cached is not None and cached.version == row.version:
            snapshot = cached.snapshot
        else:
            fold = json.loads(row.fold) if row.fold is not None else None
            facts = codec.facts_from_json(fold) if fold else empty(instance_id)
            snapshot = derive(facts, policy)
        return _Loaded(row.run_id, row.version, policy, snapshot, snapshot, head=row.chain_head)

    def _record(
        self,
        connection: Connection,
        loaded: _Loaded,
        event: Event,
        *,
        expected_version: int | None,
    ) -> Applied:
        """Classify the event and insert it; the caller writes the snapshot."""
        spent = 0
        if event.kind is EventKind.PROGRESS:
            found = attempt_reports.progress_spent(connection, [event.instance_id])
            spent = found.get((event.instance_id, event.attempt_no), 0)
        verdict = judge.judge(loaded.snapshot, event, loaded.policy, progress_bytes=spent)
        if loaded.unproven and (
            verdict.outcome is Outcome.REJECTED
            or (expected_version is not None and expected_version != loaded.version)
        ):
            raise _LostRace  # no compare-and-set would prove this answer: read the row
        if verdict.outcome is Outcome.REJECTED:
            known = self._known(connection, event.event_id)
            if known is None:
                return self._reject(
                    connection, event, verdict.reason, loaded, over_limit=verdict.over_limit
                )
            return self._as_known(connection, loaded, event, known)
        if expected_version is not None and expected_version != loaded.version:
            raise StaleDecision(
                f"instance {event.instance_id} is at version {loaded.version}, the decision "
                f"{event.kind} was taken on version {expected_version}"
            )
        row = statements.event_row(event, loaded.run_id, verdict)
        head = row["chain_hash"] = chain.link(row, loaded.head)
        inserted = connection.execute(
            statements.statements_for(connection).insert_event, row
        ).first()
        if inserted is None:
            if loaded.unproven:
                raise _LostRace  # the id is known: classify it against the row as read
            known = self._known(connection, event.event_id)
            if known is None:  # deleted by a purge between the two statements
                raise _LostRace
            return self._as_known(connection, loaded, event, known)
        loaded.head = head
        loaded.snapshot = verdict.after
        loaded.dirty = True
        return Applied(
            event.event_id,
            verdict.outcome,
            verdict.reason,
            verdict.after,
            loaded.version + 1,
            previous_state=verdict.before.state,
        )

    def _known(self, connection: Connection, event_id: str) -> _Known | None:
        row = connection.execute(statements.SELECT_KNOWN, {"event_id": event_id}).first()
        return None if row is None else _Known(row.fingerprint, row.outcome, row.reason)

    def _as_known(
        self,
        connection: Connection,
        loaded: _Loaded,
        event: Event,
        known: _Known,
    ) -> Applied:
        verdict = judge.judge(
            loaded.snapshot, event, loaded.policy, known_fingerprint=known.fingerprint
        )
        if verdict.outcome is Outcome.DUPLICATE:
            return Applied(
                event.event_id,
                Outcome.DUPLICATE,
                known.reason or verdict.reason,
                loaded.snapshot,
                loaded.version,
                original_outcome=Outcome(known.outcome),
            )
        return self._reject(connection, event, verdict.reason, loaded)

    def _reject(
        self,
        connection: Connection,
        event: Event,
        reason: str,
        loaded: _Loaded | None = None,
        *,
        about: tuple[str, int] | None = None,
        over_limit: reports.Refusal | None = None,
    ) -> Applied:
        """Keep the refused event as evidence (within ``rejections``' bounds); ``about`` names
        the attempt to keep it under when that is not the one the event names (its sender).
        A report refused for its attempt's limit is only counted: a flood is not kept."""
        if over_limit is not None:
            metric_values.PROCESS_TALLY.add(
                REFUSED_METRIC, {"kind": event.kind.value, "limit": str(over_limit.limit)}
            )
            return Applied(
                event.event_id,
                Outcome.REJECTED,
                reason,
                loaded.snapshot if loaded else None,
                loaded.version if loaded else None,
                over_limit=over_limit,
            )
        instance_id, attempt_no = about or (event.instance_id, event.attempt_no)
        rejections.store(
            connection,
            {
                "event_id": event.event_id,
                "subject_type": "instance",
                "subject_id": instance_id,
                "run_id": loaded.run_id if loaded else None,
                "instance_id": instance_id,
                "attempt_no": attempt_no,
                "kind": event.kind.value,
                "actor": event.actor,
                "event_time": event.event_time,
                "observed_at": event.observed_at or self.clock(),
                "payload": statements.payload(event),
                "reason": reason,
            },
        )
        return Applied(
            event.event_id,
            Outcome.REJECTED,
            reason,
            loaded.snapshot if loaded else None,
            loaded.version if loaded else None,
        )

    def refuse(self, event: Event, reason: str, *, sender: tuple[str, int]) -> Applied:
        """Keep ``event`` as refused evidence about its ``sender`` (instance, attempt), without
        judging it: the sender proved itself, but the event is about another attempt."""
        with self.engine.begin() as connection:
            loaded = self._load(connection, sender[0])
            stamped = replace(event, observed_at=self.clock())
            applied = self._reject(connection, stamped, reason, loaded, about=sender)
        _count((event,), (applied,))
        return applied

    def _write_snapshot(self, connection: Connection, instance_id: str, loaded: _Loaded) -> None:
        """Compare-and-set the instance row, then the attempt rows that changed."""
        if not loaded.dirty:
            return
        after = loaded.snapshot
        result = connection.execute(
            statements.UPDATE_INSTANCE,
            _snapshot_row(instance_id, loaded.version, after, self.clock(), loaded.head),
        )
        if result.rowcount != 1:
            raise _LostRace
        loaded.written = loaded.version + 1
        before = {view.attempt_no: view for view in loaded.base.attempts}
        for view in after.attempts:
            previous = before.get(view.attempt_no)
            if previous is None or statements.row_changed(previous, view):
                statements.upsert_attempt(connection, instance_id, view, loaded.policy)


def _check_versions(
    loaded_by_id: Mapping[str, _Loaded | None], expected_versions: Mapping[str, int]
) -> None:
    """Refuse a decision over several instances when any of them moved since it was taken."""
    for instance_id, expected in sorted(expected_versions.items()):
        loaded = loaded_by_id.get(instance_id)
        found = None if loaded is None else loaded.version
        if found != expected:
            raise StaleDecision(
                f"instance {instance_id} is at version {found}, the decision was taken on "
                f"version {expected}"
            )


def _created_event(
    event_id: str,
    instance_id: str,
    run_id: str,
    task_key: str,
    map_index: int,
    event_time: datetime,
    now: datetime,
) -> Event:
    """The scheduler's ``instance_created``, the first event of every instance."""
    return new_events.instance_created(
        event_id=event_id,
        instance_id=instance_id,
        event_time=event_time,
        observed_at=now,
        task_key=task_key,
        map_index=map_index,
        run_id=run_id,
    )


def _snapshot_row(
    instance_id: str,
    expected_version: int,
    snapshot: InstanceSnapshot,
    now: datetime,
    head: str | None,
) -> dict[str, object]:
    """The parameters of ``UPDATE_INSTANCE``: the compare-and-set of one instance row."""
    return {
        "b_id": instance_id,
        "b_expected": expected_version,
        "b_state": snapshot.state.value,
        "b_epoch": snapshot.epoch,
        "b_retry_at": snapshot.retry_at,
        "b_fold": codec.facts_to_json(snapshot.facts),
        "b_reason": snapshot.reason,
        "b_updated_observed_at": now,
        "b_chain_head": head,
    }


def _count(events: Sequence[Event], results: Sequence[Applied]) -> None:
    """Count outcomes (and the reconciler's applied decisions) for ``/metrics``: in memory
    here, added to ``metric_values`` by the process's housekeeping or its scrape."""
    for event, applied in zip(events, results, strict=True):
        outcome = applied.outcome.value
        metric_values.PROCESS_TALLY.add(
            "events_total", {"kind": event.kind.value, "outcome": outcome}
        )
        if event.actor == "reconciler" and applied.outcome is Outcome.APPLIED:
            metric_values.PROCESS_TALLY.add(
                "reconciler_decisions_total", {"kind": event.kind.value}
            )

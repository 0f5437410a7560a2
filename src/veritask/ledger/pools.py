"""Pools: named slot counts, the slots attempts hold, and the instances that wait (0009).

The slots in use are never a counter: they are the sum of ``pool_slots`` over the attempts
that name the pool and are in an active state. The transaction that opens an attempt locks
the pool's row (``FOR UPDATE`` on PostgreSQL; SQLite has one writer), counts, and writes the
attempt's pool in the same commit; the attempt's terminal event moves its row out of the
active states, which frees the slots. A crash of any process therefore never leaks a slot nor
takes one twice: there is nothing to release but the attempt's own state.

``pool_waits`` keeps the instances that may run but wait, so that a pass over one run ranks
its candidates against the other runs' waiters (priorities across runs). Its rows are hints:
an instance that no longer waits is ignored by its state, and a row nobody has seen for
:data:`WAIT_FRESH` is ignored too (its run is read again long before that while it waits).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from veritask.core import admission, reasons
from veritask.core.states import ACTIVE_ATTEMPT_STATES, InstanceState
from veritask.ledger import schema

#: A waiter row not seen again for this long no longer holds a place.
WAIT_FRESH: Final = timedelta(seconds=30)
#: A waiter row seen again is written again only when older than this.
_WAIT_REFRESH: Final = timedelta(seconds=5)
_ACTIVE: Final = sorted(state.value for state in ACTIVE_ATTEMPT_STATES)
_WAITING: Final = (InstanceState.CREATED.value, InstanceState.UP_FOR_RETRY.value)

_p = schema.pools.c
_a = schema.attempts.c
_w = schema.pool_waits.c
_i = schema.task_instances.c
_r = schema.runs.c
_d = schema.definitions.c


@dataclass(frozen=True)
class PoolRow:
    """A pool as listed: its size (None: unlimited) and what it holds now."""

    name: str
    slots: int | None
    used: int
    waiting: int
    actor: str | None
    updated_at: datetime | None


@dataclass(frozen=True)
class Wanted:
    """An opening that names a pool, with what ranks it."""

    claim: admission.Claim
    run_id: str
    task_key: str


# -- the pools themselves ------------------------------------------------------------------


def set_pool(connection: Connection, *, name: str, slots: int, actor: str, now: datetime) -> bool:
    """Create or resize a pool; True when it was created."""
    values = {"slots": slots, "actor": actor, "updated_at": now}
    resize = sa.update(schema.pools).where(_p.name == name).values(values)
    if connection.execute(resize).rowcount:
        return False
    created = connection.execute(
        _insert(connection, schema.pools)
        .values(name=name, **values)
        .on_conflict_do_nothing(index_elements=["name"])
    )
    if created.rowcount:
        return True
    connection.execute(resize)  # another admin created it meanwhile: this size wins
    return False


def delete_pool(connection: Connection, name: str) -> bool:
    """Forget a pool; its running attempts finish, and what waits for it keeps waiting."""
    return bool(connection.execute(sa.delete(schema.pools).where(_p.name == name)).rowcount)


def list_pools(connection: Connection, *, now: datetime, name: str | None = None) -> list[PoolRow]:
    """The defined pools and the default one (unlimited unless defined), by name."""
    query = sa.select(_p.name, _p.slots, _p.actor, _p.updated_at).order_by(_p.name)
    if name is not None:
        query = query.where(_p.name == name)
    defined = {row.name: row for row in connection.execute(query)}
    names = sorted(defined)
    if admission.DEFAULT_POOL not in defined and name in (None, admission.DEFAULT_POOL):
        names = sorted([*names, admission.DEFAULT_POOL])
    used = usage(connection, names)
    waiting = _waiting_counts(connection, names, now)
    rows = []
    for pool in names:
        found = defined.get(pool)
        rows.append(
            PoolRow(
                name=pool,
                slots=None if found is None else found.slots,
                used=used.get(pool, 0),
                waiting=waiting.get(pool, 0),
                actor=None if found is None else found.actor,
                updated_at=None if found is None else found.updated_at,
            )
        )
    return rows


def usage(connection: Connection, names: Collection[str]) -> dict[str, int]:
    """The slots in use per pool: active attempts that name it."""
    if not names:
        return {}
    query = (
        sa.select(_a.pool, sa.func.coalesce(sa.func.sum(_a.pool_slots), 0))
        .where(_a.pool.in_(sorted(names)), _a.state.in_(_ACTIVE))
        .group_by(_a.pool)
    )
    return {str(pool): int(used) for pool, used in connection.execute(query)}


def holders(connection: Connection, name: str, limit: int) -> tuple[list[str], int]:
    """A few of the tasks holding the pool's slots (``definition.task``) and how many hold."""
    # A wait's attempt names the default pool with no slots: it holds none of them.
    where = (_a.pool == name, _a.state.in_(_ACTIVE), _a.pool_slots != 0)
    count = connection.execute(sa.select(sa.func.count()).where(*where)).scalar_one()
    query = (
        sa.select(_d.name, _i.task_key)
        .select_from(
            schema.attempts.join(schema.task_instances, _i.id == _a.instance_id)
            .join(schema.runs, _r.id == _i.run_id)
            .join(schema.definitions, _d.id == _r.definition_id)
        )
        .where(*where)
        .order_by(_a.instance_id, _a.attempt_no)
        .limit(limit)
    )
    return [f"{row.name}.{row.task_key}" for row in connection.execute(query)], int(count)


def waiting_reasons(
    connection: Connection, instance_ids: Collection[str], *, now: datetime
) -> dict[str, str]:
    """Why each of these instances that waits for its pool waits, read now (by instance)."""
    ids = sorted(instance_ids)
    if not ids:
        return {}
    rows = connection.execute(
        sa.select(_w.instance_id, _w.pool, _w.slots)
        .select_from(schema.pool_waits.join(schema.task_instances, _i.id == _w.instance_id))
        .where(_w.instance_id.in_(ids), _w.seen_at >= now - WAIT_FRESH, _i.state.in_(_WAITING))
    ).all()
    states: dict[str, admission.Pool | None] = {}
    found: dict[str, str] = {}
    for row in rows:
        if row.pool not in states:
            states[row.pool] = _pool_state(connection, row.pool)
        pool = states[row.pool]
        if pool is not None:
            found[row.instance_id] = admission.full_reason(pool, row.slots)
        elif row.pool != admission.DEFAULT_POOL:
            found[row.instance_id] = reasons.POOL_UNDEFINED.format(pool=row.pool, name=row.pool)
    return found


def waiting_reason(connection: Connection, instance_id: str, *, now: datetime) -> str | None:
    """Why a waiting instance waits for its pool, read now; None if it does not."""
    return waiting_reasons(connection, [instance_id], now=now).get(instance_id)


# -- the opening transaction ---------------------------------------------------------------


def headroom(connection: Connection, names: Collection[str]) -> dict[str, int | None]:
    """Free slots per pool, read without a lock (a hint for how many to try to open):
    None for an unlimited one (the default pool while undefined), 0 for an undefined one."""
    wanted = sorted(names)
    sizes = {
        row.name: int(row.slots)
        for row in connection.execute(sa.select(_p.name, _p.slots).where(_p.name.in_(wanted)))
    }
    used = usage(connection, list(sizes))
    free: dict[str, int | None] = {}
    for name in wanted:
        if name in sizes:
            free[name] = max(0, sizes[name] - used.get(name, 0))
        else:
            free[name] = None if name == admission.DEFAULT_POOL else 0
    return free


def waiting_since(
    connection: Connection, instance_ids: Collection[str], *, now: datetime
) -> dict[str, datetime]:
    """Since when each of these instances waits for its pool (live waits only)."""
    ids = sorted(instance_ids)
    if not ids:
        return {}
    query = sa.select(_w.instance_id, _w.since).where(
        _w.instance_id.in_(ids), _w.seen_at >= now - WAIT_FRESH
    )
    return {row.instance_id: row.since for row in connection.execute(query)}


def admit(
    connection: Connection,
    wanted: Sequence[Wanted],
    *,
    now: datetime,
    aging: timedelta | None,
) -> dict[str, admission.Verdict]:
    """Lock the pools the openings name, count their slots, rank the openings against the
    pools' other waiters, and return the verdict for each (by instance id)."""
    names = sorted({w.claim.pool for w in wanted})
    sizes = _lock(connection, names)
    limited = [name for name in names if name in sizes]
    used = usage(connection, limited)
    pools: dict[str, admission.Pool | None] = {}
    for name in names:
        if name not in sizes:
            pools[name] = None
            continue
        pool = admission.Pool(name, sizes[name], used.get(name, 0))
        if pool.used + min(w.claim.slots for w in wanted if w.claim.pool == name) > sizes[name]:
            named, count = holders(connection, name, admission.HOLDERS_NAMED)
            pool = admission.Pool(name, sizes[name], pool.used, named, count)
        pools[name] = pool
    # A run ranks its own waiting tasks before it asks (it sends its best ones): of its
    # waits, only those of the openings asked for now are read, for since when they wait.
    waiters = _live_waiters(
        connection,
        limited,
        now,
        runs={w.run_id for w in wanted},
        asking={w.claim.instance_id for w in wanted},
    )
    known = {w.instance_id: w.since for w in waiters}
    claims = [_with_since(w.claim, known.get(w.claim.instance_id)) for w in wanted]
    return admission.admit(claims, waiters, pools, now=now, aging=aging)


def settle(
    connection: Connection,
    *,
    opened: Iterable[tuple[str, int, admission.Claim]],
    waiting: Sequence[Wanted],
    now: datetime,
) -> None:
    """In the opening transaction: write the pool of each attempt opened (this takes its
    slots), forget their waits, and record or refresh the waits of those that wait."""
    taken = list(opened)
    if taken:
        connection.execute(
            _ASSIGN,
            [
                {"b_id": instance_id, "b_no": no, "b_pool": claim.pool, "b_slots": claim.slots}
                for instance_id, no, claim in taken
            ],
        )
        opened_ids = sorted({instance_id for instance_id, _, _ in taken})
        connection.execute(sa.delete(schema.pool_waits).where(_w.instance_id.in_(opened_ids)))
    if not waiting:
        return
    ids = sorted(w.claim.instance_id for w in waiting)
    seen = {
        row.instance_id: row.seen_at
        for row in connection.execute(
            sa.select(_w.instance_id, _w.seen_at).where(_w.instance_id.in_(ids))
        )
    }
    new = [w for w in waiting if w.claim.instance_id not in seen]
    stale = sorted(i for i, at in seen.items() if at < now - _WAIT_REFRESH)
    if new:
        # Another scheduler moving the same run may record the same wait: the first stays.
        connection.execute(
            _insert(connection, schema.pool_waits).on_conflict_do_nothing(
                index_elements=["instance_id"]
            ),
            [
                {
                    "instance_id": w.claim.instance_id,
                    "pool": w.claim.pool,
                    "run_id": w.run_id,
                    "task_key": w.task_key,
                    "slots": w.claim.slots,
                    "priority": w.claim.priority,
                    "logical_time": w.claim.logical_time,
                    "since": now,
                    "seen_at": now,
                }
                for w in new
            ],
        )
    if stale:
        # A row that had lapsed starts its wait again: it held no place meanwhile.
        connection.execute(
            sa.update(schema.pool_waits)
            .where(_w.instance_id.in_(stale), _w.seen_at < now - WAIT_FRESH)
            .values(since=now)
        )
        connection.execute(
            sa.update(schema.pool_waits).where(_w.instance_id.in_(stale)).values(seen_at=now)
        )


def full_since(connection: Connection, *, now: datetime) -> dict[str, datetime]:
    """Per defined pool with live waiters: since when its oldest waiter waits."""
    query = (
        sa.select(_w.pool, sa.func.min(_w.since))
        .select_from(
            schema.pool_waits.join(schema.task_instances, _i.id == _w.instance_id).join(
                schema.pools, _p.name == _w.pool
            )
        )
        .where(_w.seen_at >= now - WAIT_FRESH, _i.state.in_(_WAITING))
        .group_by(_w.pool)
    )
    return {str(pool): since for pool, since in connection.execute(query)}


def forget_ended_waits(connection: Connection) -> int:
    """Delete the waits of instances that no longer wait (housekeeping)."""
    waiting = sa.select(_i.id).where(_i.state.in_(_WAITING))
    return int(
        connection.execute(
            sa.delete(schema.pool_waits).where(_w.instance_id.not_in(waiting))
        ).rowcount
    )


#: The attempt's columns this module writes, once, in the transaction that opens it.
SLOT_COLUMNS: Final = ("pool", "pool_slots")

_ASSIGN = (
    sa.update(schema.attempts)
    .where(_a.instance_id == sa.bindparam("b_id"), _a.attempt_no == sa.bindparam("b_no"))
    .values(pool=sa.bindparam("b_pool"), pool_slots=sa.bindparam("b_slots"))
)


def _insert(connection: Connection, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    return (postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert)(table)


def _lock(connection: Connection, names: Sequence[str]) -> dict[str, int]:
    """The defined pools among ``names`` with their sizes, their rows locked until commit
    (in name order, so two schedulers never deadlock on them)."""
    if not names:
        return {}
    query = (
        sa.select(_p.name, _p.slots).where(_p.name.in_(names)).order_by(_p.name).with_for_update()
    )
    return {row.name: int(row.slots) for row in connection.execute(query)}


def _pool_state(connection: Connection, name: str) -> admission.Pool | None:
    slots = connection.execute(sa.select(_p.slots).where(_p.name == name)).scalar()
    if slots is None:
        return None
    used = usage(connection, [name]).get(name, 0)
    named, count = holders(connection, name, admission.HOLDERS_NAMED)
    return admission.Pool(name, int(slots), used, named, count)


def _live_waiters(
    connection: Connection,
    names: Sequence[str],
    now: datetime,
    *,
    runs: Collection[str],
    asking: Collection[str],
) -> list[admission.Claim]:
    if not names:
        return []
    query = (
        sa.select(schema.pool_waits)
        .select_from(schema.pool_waits.join(schema.task_instances, _i.id == _w.instance_id))
        .where(
            _w.pool.in_(names),
            _w.seen_at >= now - WAIT_FRESH,
            _i.state.in_(_WAITING),
            sa.or_(_w.run_id.not_in(sorted(runs)), _w.instance_id.in_(sorted(asking))),
        )
    )
    return [
        admission.Claim(
            instance_id=row.instance_id,
            pool=row.pool,
            slots=row.slots,
            priority=row.priority,
            logical_time=row.logical_time,
            since=row.since,
        )
        for row in connection.execute(query)
    ]


def _waiting_counts(
    connection: Connection, names: Sequence[str], now: datetime
) -> Mapping[str, int]:
    if not names:
        return {}
    query = (
        sa.select(_w.pool, sa.func.count())
        .select_from(schema.pool_waits.join(schema.task_instances, _i.id == _w.instance_id))
        .where(_w.pool.in_(names), _w.seen_at >= now - WAIT_FRESH, _i.state.in_(_WAITING))
        .group_by(_w.pool)
    )
    return {str(pool): int(count) for pool, count in connection.execute(query)}


def _with_since(claim: admission.Claim, since: datetime | None) -> admission.Claim:
    if since is None or since >= claim.since:
        return claim
    return admission.Claim(
        claim.instance_id, claim.pool, claim.slots, claim.priority, claim.logical_time, since
    )

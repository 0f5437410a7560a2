"""Pools with the real scheduler and the local executor, on SQLite and PostgreSQL.

Every task appends a ``start`` and an ``end`` line to a marker file around its work; the most
tasks of a pool ever between their start and their end is the pool's real concurrency, seen
by the tasks themselves rather than by the ledger.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import (
    FAST,
    Harness,
    Ledgers,
    kill_leftovers,
    scheduler_processes,
    start_scheduler,
    wait_for,
)
from veritask.core import admission, new_events
from veritask.core.events import OpenReason
from veritask.core.judge import Outcome
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.execution import layout, local
from veritask.ids import time_ordered_id
from veritask.ledger import dialects, pools, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers

I = InstanceState  # noqa: E741 - a short name for the many states below
R = RunExecutionState

pytestmark = pytest.mark.slow


def pooled(name: str, marker: Path, *, tasks: int, pool: str, sleep: float = 0.4) -> str:
    """A definition of ``tasks`` independent tasks in ``pool``, each marking its start and end."""
    mark = f">> {marker}"
    work = f'echo "start $VERITASK_TASK" {mark}; sleep {sleep}; echo "end $VERITASK_TASK" {mark}'
    lines = [f"name: {name}", "concurrency: allow", "tasks:"]
    lines += [f"  t{i}: {{run: '{work}', pool: {pool}}}" for i in range(tasks)]
    return "\n".join(lines) + "\n"


def most_at_once(marker: Path) -> int:
    """The most tasks that were between their start and their end at the same time."""
    running = highest = 0
    for line in marker.read_text().splitlines() if marker.exists() else []:
        running += 1 if line.startswith("start") else -1
        highest = max(highest, running)
    return highest


def set_pool(ledger: Ledger, name: str, slots: int) -> None:
    with ledger.engine.begin() as connection:
        pools.set_pool(
            connection, name=name, slots=slots, actor="operator:test", now=ledger.clock()
        )


def used(ledger: Ledger, name: str) -> int:
    with dialects.read_transaction(ledger.engine) as connection:
        return pools.usage(connection, [name]).get(name, 0)


def reason(ledger: Ledger, instance_id: str) -> str | None:
    with dialects.read_transaction(ledger.engine) as connection:
        return pools.waiting_reason(connection, instance_id, now=ledger.clock())


def running_count(harness: Harness, run_id: str) -> int:
    states = harness.states(run_id).values()
    return sum(state in (I.SCHEDULED, I.QUEUED, I.RUNNING) for state in states)


def test_a_pool_of_two_never_runs_more_than_two_of_six(harness: Harness, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    set_pool(harness.ledger, "warehouse", 2)
    harness.apply(pooled("six", marker, tasks=6, pool="warehouse"))
    run_id = harness.trigger("six")

    def two_open_four_waiting() -> bool:
        states = list(harness.states(run_id).values())
        return running_count(harness, run_id) == 2 and states.count(I.CREATED) == 4

    harness.until(two_open_four_waiting, what="two open, four waiting")
    waiting = [i for i in harness.instances(run_id).values() if i.state is I.CREATED]
    why = reason(harness.ledger, waiting[0].id)
    assert why is not None
    assert why.startswith("waiting for pool warehouse (2 of 2 slots used by six.t")
    assert used(harness.ledger, "warehouse") == 2

    assert harness.finish(run_id)[0] is R.SUCCESS
    assert most_at_once(marker) == 2
    assert marker.read_text().count("start") == 6
    # Every slot came back with its attempt's end; no wait is left behind.
    assert used(harness.ledger, "warehouse") == 0
    assert reason(harness.ledger, waiting[0].id) is None
    # One attempt each: waiting opened nothing that had to be undone.
    for instance in harness.instances(run_id).values():
        assert [a[0] for a in harness.attempts(instance.id)] == [1]
    assert harness.assert_snapshots_are_folds() > 0


def test_resizing_a_pool_takes_effect_at_once(harness: Harness, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    set_pool(harness.ledger, "api", 1)
    harness.apply(pooled("resize", marker, tasks=6, pool="api", sleep=1.5))
    run_id = harness.trigger("resize")
    harness.until(lambda: running_count(harness, run_id) == 1, what="one open")
    for _ in range(20):
        harness.tick()
    assert running_count(harness, run_id) == 1

    set_pool(harness.ledger, "api", 3)
    harness.until(lambda: running_count(harness, run_id) == 3, what="three open", timeout=5)

    # Shrinking below the slots in use stops nothing: the three finish, then one at a time.
    set_pool(harness.ledger, "api", 1)
    harness.until(lambda: used(harness.ledger, "api") == 1, what="back to one", timeout=20)
    assert harness.finish(run_id, timeout=60)[0] is R.SUCCESS
    assert most_at_once(marker) == 3
    assert used(harness.ledger, "api") == 0


def test_a_task_naming_an_undefined_pool_waits_until_it_is_defined(
    harness: Harness, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    harness.apply(pooled("later", marker, tasks=2, pool="gpu", sleep=0.1))
    run_id = harness.trigger("later")
    for _ in range(20):
        harness.tick()
    instances = harness.instances(run_id)
    assert {i.state for i in instances.values()} == {I.CREATED}
    assert reason(harness.ledger, instances["t0"].id) == (
        "waiting for pool gpu, which is not defined (veritask pool set gpu --slots N)"
    )
    set_pool(harness.ledger, "gpu", 1)
    assert harness.finish(run_id)[0] is R.SUCCESS
    assert most_at_once(marker) == 1


def test_tasks_that_name_no_pool_share_the_default_pool_once_it_is_defined(
    harness: Harness, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    text = pooled("plain", marker, tasks=4, pool="default").replace(", pool: default", "")
    harness.apply(text)
    set_pool(harness.ledger, "default", 1)
    run_id = harness.trigger("plain")
    assert harness.finish(run_id)[0] is R.SUCCESS
    assert most_at_once(marker) == 1


def test_killing_the_scheduler_mid_run_leaks_no_slot(database_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    marker = tmp_path / "marker"
    db = Ledgers(dialects.create_engine(database_url))
    set_pool(db.ledger, "warehouse", 2)
    triggers.apply_definition(db.ledger, pooled("killed", marker, tasks=8, pool="warehouse"))
    run_id = triggers.trigger(
        db.ledger, name="killed", kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id
    try:
        with scheduler_processes() as started:
            for round_ in range(3):
                process = start_scheduler(started, home, database_url, tmp_path / "s.log")
                # Dies with two attempts open, at a different point of their lives each time.
                wait_for(lambda: used(db.ledger, "warehouse") == 2, what="two slots taken")
                time.sleep(0.15 * round_)
                process.kill()
                process.wait(timeout=10)
                assert used(db.ledger, "warehouse") <= 2
            final = start_scheduler(started, home, database_url, tmp_path / "s.log")
            wait_for(lambda: db.run(run_id)[0] is R.SUCCESS, timeout=90, what="the run to succeed")
            final.send_signal(signal.SIGTERM)
            assert final.wait(timeout=30) == 0
        assert most_at_once(marker) <= 2
        assert used(db.ledger, "warehouse") == 0
        with dialects.read_transaction(db.engine) as connection:
            pooled_attempts = connection.execute(
                sa.select(sa.func.count()).where(schema.attempts.c.pool == "warehouse")
            ).scalar_one()
        # Each attempt the ledger knows took its slot when it opened; none opened unpooled.
        assert pooled_attempts == len(
            [a for i in db.instances(run_id).values() for a in db.attempts(i.id)]
        )
        assert db.assert_snapshots_are_folds() > 0
    finally:
        local.LocalExecutor(home=home).shutdown_supervisor()
        kill_leftovers(layout.ExecutorHome(home / "executor"))
        db.engine.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_two_schedulers_on_postgres_never_over_commit_a_pool(
    database_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    marker = tmp_path / "marker"
    db = Ledgers(dialects.create_engine(database_url))
    set_pool(db.ledger, "warehouse", 3)
    for name in ("north", "south", "east"):
        text = pooled(name, marker, tasks=6, pool="warehouse", sleep=0.3)
        triggers.apply_definition(db.ledger, text)
    try:
        with scheduler_processes() as started:
            first = start_scheduler(started, home, database_url, tmp_path / "first.log")
            second = start_scheduler(started, home, database_url, tmp_path / "second.log")
            wait_for(lambda: len(_scheduler_pids(db)) == 2, what="both schedulers", timeout=30)
            runs = [
                triggers.trigger(
                    db.ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:test"
                ).run_id
                for name in ("north", "south", "east")
            ]
            highest = 0

            def all_done() -> bool:
                nonlocal highest
                highest = max(highest, used(db.ledger, "warehouse"))
                return all(db.run(run_id)[0] is R.SUCCESS for run_id in runs)

            wait_for(all_done, timeout=120, what="every run to succeed", interval=0.02)
            assert first.poll() is None and second.poll() is None
        assert highest <= 3
        assert most_at_once(marker) <= 3
        assert marker.read_text().count("start") == 18
        assert used(db.ledger, "warehouse") == 0
        assert not [a for a in db.alerts() if a[0] == "platform"]
    finally:
        local.LocalExecutor(home=home).shutdown_supervisor()
        kill_leftovers(layout.ExecutorHome(home / "executor"))
        db.engine.dispose()


def _scheduler_pids(db: Ledgers) -> list[int]:
    with dialects.read_transaction(db.engine) as connection:
        return list(connection.execute(sa.select(schema.schedulers.c.pid)).scalars())


@pytest.mark.postgres
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_openings_racing_in_two_processes_never_over_commit(database_url: str) -> None:
    """Two ledgers (two connections, as two schedulers) open attempts of one pool at once,
    one instance per transaction, as fast as they can: the pool's row lock serialises the
    count and the opening, so no more attempts open than the pool has slots."""
    db = Ledgers(dialects.create_engine(database_url))
    set_pool(db.ledger, "race", 3)
    triggers.apply_definition(db.ledger, pooled("race", Path("/dev/null"), tasks=40, pool="race"))
    run_id = triggers.trigger(
        db.ledger, name="race", kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id
    ids = sorted(i.id for i in db.instances(run_id).values())
    ledgers = [Ledger(dialects.create_engine(database_url)) for _ in range(2)]
    opened: list[int] = [0, 0]
    barrier = threading.Barrier(2)

    def open_all(index: int) -> None:
        ledger = ledgers[index]
        barrier.wait()
        # Each takes every instance, in opposite orders: they race on every one of them.
        for instance_id in ids if index == 0 else reversed(ids):
            event = new_events.attempt_opened(
                event_id=time_ordered_id(),
                instance_id=instance_id,
                attempt_no=1,
                event_time=ledger.clock(),
                token_hash="hash",
                reason=OpenReason.FIRST,
                retry_index=0,
                resubmit_index=0,
            )
            claim = admission.Claim(instance_id, "race", 1, 0, None, ledger.clock())
            wanted = pools.Wanted(claim, run_id, "t")
            [result] = ledger.open_attempts([(event, wanted)], aging=None)
            if not isinstance(result, admission.Verdict) and result.outcome is Outcome.APPLIED:
                opened[index] += 1

    try:
        threads = [threading.Thread(target=open_all, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert sum(opened) == 3
        assert used(db.ledger, "race") == 3
        states = db.states(run_id)
        assert sum(state is I.SCHEDULED for state in states.values()) == 3
    finally:
        for ledger in ledgers:
            ledger.engine.dispose()
        db.engine.dispose()


def test_a_higher_priority_opens_first_across_runs(harness: Harness, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    set_pool(harness.ledger, "wh", 1)
    harness.apply(pooled("blocker", marker, tasks=1, pool="wh", sleep=1.0))
    harness.apply(pooled("low", marker, tasks=3, pool="wh", sleep=0.05))
    high = pooled("high", marker, tasks=3, pool="wh", sleep=0.05)
    harness.apply(high.replace("concurrency: allow\n", "concurrency: allow\npriority: 9\n"))
    blocker = harness.trigger("blocker")
    harness.until(lambda: used(harness.ledger, "wh") == 1, what="the blocker to hold the pool")
    low = harness.trigger("low")
    high_run = harness.trigger("high")
    for run_id in (low, high_run, blocker):
        assert harness.finish(run_id, timeout=60)[0] is R.SUCCESS
    starts = [line.split()[1] for line in marker.read_text().splitlines() if "start" in line]
    runs = {
        instance.id: name
        for name, run_id in (("blocker", blocker), ("low", low), ("high", high_run))
        for instance in harness.instances(run_id).values()
    }
    assert len(starts) == 7 and len(runs) == 7
    # The tasks are t0.. in every run: the order of runs is read from the ledger instead.
    order = sorted(runs, key=lambda instance_id: _opened_at(harness, instance_id))
    assert [runs[i] for i in order] == ["blocker"] + ["high"] * 3 + ["low"] * 3
    assert most_at_once(marker) == 1


def _opened_at(harness: Harness, instance_id: str) -> int:
    [opened] = [e for e in harness.history(instance_id) if e.kind == "attempt_opened"]
    return opened.position


def test_a_pool_full_past_the_threshold_raises_a_queue_quota_alert_naming_it(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    settings = dataclasses.replace(FAST, pool_full_alert_after=timedelta(seconds=1))
    harness = make_harness(settings=settings)
    marker = tmp_path / "marker"
    set_pool(harness.ledger, "narrow", 1)
    harness.apply(pooled("crowd", marker, tasks=2, pool="narrow", sleep=2.5))
    run_id = harness.trigger("crowd")

    def alerted() -> list[str]:
        return [m for c, m, _ in harness.alerts() if c == "queue_quota"]

    [message] = harness.until(alerted, what="the queue_quota alert", timeout=20)
    assert message.startswith("pool narrow has kept tasks waiting since ")
    assert message.endswith("(1 of 1 slots used, 1 task(s) waiting)")
    assert harness.finish(run_id)[0] is R.SUCCESS
    assert len(alerted()) == 1  # one open alert per pool, not one per sweep


def test_every_task_held_back_says_why_even_those_not_tried_yet(
    harness: Harness, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    set_pool(harness.ledger, "one", 1)
    harness.apply(pooled("many", marker, tasks=12, pool="one", sleep=0.3))
    run_id = harness.trigger("many")
    harness.until(lambda: used(harness.ledger, "one") == 1, what="one open")
    harness.tick()
    waiting = [i.id for i in harness.instances(run_id).values() if i.state is I.CREATED]
    assert len(waiting) == 11
    reasons = {reason(harness.ledger, instance_id) for instance_id in waiting}
    assert all(
        r is not None and r.startswith("waiting for pool one (1 of 1 slots used by many.t")
        for r in reasons
    ), reasons
    assert harness.finish(run_id, timeout=60)[0] is R.SUCCESS
    assert most_at_once(marker) == 1


def test_a_task_its_run_did_not_offer_never_takes_a_slot_from_one_it_did(
    database_url: str,
) -> None:
    """A run offers its pool its best-ranked ready tasks and only records the others' waits.
    However long one of those has waited (aging), it must not be given the slot that a task
    offered with an opening could take: nothing would open, at every pass, for ever."""
    db = Ledgers(dialects.create_engine(database_url))
    set_pool(db.ledger, "p", 1)
    triggers.apply_definition(db.ledger, pooled("aged", Path("/dev/null"), tasks=2, pool="p"))
    run_id = triggers.trigger(
        db.ledger, name="aged", kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id
    offered, held = sorted(i.id for i in db.instances(run_id).values())

    def wanted(instance_id: str) -> pools.Wanted:
        claim = admission.Claim(instance_id, "p", 1, 0, None, db.ledger.clock())
        return pools.Wanted(claim, run_id, "t")

    try:
        [recorded] = db.ledger.open_attempts([(None, wanted(held))], aging=None)
        assert isinstance(recorded, admission.Verdict) and not recorded.admitted
        with db.engine.begin() as connection:
            connection.execute(
                sa.update(schema.pool_waits).values(since=db.ledger.clock() - timedelta(minutes=30))
            )
        event = new_events.attempt_opened(
            event_id=time_ordered_id(),
            instance_id=offered,
            attempt_no=1,
            event_time=db.ledger.clock(),
            token_hash="hash",
            reason=OpenReason.FIRST,
            retry_index=0,
            resubmit_index=0,
        )
        results = db.ledger.open_attempts(
            [(event, wanted(offered)), (None, wanted(held))], aging=timedelta(minutes=1)
        )
        assert not isinstance(results[0], admission.Verdict)
        assert results[0].outcome is Outcome.APPLIED
        assert isinstance(results[1], admission.Verdict)
        assert used(db.ledger, "p") == 1
    finally:
        db.engine.dispose()

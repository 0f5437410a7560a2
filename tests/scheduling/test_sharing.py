"""Several schedulers divide the runs (docs/scheduling.md, section 6; scheduling/sharing.py).

In-process schedulers over one database and one home (one executor, one outbox), ticked by
the test: each advances only the runs its share holds, together they finish every run with
each task run once, and a scheduler that leaves has its runs taken over by the others. The
same with real processes, one killed with SIGKILL mid-fan-out, is in test_faults.py.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.conftest import SQLITE
from tests.scheduling.harness import Harness, Ledgers, wait_for
from tests.scheduling.workload import executions, marked
from veritask.core.states import InstanceState, RunExecutionState
from veritask.ledger import dialects, scheduler_lease
from veritask.ledger.active_runs import ActiveRun
from veritask.ledger.ledger import Ledger
from veritask.scheduling import sharing
from veritask.scheduling.advance import Advanced, TickReport
from veritask.scheduling.lease import STALE_AFTER, SchedulerLease

pytestmark = pytest.mark.slow


def fanout(name: str, marker: Path, tasks: int) -> str:
    """``tasks`` independent tasks, each noting its start and end in ``marker``."""
    lines = [f"name: {name}", "concurrency: allow", "tasks:"]
    for index in range(tasks):
        lines.append(f"  t{index:03d}: {{run: {json.dumps(marked(marker, 'true'))}}}")
    return "\n".join(lines) + "\n"


def assert_each_ran_once(db: Ledgers, marker: Path, run_ids: Sequence[str], tasks: int) -> None:
    """Every run SUCCESS; every instance SUCCESS by its one attempt, which ran once."""
    ran = executions(marker)
    seen: set[tuple[str, int]] = set()
    for run_id in run_ids:
        assert db.run(run_id)[0] is RunExecutionState.SUCCESS
        instances = db.instances(run_id)
        assert len(instances) == tasks
        for key, instance in instances.items():
            assert instance.state is InstanceState.SUCCESS, (run_id, key)
            attempts = db.attempts(instance.id)
            assert [(n, state) for n, state, *_ in attempts] == [(1, "SUCCESS")], (key, attempts)
            execution = ran[(instance.id, 1)]
            assert (execution.starts, execution.ends) == (1, 1), (run_id, key)
            seen.add((instance.id, 1))
    assert set(ran) == seen


class Shared:
    """In-process schedulers on one database and one home, each registered as a scheduler
    process is (its lease: a row in ``schedulers``, beaten every second while it stays),
    each with its membership."""

    def __init__(self, url: str, home: Path) -> None:
        self.url = url
        self.home = home
        self.db = Ledger(dialects.create_engine(url))
        self.made: list[tuple[Harness, SchedulerLease]] = []
        self._beating: set[str] = set()
        self._stop = threading.Event()
        self._beater = threading.Thread(target=self._beat, daemon=True)
        self._beater.start()

    def make(self, count: int) -> list[tuple[Harness, SchedulerLease]]:
        leases = [SchedulerLease(self.db) for _ in range(count)]
        for lease in leases:
            lease.acquire()
            self._beating.add(lease.id)
        for lease in leases:
            membership = sharing.membership_for(self.db, lease.id)
            if membership is not None:
                membership.read_every = 0.05
            self.made.append((Harness(self.url, self.home, membership=membership), lease))
        return list(self.made)

    def leave(self, lease: SchedulerLease) -> None:
        """The scheduler of ``lease`` stops and removes its row (as one does on SIGTERM)."""
        self._beating.discard(lease.id)
        lease.release()

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            for _, lease in list(self.made):
                if lease.id in self._beating:
                    lease.beat()

    def close(self) -> None:
        self._stop.set()
        self._beater.join(timeout=10)
        try:
            for harness, lease in self.made:
                try:
                    harness.close()
                finally:
                    lease.release()
        finally:
            self.db.engine.dispose()


@pytest.fixture
def shared(database_url: str, tmp_path: Path) -> Iterator[Shared]:
    made = Shared(database_url, tmp_path / "home")
    try:
        yield made
    finally:
        made.close()


def _spy_advances(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The ids of the runs ``harness``'s scheduler advances from now on."""
    advanced: set[str] = set()
    original = harness.scheduler.advancer.advance

    def advance(run: ActiveRun, now: object, report: TickReport) -> Advanced:
        advanced.add(run.id)
        return original(run, now, report)  # type: ignore[arg-type]

    monkeypatch.setattr(harness.scheduler.advancer, "advance", advance)
    return advanced


def _trigger_split(
    harness: Harness, name: str, shares: Sequence[sharing.Share], *, at_least: int, each: int
) -> list[str]:
    """Trigger runs of ``name`` until there are ``at_least`` and each share owns ``each``."""
    run_ids: list[str] = []
    while len(run_ids) < at_least or any(
        sum(share.owns(r) for r in run_ids) < each for share in shares
    ):
        run_ids.append(harness.trigger(name))
        assert len(run_ids) < 60, "the share never split the runs"
    return run_ids


def _tick_all(harnesses: Sequence[Harness]) -> Callable[[], None]:
    def step() -> None:
        if sum(h.scheduler.tick().work for h in harnesses) == 0:
            time.sleep(0.005)

    return step


@pytest.mark.postgres
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_two_schedulers_each_advance_their_share_and_together_finish_every_run(
    shared: Shared, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "marker"
    (first, first_lease), (second, second_lease) = shared.make(2)
    members = tuple(sorted((first_lease.id, second_lease.id)))
    assert first.scheduler.share.members == second.scheduler.share.members == members
    first.apply(fanout("spread", marker, 20))
    advanced = [_spy_advances(h, monkeypatch) for h in (first, second)]
    shares = [first.scheduler.share, second.scheduler.share]
    run_ids = _trigger_split(first, "spread", shares, at_least=10, each=3)

    wait_for(
        lambda: all(first.run(r)[0] is RunExecutionState.SUCCESS for r in run_ids),
        timeout=90,
        what="every run to succeed",
        step=_tick_all([first, second]),
    )

    for share, runs in zip(shares, advanced, strict=True):
        assert runs == {r for r in run_ids if share.owns(r)}
    assert not advanced[0] & advanced[1]
    assert_each_ran_once(first, marker, run_ids, 20)
    assert not [a for a in first.alerts() if a[0] == "platform"]


@pytest.mark.postgres
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_the_runs_of_a_scheduler_that_leaves_are_taken_over(
    shared: Shared,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    marker = tmp_path / "marker"
    (staying, _), (other, leaving) = shared.make(2)
    staying.apply(fanout("handed", marker, 5))
    shares = [staying.scheduler.share, other.scheduler.share]
    run_ids = _trigger_split(staying, "handed", shares, at_least=4, each=2)
    mine = [r for r in run_ids if shares[0].owns(r)]
    theirs = [r for r in run_ids if not shares[0].owns(r)]
    advanced = _spy_advances(staying, monkeypatch)

    # The other one never ticks: its runs wait, and the ones owned here finish.
    wait_for(
        lambda: all(staying.run(r)[0] is RunExecutionState.SUCCESS for r in mine),
        what="this scheduler's runs",
        step=_tick_all([staying]),
    )
    for run_id in theirs:
        assert set(staying.states(run_id).values()) == {InstanceState.CREATED}
    assert advanced == set(mine)

    # It leaves (as its heartbeat going stale would say): its runs move here.
    caplog.set_level(logging.INFO, logger="veritask.scheduling.scheduler")
    shared.leave(leaving)
    wait_for(
        lambda: all(staying.run(r)[0] is RunExecutionState.SUCCESS for r in run_ids),
        what="the runs taken over",
        step=_tick_all([staying]),
    )
    assert staying.scheduler.share.solo
    assert advanced == set(run_ids)
    assert "sharing work with 1 schedulers" in caplog.text
    assert_each_ran_once(staying, marker, run_ids, 5)


def test_alone_a_scheduler_moves_every_run(
    shared: Shared, tmp_path: Path, database_kind: str
) -> None:
    """SQLite has no membership to read (one scheduler only); on PostgreSQL a scheduler with
    no other alive owns every run."""
    marker = tmp_path / "marker"
    ((alone, _),) = shared.make(1)
    assert (alone.scheduler.membership is None) is (database_kind == SQLITE)
    assert alone.scheduler.share.solo
    alone.apply(fanout("alone", marker, 5))
    run_ids = [alone.trigger("alone") for _ in range(3)]
    wait_for(
        lambda: all(alone.run(r)[0] is RunExecutionState.SUCCESS for r in run_ids),
        what="every run to succeed",
        step=_tick_all([alone]),
    )
    assert_each_ran_once(alone, marker, run_ids, 5)


def test_a_scheduler_forgotten_while_silent_registers_again_at_its_beat(
    database_url: str,
) -> None:
    """A scheduler paused past ``STALE_AFTER`` has its row removed by the next one to start;
    at its next beat it registers again, so that the others count it in their share again."""
    ledger = Ledger(dialects.create_engine(database_url))
    lease = SchedulerLease(ledger)
    lease.acquire()
    try:
        with ledger.engine.begin() as connection:
            scheduler_lease.forget_scheduler(connection, lease.id)
        lease.beat()
        with dialects.read_transaction(ledger.engine) as connection:
            live = scheduler_lease.live_scheduler_ids(connection, ledger.clock() - STALE_AFTER)
        assert live == [lease.id]
    finally:
        lease.release()
        ledger.engine.dispose()

"""The full scan skips a big run whose instances have not moved, and sees any move at once.

The full scan re-reads every active run each second: it is how a scheduler learns what it did
not record itself (another process's report, a missed wake-up). For a run of thousands of
instances that sit RUNNING (waits, long tasks), the database sums the instances' states
instead, and the run is read only when that sum moved (or after a while regardless).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Connection

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import FAST, Harness
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import transports, waits
from veritask.ledger import dialects, run_store
from veritask.ledger.ledger import Ledger
from veritask.scheduling import intake, scheduler

I = InstanceState  # noqa: E741 - a short name for the states below

pytestmark = pytest.mark.slow

#: Every tick a full scan; any run of two instances or more gets a digest.
EVERY_TICK_FULL = replace(FAST, full_scan_every=timedelta(0), digest_from=2)


def two_waits(data: Path) -> str:
    return f"""\
name: quiet
tasks:
  a: {{wait: {{path: {data}/a, every: 1s}}}}
  b: {{wait: {{path: {data}/b, every: 1s}}}}
  c: {{run: "true", after: [a, b]}}
"""


def count_reads(monkeypatch: pytest.MonkeyPatch, run_id: str) -> list[str]:
    """A list that grows by one each time the scheduler reads the run's instances."""
    reads: list[str] = []
    read = run_store.instances_brief

    def counted(connection: Connection, wanted: str) -> list[run_store.InstanceBrief]:
        if wanted == run_id:
            reads.append(wanted)
        return read(connection, wanted)

    monkeypatch.setattr(run_store, "instances_brief", counted)
    return reads


def record_elsewhere(harness: Harness) -> int:
    """Record the outbox's reports through another ledger, as another scheduler would."""
    other = Ledger(dialects.create_engine(harness.url))
    try:
        drained = list(transports.drain_outbox(harness.home / "outbox"))
        other.apply_batch([intake.to_event(payload) for _, payload in drained])
        for path, _ in drained:
            transports.acknowledge(path)
        return len(drained)
    finally:
        other.engine.dispose()


def test_a_quiet_big_run_is_not_read_again_until_its_instances_move(
    make_harness: MakeHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    harness = make_harness(settings=EVERY_TICK_FULL)
    # Every report in the outbox, none handed over in memory: the other process records them.
    checker = harness.scheduler.dispatcher.executors["wait"]
    assert isinstance(checker, waits.WaitExecutor)
    checker.hand_over = None
    harness.apply(two_waits(data))
    run_id = harness.trigger("quiet")
    harness.until(
        lambda: {harness.instances(run_id)[t].state for t in ("a", "b")} == {I.RUNNING},
        what="both waits running",
    )
    for _ in range(3):  # read once more after the last move, to take its digest
        harness.tick()
    reads = count_reads(monkeypatch, run_id)

    for _ in range(20):
        harness.tick()
    assert reads == [], "a run whose instances did not move was read again"

    # The first wait's file appears; another process records its success.
    data.mkdir()
    (data / "a").touch()
    recorded = 0
    while harness.instances(run_id)["a"].state is not I.SUCCESS:
        recorded += record_elsewhere(harness)
    assert recorded > 0
    # A digest found unchanged a moment ago stands for a few seconds: the news waits...
    monkeypatch.setattr(scheduler, "_DIGEST_CHECK_SECONDS", 3600.0)
    harness.tick()
    assert reads == [], "a digest checked a moment ago was asked for again"
    # ...until the digest is asked for again.
    monkeypatch.setattr(scheduler, "_DIGEST_CHECK_SECONDS", 0.0)
    harness.tick()
    assert reads == [run_id], "the full scan did not see another process's news"

    (data / "b").touch()
    assert harness.finish(run_id) == (
        RunExecutionState.SUCCESS,
        "every leaf succeeded or was skipped",
    )


def test_a_run_with_news_of_its_own_is_read_at_once_whatever_its_digest(
    make_harness: MakeHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    harness = make_harness(settings=replace(EVERY_TICK_FULL, full_scan_every=timedelta(hours=1)))
    harness.apply(two_waits(data))
    run_id = harness.trigger("quiet")
    harness.until(
        lambda: {harness.instances(run_id)[t].state for t in ("a", "b")} == {I.RUNNING},
        what="both waits running",
    )
    data.mkdir()
    (data / "a").touch()
    (data / "b").touch()
    # No full scan in an hour: only the scheduler's own reports move the run.
    assert harness.finish(run_id) == (
        RunExecutionState.SUCCESS,
        "every leaf succeeded or was skipped",
    )

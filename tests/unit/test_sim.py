"""The deterministic simulator (tools/sim.py): a short pass of many seeds, a replay, and proof
that it fails when the platform is wrong.

The seeds here are shorter than ``make sim``'s (``CI_STEPS`` steps of faults instead of
``sim.STEPS``), so that 200 of them fit in CI's budget; ``make sim`` runs the long ones.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from tools import sim

from veritask.core.states import AttemptState, TriggerKind
from veritask.ledger import dialects, pools, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers

CI_SEEDS = 200
CI_STEPS = 8
#: A seed whose silent attempt stays silent past its lease and evidence window.
SILENT_LONG_ENOUGH = 4


@pytest.fixture(scope="module")
def scratch() -> Iterator[tuple[Path, Path]]:
    """A tmpfs directory and the migrated database each seed's is copied from."""
    directory = sim.scratch_directory()
    try:
        yield directory, sim.template(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_200_short_seeds_hold_every_invariant(scratch: tuple[Path, Path]) -> None:
    directory, migrated = scratch
    outcomes = [sim.run_seed(seed, directory, migrated, steps=CI_STEPS) for seed in range(CI_SEEDS)]

    failed = [
        f"seed {o.seed} at step {o.step}: {o.violation} "
        f"(replay: make sim SEED={o.seed} STEPS={CI_STEPS})"
        for o in outcomes
        if o.violation is not None
    ]
    assert failed == []
    faults: Counter[str] = Counter()
    for outcome in outcomes:
        faults.update(outcome.faults)
    # Every kind of fault was injected somewhere in the pass (else the pass proves little).
    assert set(faults) >= {
        "refuse_submit",
        "lose_answer",
        "go_silent",
        "unknown_while_silent",
        "late_report",
        "duplicate_report",
        "ignore_cancel",
        "crash_before_commit",
        "crash_after_commit",
        "crash_unknown_commit",
        "restart",
        "user_trigger",
        "user_cancel",
        "user_clear",
        "user_override",
        "two_schedulers",
        "forged_report",
    }


def test_a_seed_replays_the_same_history(scratch: tuple[Path, Path]) -> None:
    """Seed 0 has two schedulers sharing the runs, crashes and restarts."""
    directory, migrated = scratch

    first = sim.run_seed(0, directory, migrated)
    again = sim.run_seed(0, directory, migrated)

    assert first.faults["two_schedulers"] == 1
    assert first.violation is None
    assert (again.digest, again.faults) == (first.digest, first.faults)
    assert sim.run_seed(1, directory, migrated).digest != first.digest


def test_a_fenced_attempt_whose_answer_was_lost_is_replaced_once_it_reported_its_end(
    scratch: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the simulator (seed 6 of its first version), replayed here with chosen faults:
    attempt 1's acknowledgement is lost, so the ledger never learns its external id; its
    worker starts, goes silent, the attempt is fenced, then reports its end (recorded stale).
    Attempt 2 used to wait for ever for an engine it could not ask; it opens once the fenced
    attempt's own report says it ended."""
    directory, migrated = scratch
    seen: list[tuple[str, int, bool]] = []
    check = sim.check

    def remember(world: sim.World, *, at_rest: bool) -> None:
        if at_rest:
            seen.extend(_fenced_without_external_id(world))
        check(world, at_rest=at_rest)

    # The first attempt only: its answer lost, then silent; nothing else goes wrong.
    chosen = {"lose_answer": 1, "go_silent": 1}

    def fault(world: sim.World, kind: str, chance: float) -> bool:
        if chosen.get(kind, 0) > 0:
            chosen[kind] -= 1
            world.faults[kind] += 1
            return True
        return False

    def one_trigger(world: sim.World) -> None:
        if world.steps == 1:
            world.runs.append(
                triggers.trigger(
                    world.platform.ledger, name="sim", kind=TriggerKind.API, actor="user:sim"
                ).run_id
            )

    monkeypatch.setattr(sim, "check", remember)
    monkeypatch.setattr(sim.World, "fault", fault)
    monkeypatch.setattr(sim.World, "user_acts", one_trigger)
    monkeypatch.setattr(sim, "DEFINITION", sim.DEFINITION.replace("{on_unknown}", "retry"))

    outcome = sim.run_seed(SILENT_LONG_ENOUGH, directory, migrated)

    assert seen, f"seed {SILENT_LONG_ENOUGH} no longer plays this case: pick another"
    assert [replaced for _, _, replaced in seen] == [True], "attempt 2 never opened"
    assert outcome.violation is None


def _fenced_without_external_id(world: sim.World) -> list[tuple[str, int, bool]]:
    """The fenced attempts that had no external id, and whether their next attempt opened."""
    a = schema.attempts.c
    with dialects.read_transaction(world.engine) as connection:
        fenced = connection.execute(
            sa.select(a.instance_id, a.attempt_no).where(
                a.state == AttemptState.ABANDONED.value, a.external_id.is_(None)
            )
        ).all()
    ledger = Ledger(world.engine)
    found = []
    for instance_id, attempt_no in fenced:
        loaded = ledger.snapshot(instance_id)
        replaced = loaded is not None and loaded[0].epoch > attempt_no
        found.append((instance_id, attempt_no, replaced))
    return found


def test_a_pool_that_forgets_its_slots_in_use_is_caught(
    scratch: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted bug: the ledger counts no slot in use when it admits an opening. The
    simulator's engine-side count of the pool's attempts catches it within a few seeds."""
    directory, migrated = scratch

    def forgetful(connection: object, names: Collection[str]) -> dict[str, int]:
        return {}

    monkeypatch.setattr(pools, "usage", forgetful)

    caught = None
    for seed in range(20):
        outcome = sim.run_seed(seed, directory, migrated, steps=CI_STEPS)
        if outcome.violation is not None:
            caught = outcome
            break

    assert caught is not None, "20 seeds did not see a pool over its slots"
    assert "attempts of a 2-slot pool" in (caught.violation or "")

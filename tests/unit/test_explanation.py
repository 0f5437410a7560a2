"""The explanation of an instance as of an instant (veritask.core.explanation), over the golden
histories: each column is the fold of its events, and a late success is told apart."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.histories.format import HERE, History, load
from veritask.core import explanation, fold
from veritask.core.explanation import Axis, ChangeKind, Recorded, Refusal
from veritask.core.states import InstanceState


def _recorded(history: History) -> list[Recorded]:
    """The history's events in the order the ledger recorded them."""
    events = sorted(history.events, key=lambda e: (e.observed_at or e.event_time, e.event_id))
    return [Recorded(e, "applied") for e in events]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_a_lost_worker_is_lost_then_and_its_late_success_known_now() -> None:
    history = load(HERE / "lost_then_late_success.jsonl")
    as_of = _at("2026-03-01T12:03:00+00:00")  # the worker ended at 12:02:31, heard at 12:04:02
    refusal = Refusal(
        "ev-x",
        1,
        "lease_expired",
        "monitor",
        as_of,
        as_of - timedelta(seconds=1),
        "illegal now: the instance is LOST; only a RUNNING attempt can lose its lease",
    )

    told = explanation.explain_instance(
        history.instance_id, _recorded(history), [refusal], history.policy, as_of=as_of
    )

    assert told.known_then is not None and told.known_now is not None
    assert told.known_then.state is InstanceState.LOST
    assert told.known_then.made_by is not None
    assert (told.known_then.made_by.kind, told.known_then.made_by.rule) == (
        "lease_expired",
        "lease_expires",
    )
    assert told.known_now.state is InstanceState.SUCCESS
    made = told.known_now.made_by
    assert made is not None
    assert (made.event_id, made.late, made.rule) == ("ev-0008", True, "completion_decides")
    assert [c.event_id for c in told.late] == ["ev-0008"]
    # The reconciler's exit record (12:03:31) moved the recorded state; the worker's own
    # report, late, then only added its fact.
    [change] = told.afterwards
    assert (change.kind, change.from_state, change.to_state) == (
        ChangeKind.RECONCILIATION,
        "LOST",
        "SUCCESS",
    )
    [refused] = told.refused
    assert refused.rule == "illegal_lease"
    assert told.state_now is InstanceState.SUCCESS


def test_before_its_first_event_an_instance_has_no_state_and_one_axis_gives_one_column() -> None:
    history = load(HERE / "happy_path.jsonl")
    first = min(e.event_time for e in history.events)

    told = explanation.explain_instance(
        history.instance_id,
        _recorded(history),
        [],
        history.policy,
        as_of=first - timedelta(seconds=1),
        axes=frozenset({Axis.EVENT}),
    )

    assert told.known_then is None
    assert told.known_now is not None and told.known_now.state is None
    assert told.known_now.made_by is None


@pytest.mark.parametrize("path", sorted(HERE.glob("*.jsonl")), ids=lambda p: p.stem)
@pytest.mark.parametrize("by_event_time", [False, True], ids=["recorded", "reordered"])
def test_each_column_is_the_fold_of_its_events_at_every_instant(
    path: Path, by_event_time: bool
) -> None:
    """Also when the ledger's order is not that of the observed times (two writers)."""
    history = load(path)
    recorded = _recorded(history)
    if by_event_time:
        recorded.sort(key=lambda r: r.event.ordering_key())
    instants = sorted({r.observed_at for r in recorded} | {r.event.event_time for r in recorded})
    for as_of in instants:
        told = explanation.explain_instance(
            history.instance_id, recorded, [], history.policy, as_of=as_of
        )
        then = [r.event for r in recorded if r.observed_at <= as_of]
        happened = [r.event for r in recorded if r.event.event_time <= as_of]
        assert told.known_then is not None and told.known_now is not None
        assert told.known_then.state is fold.fold(history.instance_id, then, history.policy).state
        assert (
            told.known_now.state is fold.fold(history.instance_id, happened, history.policy).state
        )
        moved = {c.cause.event_id for c in told.afterwards}
        assert all(r.observed_at > as_of for r in recorded if r.event.event_id in moved)

"""When the scheduler's loop gathers reports before its next tick (scheduling/gathering.py)."""

from __future__ import annotations

import pytest

from veritask.scheduling import gathering
from veritask.scheduling.gathering import Gathering


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def in_flight(gather: Gathering, count: int, prefix: str = "i") -> None:
    for n in range(count):
        gather.note(f"{prefix}{n}", in_flight=True)


def test_few_attempts_in_flight_never_delay_the_next_tick(clock: Clock) -> None:
    gather = Gathering(window=0.05, from_in_flight=4, clock=clock)
    in_flight(gather, 3)
    assert gather.pause_after(tick_started=clock.now) == 0.0


def test_many_in_flight_start_a_tick_at_most_once_per_window(clock: Clock) -> None:
    gather = Gathering(window=0.05, from_in_flight=4, clock=clock)
    in_flight(gather, 4)
    started = clock.now
    clock.now += 0.02  # the tick itself took 20 ms
    assert gather.pause_after(tick_started=started) == pytest.approx(0.03)
    clock.now += 0.1  # a tick longer than the window: the next one starts at once
    assert gather.pause_after(tick_started=started) == 0.0


def test_an_attempt_that_ends_leaves_the_count(clock: Clock) -> None:
    gather = Gathering(window=0.05, from_in_flight=4, clock=clock)
    in_flight(gather, 4)
    gather.note("i0", in_flight=False)
    gather.note("never-seen", in_flight=False)
    assert gather.in_flight == 3
    assert gather.pause_after(tick_started=clock.now) == 0.0


def test_a_second_report_of_an_attempt_counts_it_once(clock: Clock) -> None:
    gather = Gathering(window=0.05, from_in_flight=2, clock=clock)
    gather.note("a", in_flight=True)  # QUEUED
    gather.note("a", in_flight=True)  # RUNNING
    assert gather.in_flight == 1


def test_silent_attempts_are_forgotten_and_fresh_ones_kept(clock: Clock) -> None:
    gather = Gathering(window=0.05, from_in_flight=2, clock=clock)
    in_flight(gather, 3, prefix="old")
    clock.now += gathering.FORGET_AFTER_SECONDS / 2
    gather.note("old0", in_flight=True)  # reported again: fresh, though added first
    in_flight(gather, 2, prefix="new")
    clock.now += gathering.FORGET_AFTER_SECONDS / 2 + 0.1
    assert gather.in_flight == 3  # old1 and old2 went silent too long
    clock.now += gathering.FORGET_AFTER_SECONDS
    assert gather.in_flight == 0


def test_a_zero_window_turns_gathering_off(clock: Clock) -> None:
    gather = Gathering(window=0.0, from_in_flight=1, clock=clock)
    in_flight(gather, 100)
    assert gather.pause_after(tick_started=clock.now) == 0.0

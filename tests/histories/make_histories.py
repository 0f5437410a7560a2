"""Write the golden histories once: ``python -m tests.histories.make_histories``.

Each story is told through :class:`Story` (so every event passed ``judge`` as the ledger
would), the way the loops would take their decisions (``decide``). The expectation of each
story is written here by hand from the documented rules, NOT read back from the fold: the generator
refuses to write a file whose fold disagrees with its expectation. Retry delays have no jitter
so that ``retry_at`` can be worked out by hand (end observed + delay).

Regenerating rewrites every file; review the diff, since a changed file means a changed
meaning of the fold.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from datetime import datetime, timedelta

from tests.histories.format import HERE, History, checkpoints, dumps, iso, mismatches
from tests.unit.story import Story
from veritask.core import decide
from veritask.core.events import Event, EventKind
from veritask.core.fold import fold
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.judge import Outcome, Verdict
from veritask.core.policy import Backoff, OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import EngineState, InstanceState

S = timedelta(seconds=1)
DELAY = 30 * S


def policy(
    *,
    max_retries: int = 2,
    timeout: timedelta | None = None,
    on_unknown: OnUnknown = OnUnknown.RETRY,
) -> TaskPolicy:
    return TaskPolicy(
        retry=RetryPolicy(
            max_retries=max_retries,
            backoff=Backoff.FIXED,
            delay=DELAY,
            max_delay=DELAY,
            jitter=0.0,
        ),
        timeout=timeout,
        lease=60 * S,
        evidence_window=300 * S,
        cancel_window=120 * S,
        on_unknown=on_unknown,
        max_resubmits=3,
    )


class Recorder(Story):
    """A story whose worker clock runs 2 s behind the platform's, as real clocks do."""

    WORKER_SKEW = -2 * S

    def make(
        self,
        kind: EventKind,
        attempt_no: int,
        actor: str,
        evidence: JSONObject | None = None,
        *,
        token: str | None = None,
    ) -> Event:
        event = super().make(kind, attempt_no, actor, evidence, token=token)
        if actor == "worker":
            event = dataclasses.replace(event, event_time=event.event_time + self.WORKER_SKEW)
        return event

    def open(self) -> Verdict:
        # The scheduler opens a retry when retry_at has come, by the platform's clock.
        retry_at = self.snapshot.retry_at
        if retry_at is not None and self.clock < retry_at:
            self.clock = retry_at
        return super().open()

    def take(self, events: list[Event] | tuple[Event, ...]) -> list[Verdict]:
        """Record decisions taken at the current clock."""
        verdicts = [self.record(e) for e in events]
        assert all(v.outcome is Outcome.APPLIED for v in verdicts), verdicts
        return verdicts

    def monitor(self) -> list[Verdict]:
        return self.take(
            decide.monitor(self.snapshot, self.policy, now=self.clock, next_id=self.next_id)
        )

    def reconcile(self, state: EngineState, source: str, **kw: int | str) -> decide.Reconciliation:
        exit_code = kw.get("exit_code")
        category = kw.get("error_category")
        observation = decide.Observation(
            state,
            source,
            self.clock,
            exit_code=exit_code if isinstance(exit_code, int) else None,
            error_category=category if isinstance(category, str) else None,
        )
        result = decide.reconcile(
            self.snapshot, self.policy, observation, now=self.clock, next_id=self.next_id
        )
        self.take(result.events)
        return result

    @property
    def log(self) -> tuple[Event, ...]:
        """The events the ledger recorded, in the order it recorded them."""
        return tuple(v.event for v in self.verdicts if v.recorded)


def attempt(
    state: str, open_reason: str, counters: tuple[int, int] = (0, 0), *, late: int = 0
) -> JSONObject:
    return {
        "state": state,
        "open_reason": open_reason,
        "counters": list(counters),
        "late": late,
        "conflict": False,
    }


def expect(
    state: InstanceState,
    epoch: int,
    attempts: dict[str, JSONValue],
    retry_at: datetime | None = None,
    **extra: JSONValue,
) -> JSONObject:
    return {
        "state": state.value,
        "epoch": epoch,
        "retry_at": iso(retry_at),
        "attempts": attempts,
        **extra,
    }


def observed(verdict: Verdict) -> datetime:
    assert verdict.event.observed_at is not None
    return verdict.event.observed_at


def running(story: Recorder) -> None:
    story.open()
    story.tick(2)
    story.ack()
    story.tick(3)
    story.start()


# -- the stories ------------------------------------------------------------------------------

Built = tuple[Recorder, JSONObject]


def happy_path() -> Built:
    story = Recorder(policy(), "daily_user_sync/2026-03-01/extract")
    running(story)
    story.tick(20)
    story.send(EventKind.PROGRESS, 1, "worker", {"phase": "extract", "done": 10, "total": 100})
    story.tick(20)
    story.heartbeat()
    story.tick(20)
    story.send(EventKind.PROGRESS, 1, "worker", {"phase": "load", "done": 100, "total": 100})
    story.tick(5)
    story.complete(0)
    return story, expect(InstanceState.SUCCESS, 1, {"1": attempt("SUCCESS", "first")})


def retry_then_success() -> Built:
    story = Recorder(policy(max_retries=2), "daily_user_sync/2026-03-01/transform")
    running(story)
    story.tick(40)
    failed = story.complete(1, "task_error")
    checkpoint = expect(
        InstanceState.UP_FOR_RETRY,
        1,
        {"1": attempt("FAILED", "first")},
        observed(failed) + DELAY,
        through=failed.event.event_id,
    )
    running(story)
    story.tick(30)
    story.complete(0)
    final = expect(
        InstanceState.SUCCESS,
        2,
        {"1": attempt("FAILED", "first"), "2": attempt("SUCCESS", "retry", (1, 0))},
        checkpoints=[checkpoint],
    )
    return story, final


def lost_then_late_success() -> Built:
    story = Recorder(policy(), "daily_user_sync/2026-03-01/load")
    running(story)
    story.tick(20)
    story.heartbeat()
    story.tick(61)  # the worker is paused (SIGSTOP): silence past the lease
    (lease,) = story.monitor()
    assert story.state is InstanceState.LOST
    checkpoint = expect(
        InstanceState.LOST, 1, {"1": attempt("LOST", "first")}, through=lease.event.event_id
    )
    story.tick(120)
    story.reconcile(EngineState.SUCCEEDED, "exit_record", exit_code=0, error_category="none")
    engine_saw = story.clock
    story.tick(30)
    # The worker's spooled completion, written when the task ended, arrives last.
    spooled = story.make(
        EventKind.COMPLETED, 1, "worker", {"exit_code": 0, "error_category": "none"}
    )
    spooled = dataclasses.replace(spooled, event_time=engine_saw - 60 * S)
    assert story.record(spooled).outcome is Outcome.APPLIED
    final = expect(
        InstanceState.SUCCESS, 1, {"1": attempt("SUCCESS", "first")}, checkpoints=[checkpoint]
    )
    return story, final


def lost_fenced_retry_succeeds() -> Built:
    story = Recorder(policy(max_retries=2), "daily_user_sync/2026-03-01/publish")
    running(story)
    story.tick(20)
    story.heartbeat()
    story.tick(61)
    story.monitor()
    story.tick(60)
    inside = story.reconcile(EngineState.UNKNOWN, "process_table")
    assert inside == decide.Reconciliation()
    story.tick(300)
    result = story.reconcile(EngineState.UNKNOWN, "process_table")
    assert result.stop_engine
    fence = story.verdicts[-1]
    assert fence.event.kind is EventKind.FENCED
    # The next attempt may open as soon as the fence is recorded: the evidence window was
    # the wait (on_unknown retry: "fence the old attempt, open N+1"; only the count is a retry's).
    checkpoint = expect(
        InstanceState.UP_FOR_RETRY,
        1,
        {"1": attempt("ABANDONED", "first")},
        observed(fence),
        through=fence.event.event_id,
    )
    running(story)
    story.tick(10)
    # The paused worker resumes and reports its success: kept on attempt 1's record only.
    assert story.complete(0, attempt_no=1).outcome is Outcome.STALE
    story.tick(40)
    story.complete(0)
    final = expect(
        InstanceState.SUCCESS,
        2,
        {
            "1": attempt("ABANDONED", "first", late=1),
            "2": attempt("SUCCESS", "unknown_retry", (1, 0)),
        },
        checkpoints=[checkpoint],
    )
    return story, final


def cancel_confirmed() -> Built:
    story = Recorder(policy(max_retries=2), "daily_user_sync/2026-03-01/export")
    running(story)
    story.tick(30)
    story.heartbeat()
    story.tick(5)
    story.cancel()
    story.tick(3)
    story.reconcile(EngineState.NOT_FOUND, "process_table")
    return story, expect(InstanceState.CANCELLED, 1, {"1": attempt("CANCELLED", "first")})


def cancel_lost_the_race() -> Built:
    story = Recorder(policy(max_retries=2), "daily_user_sync/2026-03-01/index")
    running(story)
    story.tick(30)
    story.heartbeat()
    story.tick(1)
    cancel = story.cancel()
    cancel_time = cancel.event.event_time
    story.tick(3)
    story.reconcile(EngineState.NOT_FOUND, "process_table")
    confirmed = story.verdicts[-1]
    assert story.state is InstanceState.CANCELLED
    checkpoint = expect(
        InstanceState.CANCELLED,
        1,
        {"1": attempt("CANCELLED", "first")},
        through=confirmed.event.event_id,
    )
    story.tick(20)
    # The task had exited 0 half a second before the stop was asked for; the worker's
    # report of it was delayed.
    done = story.make(EventKind.COMPLETED, 1, "worker", {"exit_code": 0, "error_category": "none"})
    done = dataclasses.replace(done, event_time=cancel_time - S / 2)
    story.record(done)
    final = expect(
        InstanceState.SUCCESS,
        1,
        {"1": attempt("SUCCESS", "first")},
        reason_contains="lost the race",
        checkpoints=[checkpoint],
    )
    return story, final


def timeout_confirmed_then_retry() -> Built:
    timeout = 600 * S
    story = Recorder(policy(max_retries=1, timeout=timeout), "daily_user_sync/2026-03-01/train")
    running(story)
    current = story.snapshot.current
    assert current is not None and current.started_at is not None
    deadline = current.started_at + timeout
    while story.clock + 50 * S < deadline:
        story.tick(49)
        story.heartbeat()
    story.clock = deadline
    (requested,) = story.monitor()
    assert requested.event.kind is EventKind.TIMEOUT_REQUESTED
    story.tick(5)
    story.reconcile(EngineState.NOT_FOUND, "process_table")
    confirmed = story.verdicts[-1]
    assert confirmed.event.kind is EventKind.CANCEL_CONFIRMED
    checkpoint = expect(
        InstanceState.UP_FOR_RETRY,
        1,
        {"1": attempt("TIMEOUT", "first")},
        observed(confirmed) + DELAY,
        through=confirmed.event.event_id,
    )
    running(story)
    story.tick(100)
    story.complete(0)
    final = expect(
        InstanceState.SUCCESS,
        2,
        {"1": attempt("TIMEOUT", "first"), "2": attempt("SUCCESS", "retry", (1, 0))},
        checkpoints=[checkpoint],
    )
    return story, final


def never_received_then_resubmit() -> Built:
    # No retries at all: a resubmit is not a retry.
    story = Recorder(policy(max_retries=0), "daily_user_sync/2026-03-01/report")
    story.open()
    story.tick(2)
    story.ack()
    story.tick(120)
    story.reconcile(EngineState.NOT_FOUND, "engine")
    never = story.verdicts[-1]
    assert never.event.kind is EventKind.NEVER_RECEIVED
    checkpoint = expect(
        InstanceState.UP_FOR_RETRY,
        1,
        {"1": attempt("NOT_RECEIVED", "first")},
        observed(never),
        through=never.event.event_id,
    )
    running(story)
    story.tick(60)
    story.complete(0)
    final = expect(
        InstanceState.SUCCESS,
        2,
        {"1": attempt("NOT_RECEIVED", "first"), "2": attempt("SUCCESS", "resubmit", (0, 1))},
        checkpoints=[checkpoint],
    )
    return story, final


STORIES: dict[str, tuple[str, Callable[[], Built]]] = {
    "happy_path": ("started, reported progress, exited 0", happy_path),
    "retry_then_success": (
        "attempt 1 exits 1; attempt 2 opens at retry_at and succeeds",
        retry_then_success,
    ),
    "lost_then_late_success": (
        "the worker goes silent, is LOST, and the engine's exit record proves success",
        lost_then_late_success,
    ),
    "lost_fenced_retry_succeeds": (
        "LOST past the evidence window, fenced (on_unknown retry); attempt 2 succeeds while "
        "attempt 1's late success stays on its own record",
        lost_fenced_retry_succeeds,
    ),
    "cancel_confirmed": ("an operator cancels; the engine confirms the stop", cancel_confirmed),
    "cancel_lost_the_race": (
        "the engine confirms a cancel, then the worker's report shows the task had already "
        "exited 0: the completion wins",
        cancel_lost_the_race,
    ),
    "timeout_confirmed_then_retry": (
        "the monitor stops the attempt at its timeout, the engine confirms, attempt 2 succeeds",
        timeout_confirmed_then_retry,
    ),
    "never_received_then_resubmit": (
        "the engine never had attempt 1; attempt 2 is resubmitted at once and succeeds",
        never_received_then_resubmit,
    ),
}


def build() -> list[History]:
    histories = []
    for name, (description, tell) in STORIES.items():
        story, expected = tell()
        events = story.log
        snapshot = fold(story.instance_id, events, story.policy)
        problems = mismatches(snapshot, expected) + mismatches(story.snapshot, expected)
        history = History(name, description, story.instance_id, story.policy, events, expected)
        for prefix, checkpoint in checkpoints(history):
            at = fold(story.instance_id, prefix, story.policy)
            problems += [f"at {checkpoint['through']}: {p}" for p in mismatches(at, checkpoint)]
        if problems:
            raise AssertionError(
                f"{name}: the fold disagrees with the design:\n" + "\n".join(problems)
            )
        histories.append(history)
    return histories


def main() -> None:
    for history in build():
        path = HERE / f"{history.name}.jsonl"
        path.write_text(dumps(history), encoding="utf-8")
        sys.stdout.write(f"wrote {path.name}: {len(history.events)} events\n")


if __name__ == "__main__":
    main()

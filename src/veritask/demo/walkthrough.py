"""``veritask demo``: drive the core through a realistic story and print what it recorded.

One task of a nightly sync goes silent mid-run. The monitor calls it LOST (unknown, not
failed); the reconciler gathers evidence for its window, fences it and opens attempt 2; the
first attempt's success then arrives late and is kept on its own record without touching the
instance; attempt 2 succeeds. Every line printed is an event with its actor, both times, the
ledger's outcome and the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from veritask.core import decide
from veritask.core.events import EventKind
from veritask.core.judge import Verdict
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import EngineState
from veritask.demo.story import Story

POLICY = TaskPolicy(
    retry=RetryPolicy(max_retries=2, delay=timedelta(seconds=30)),
    lease=timedelta(seconds=60),
    evidence_window=timedelta(minutes=5),
    on_unknown=OnUnknown.RETRY,
)


def silent_worker_story() -> Story:
    """Attempt 1 goes silent and is fenced; its late success is stale; attempt 2 decides."""
    story = Story(POLICY, instance_id="daily_user_sync/2026-03-01/extract")
    story.open()
    story.ack()
    story.start()
    story.send(EventKind.PROGRESS, 1, "worker", {"phase": "copy", "done": 40, "total": 100})
    silence = story.tick(90)
    for event in decide.monitor(story.snapshot, POLICY, now=silence, next_id=story.next_id):
        story.record(event)
    story.tick(60)
    still_running = decide.Observation(EngineState.UNKNOWN, "process_table", story.clock)
    after_window = story.tick(POLICY.evidence_window.total_seconds())
    result = decide.reconcile(
        story.snapshot, POLICY, still_running, now=after_window, next_id=story.next_id
    )
    for event in result.events:
        story.record(event)
    story.tick(POLICY.retry.delay.total_seconds())
    story.open()
    story.ack()
    story.start()
    story.complete(0, attempt_no=1)
    story.send(EventKind.PROGRESS, 2, "worker", {"phase": "copy", "done": 100, "total": 100})
    story.complete(0)
    return story


def render(verdicts: Iterable[Verdict]) -> str:
    lines = []
    for v in verdicts:
        e = v.event
        observed = e.observed_at.strftime("%H:%M:%S") if e.observed_at else "-"
        lines.append(
            f"{e.event_time:%H:%M:%S} {observed}  #{e.attempt_no} {e.kind.value:<19} "
            f"{e.actor:<11} {v.outcome.value:<9} {v.before.state.value:>12} -> "
            f"{v.after.state.value:<12} {v.reason}"
        )
    return "\n".join(lines)


def main() -> int:
    story = silent_worker_story()
    print(f"instance {story.instance_id}")
    print("event    observed  attempt/kind              actor       outcome   transition")
    print(render(story.verdicts))
    print()
    for attempt in story.snapshot.attempts:
        late = f"; late: {'; '.join(attempt.late)}" if attempt.late else ""
        print(f"attempt {attempt.attempt_no}: {attempt.state.value} - {attempt.reason}{late}")
    print(f"instance: {story.state.value} - {story.snapshot.reason}")
    return 0

"""A task's progress, as the worker sends it (``execution/progress.py``): at the pace the
ledger records it, the latest last, and cut to what a report may hold."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import cast

import pytest

from tests.execution.conftest import Engine, evidence
from veritask.core import jsontypes, reports
from veritask.core.events import EventKind
from veritask.execution import port, progress, wire


def test_a_chatty_task_sends_its_first_and_its_latest_progress(engine: Engine) -> None:
    task = port.PythonCallable("tests.execution.sample_tasks:chatty", {"count": 200})
    spec = engine.spec(task=task)

    assert engine.run(spec).error_category is port.ErrorCategory.NONE
    engine.wait_delivered(spec)

    events = engine.platform.events_of(spec.instance_id)
    sent = [evidence(e) for e in events if e["kind"] == "progress"]
    assert 2 <= len(sent) < 20, "two hundred notices in a burst, a few reports"
    assert sent[0]["done"] == 1 and sent[-1]["done"] == 200
    times = [
        datetime.fromisoformat(str(e["event_time"])) for e in events if e["kind"] == "progress"
    ]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= reports.MIN_INTERVAL for gap in gaps), gaps
    assert events[-1]["kind"] == "completed"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _notice(done: int) -> wire.ProgressEvidence:
    return wire.ProgressEvidence(phase="p", done=done, total=None, message=None)


def test_the_pacer_sends_at_once_then_holds_the_latest_until_the_interval_is_over() -> None:
    clock = _Clock()
    sent: list[wire.ProgressEvidence] = []
    pacer = progress.Pacer(sent.append, clock=clock)
    for done in (1, 2, 3):
        pacer.tell(_notice(done))
    assert [e["done"] for e in sent] == [1]
    clock.sleep(0.5)
    pacer.send_due()
    assert [e["done"] for e in sent] == [1]
    clock.sleep(progress.INTERVAL.total_seconds())
    pacer.send_due()
    assert [e["done"] for e in sent] == [1, 3]
    pacer.tell(_notice(4))
    pacer.flush(clock.sleep)  # the end waits for the interval, then sends the latest
    assert [e["done"] for e in sent] == [1, 3, 4]
    assert pacer.due is None


def test_a_notice_is_cut_to_what_a_report_may_hold() -> None:
    cut = progress.evidence_of(
        {"phase": "p" * 500, "done": 1, "total": 2, "message": "m\x00" * 20_000}
    )
    assert len(cut["phase"]) == reports.EVIDENCE_CHARS["phase"]
    assert cut["message"] is not None and "\x00" not in cut["message"]
    assert len(cut["message"]) <= reports.EVIDENCE_CHARS["message"]
    size = reports.evidence_bytes(cast(jsontypes.JSONObject, cut))
    assert size <= reports.MAX_EVIDENCE_BYTES[EventKind.PROGRESS]
    with pytest.raises(TypeError, match="done must be between"):
        progress.evidence_of({"phase": "p", "done": 2**63})

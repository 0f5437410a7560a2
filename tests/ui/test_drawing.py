"""The graph layout, the phases of an instance from its events, the Gantt scale, the session."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from veritask.services import views
from veritask.ui import dag, gantt, session, timeline
from veritask.ui.timeline import PhaseKind

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def node(key: str) -> dag.Node:
    return dag.Node(key, key, "SUCCESS", f"/ui/instances/{key}")


def test_a_task_sits_right_of_everything_it_waits_for() -> None:
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]
    assert dag.layers_of(["a", "b", "c", "d"], edges) == {"a": 0, "b": 1, "c": 2, "d": 3}
    layout = dag.lay_out([node(k) for k in "dcba"], edges)
    x = {placed.node.key: placed.x for placed in layout.nodes}
    assert x["a"] < x["b"] < x["c"] < x["d"]
    assert len(layout.edges) == 4


def test_ordering_within_a_layer_follows_the_upstream_rows() -> None:
    # a1 feeds z, a2 feeds y: the sweep puts z beside a1, above y, though y sorts first.
    edges = [("a1", "z"), ("a2", "y")]
    layout = dag.lay_out([node(k) for k in ("a1", "a2", "y", "z")], edges)
    y = {placed.node.key: placed.y for placed in layout.nodes}
    assert y["z"] < y["y"]


def test_a_wide_run_lays_out_every_instance() -> None:
    keys = ["root"] + [f"t{i:04}" for i in range(1000)]
    layout = dag.lay_out([node(k) for k in keys], [("root", k) for k in keys[1:]])
    assert len(layout.nodes) == 1001
    assert layout.height > 1000 * dag.NODE_HEIGHT


def event(
    position: int,
    kind: str,
    seconds: float,
    *,
    attempt: int | None,
    to: str,
    outcome: str = "applied",
) -> views.HistoryEvent:
    at = T0 + timedelta(seconds=seconds)
    return views.HistoryEvent(
        position, f"e{position}", "instance", "i1", "r1", "i1", attempt, kind, "scheduler",
        at, at + timedelta(seconds=100), {}, outcome, None, None, to,
    )  # fmt: skip


HISTORY = [
    event(1, "instance_created", 0, attempt=None, to="CREATED"),
    event(2, "attempt_opened", 10, attempt=1, to="SCHEDULED"),
    event(3, "submit_acknowledged", 12, attempt=1, to="QUEUED"),
    event(4, "started", 20, attempt=1, to="RUNNING"),
    event(5, "completed", 50, attempt=1, to="UP_FOR_RETRY"),
    event(6, "attempt_opened", 80, attempt=2, to="SCHEDULED"),
    event(7, "submit_acknowledged", 81, attempt=2, to="QUEUED"),
    event(8, "started", 85, attempt=2, to="RUNNING"),
    event(9, "completed", 95, attempt=1, to="RUNNING", outcome="stale"),
    event(10, "completed", 99, attempt=2, to="SUCCESS"),
]


def test_phases_come_from_event_times_not_observed_times() -> None:
    phases = timeline.instance_phases(reversed(HISTORY), T0 + timedelta(hours=1))
    spans = [(p.kind, p.attempt_no, (p.end - p.start).total_seconds()) for p in phases]
    assert spans == [
        (PhaseKind.DEPENDENCY_WAIT, None, 10),
        (PhaseKind.SUBMISSION, 1, 2),
        (PhaseKind.QUEUE, 1, 8),
        (PhaseKind.EXECUTION, 1, 30),
        (PhaseKind.RETRY_WAIT, 2, 30),
        (PhaseKind.SUBMISSION, 2, 1),
        (PhaseKind.QUEUE, 2, 4),
        (PhaseKind.EXECUTION, 2, 14),  # the stale report of attempt 1 ends nothing
    ]
    assert not any(p.ongoing for p in phases)


def test_an_unfinished_phase_runs_until_now() -> None:
    now = T0 + timedelta(seconds=60)
    phases = timeline.instance_phases(HISTORY[:4], now)
    assert phases[-1].kind is PhaseKind.EXECUTION
    assert phases[-1].ongoing
    assert phases[-1].end == now


def test_the_gantt_shares_one_scale() -> None:
    phases = timeline.instance_phases(HISTORY, T0)
    chart = gantt.chart([gantt.Row("a", "/a", "SUCCESS", phases)])
    bars = chart.rows[0].bars
    assert bars[0].x == gantt.LABEL_WIDTH
    assert round(bars[-1].x + bars[-1].width) == gantt.LABEL_WIDTH + gantt.CHART_WIDTH
    assert chart.span == timedelta(seconds=99)


def test_a_session_round_trips_and_refuses_tampering_and_age() -> None:
    key = b"k" * 32
    made = session.Session.new("token-1", T0)
    cookie = session.encode(made, key)
    assert session.decode(cookie, key, T0) == made
    assert session.decode(cookie, b"x" * 32, T0) is None
    body, signature = cookie.split(".")
    assert session.decode(body[:-2] + "xx." + signature, key, T0) is None
    assert session.decode(cookie, key, T0 + session.LIFETIME) is None
    assert session.decode("garbage", key, T0) is None


def test_the_csrf_check_compares_with_the_session() -> None:
    made = session.Session.new(None, T0)
    assert session.check_csrf(made, made.csrf)
    assert not session.check_csrf(made, made.csrf + "x")
    assert not session.check_csrf(made, None)
    assert not session.check_csrf(None, made.csrf)

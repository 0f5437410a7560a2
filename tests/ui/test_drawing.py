"""The graph layout, its labels fitted to their boxes, the Gantt chart's scale, the session."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from veritask.services.durations import Phase, PhaseInterval
from veritask.ui import dag, gantt, labels, session

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


LONGEST_KEY = "w" + "mw" * 31 + "m"  # 64 characters, the widest a key may have


def test_a_label_that_fits_is_drawn_whole() -> None:
    assert labels.fit("extract", dag.LABEL_ROOM, size=12) == "extract"
    assert labels.fit("load ×3", dag.LABEL_ROOM, size=12) == "load ×3"
    assert labels.fit("上游失败", dag.STATE_ROOM, size=11) == "上游失败"


def test_the_estimate_knows_narrow_wide_and_cjk_characters() -> None:
    assert labels.advance("i") < labels.advance("a") < labels.advance("A") < labels.advance("W")
    assert labels.advance("任") == labels.advance("，") == 1.0  # an ideograph: a whole em
    assert labels.advance("é") == 1.0  # unknown: as wide as anything common
    assert labels.width("ab", size=10) == 10 * (labels.advance("a") + labels.advance("b"))


def test_a_long_label_keeps_both_ends_around_an_ellipsis() -> None:
    key = "load_orders_from_the_warehouse_part_017"
    shown = labels.fit(key, dag.LABEL_ROOM, size=12)
    head, tail = shown.split(labels.ELLIPSIS)
    assert key.startswith(head) and key.endswith(tail)
    assert tail.endswith("017") and len(head) > len(tail) > 0
    assert labels.width(shown, size=12) <= dag.LABEL_ROOM


@pytest.mark.parametrize(
    ("alphabet", "room", "size"),
    [
        ("mwMW@%", dag.LABEL_ROOM, 12),
        ("abcdefghijklmnopqrstuvwxyz0123456789_-", dag.LABEL_ROOM, 12),
        ("ijl.", dag.LABEL_ROOM, 12),
        ("上游任务失败，已取消", dag.STATE_ROOM, 11),
        ("load×任务[7]", dag.LABEL_ROOM, 12),
        ("mw", 10, 12),
    ],
)
def test_no_label_of_any_length_is_estimated_wider_than_its_room(
    alphabet: str, room: int, size: int
) -> None:
    for length in range(90):
        text = "".join(alphabet[(i * 7) % len(alphabet)] for i in range(length))
        shown = labels.fit(text, room, size=size)
        assert labels.width(shown, size=size) <= room, (text, shown)
        if shown != text:
            head, _, tail = shown.partition(labels.ELLIPSIS)
            assert text.startswith(head) and text.endswith(tail)


def test_the_longest_key_is_cut_to_its_box() -> None:
    shown = labels.fit(LONGEST_KEY, dag.LABEL_ROOM, size=12)
    assert labels.ELLIPSIS in shown and shown.startswith("wmw")
    assert labels.width(shown, size=12) <= dag.LABEL_ROOM


def interval(phase: Phase, attempt: int, start: float, end: float | None) -> PhaseInterval:
    return PhaseInterval(
        phase,
        attempt,
        T0 + timedelta(seconds=start),
        None if end is None else T0 + timedelta(seconds=end),
    )


PHASES = (
    interval(Phase.DEPENDENCY_WAIT, 1, 0, 10),
    interval(Phase.QUEUE, 1, 12, 20),
    interval(Phase.EXECUTION, 1, 20, 50),
    interval(Phase.RETRY_WAIT, 2, 50, 80),
    interval(Phase.QUEUE, 2, 81, 85),
    interval(Phase.EXECUTION, 2, 85, 99),
)


def test_the_gantt_shares_one_scale() -> None:
    chart = gantt.chart(
        [
            gantt.Row("i1", "a", "/a", "SUCCESS", PHASES),
            gantt.Row("i2", "b", "/b", "SUCCESS", (interval(Phase.EXECUTION, 1, 0, 33),)),
        ],
        T0 + timedelta(hours=1),
    )
    first, second = chart.rows[0].bars, chart.rows[1].bars
    assert first[0].x == second[0].x == gantt.LABEL_WIDTH
    assert round(first[-1].x + first[-1].width) == gantt.LABEL_WIDTH + gantt.CHART_WIDTH
    assert second[0].width == round(gantt.CHART_WIDTH / 3, 1)  # 33 s of 99 s
    assert chart.span == timedelta(seconds=99)
    assert not any(bar.ongoing for bar in first)


def test_a_phase_still_going_on_is_drawn_up_to_now() -> None:
    now = T0 + timedelta(seconds=60)
    running = (*PHASES[:2], interval(Phase.EXECUTION, 1, 20, None))
    chart = gantt.chart([gantt.Row("i1", "a", "/a", "RUNNING", running)], now)
    last = chart.rows[0].bars[-1]
    assert last.ongoing
    assert last.end == now
    assert round(last.x + last.width) == gantt.LABEL_WIDTH + gantt.CHART_WIDTH
    assert chart.span == timedelta(seconds=60)


def test_a_run_without_phases_has_an_empty_chart() -> None:
    chart = gantt.chart([gantt.Row("i1", "a", "/a", "CREATED", ())], T0)
    assert chart.rows == ()
    assert chart.start is None


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


def _boxes_crossed(layout: dag.Layout, edge: dag.PlacedEdge) -> list[str]:
    """The boxes (other than its ends) whose area an edge's points pass through."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", edge.path)]
    points = list(zip(numbers[::2], numbers[1::2], strict=True))
    crossed = []
    for placed in layout.nodes:
        if placed.node.key in (edge.upstream, edge.downstream):
            continue
        for x, y in points:
            inside_x = placed.x < x < placed.x + dag.NODE_WIDTH
            if inside_x and placed.y <= y <= placed.y + dag.NODE_HEIGHT:
                crossed.append(placed.node.key)
    return crossed


def test_an_edge_that_skips_layers_goes_round_the_boxes_between() -> None:
    # a → b → c → d, and a → d and b → d skip layers: their routes take slots of their own.
    edges = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("b", "d"), ("a", "c")]
    layout = dag.lay_out([node(k) for k in "abcd"], edges)
    assert len(layout.edges) == len(edges)
    for edge in layout.edges:
        assert _boxes_crossed(layout, edge) == [], edge
    skipping = next(e for e in layout.edges if (e.upstream, e.downstream) == ("a", "d"))
    assert skipping.path.count("L") == 2  # straight across the two layers it crosses
    # The waypoints' slots make the drawing taller, never the boxes overlap.
    spots = {(placed.x, placed.y) for placed in layout.nodes}
    assert len(spots) == 4

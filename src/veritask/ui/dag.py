"""A run's task graph laid out in layers, left to right, for an SVG drawn on the server.

Layers are longest paths from the sources (a task sits right of everything it waits for);
within a layer, a few barycentre sweeps order the nodes to cross fewer edges (the usual
Sugiyama heuristic). An edge that skips layers gets a waypoint in each layer it crosses, a
slot of its own ordered with the nodes, so that it is routed through free space and is never
drawn behind a box. The layout is pure and O(nodes + edges + waypoints) per sweep, so a run of
1,000 instances lays out quickly.
"""

from __future__ import annotations

import itertools
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

NODE_WIDTH: Final = 168
NODE_HEIGHT: Final = 36
LAYER_GAP: Final = 56
ROW_GAP: Final = 12
MARGIN: Final = 8
SWEEPS: Final = 4
#: Inside a box: the padding at each side of its text, the state's icon before its word, and
#: so the room left for the label (12 px) and for the state's word or the caption (11 px).
PADDING: Final = 8
ICON_ROOM: Final = 16
LABEL_ROOM: Final = NODE_WIDTH - 2 * PADDING
STATE_ROOM: Final = LABEL_ROOM - ICON_ROOM


@dataclass(frozen=True)
class Node:
    """A node to place: ``key`` is unique; ``label`` and ``state`` are drawn."""

    key: str
    label: str
    state: str
    href: str
    caption: str = ""
    """Drawn under the label instead of the state (a definition's graph has no states yet)."""
    late: bool = False
    """An event of it arrived late for the instant the page shows: a mark in its corner."""


@dataclass(frozen=True)
class PlacedNode:
    node: Node
    layer: int
    x: int
    y: int


@dataclass(frozen=True)
class PlacedEdge:
    upstream: str
    downstream: str
    path: str
    """An SVG path (``d``) from the upstream's right side to the downstream's left side."""


@dataclass(frozen=True)
class Layout:
    nodes: tuple[PlacedNode, ...]
    edges: tuple[PlacedEdge, ...]
    width: int
    height: int


def layers_of(keys: Sequence[str], edges: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Each node's layer: 0 for sources, else one more than its deepest upstream.

    Edges naming unknown nodes are ignored; nodes on a cycle (refused by the validator, so
    never stored) would keep layer 0 rather than loop.
    """
    known = set(keys)
    downstream: dict[str, list[str]] = defaultdict(list)
    waiting = dict.fromkeys(keys, 0)
    for upstream, down in edges:
        if upstream in known and down in known and upstream != down:
            downstream[upstream].append(down)
            waiting[down] += 1
    layer = dict.fromkeys(keys, 0)
    ready = deque(key for key in keys if waiting[key] == 0)
    while ready:
        key = ready.popleft()
        for down in downstream[key]:
            layer[down] = max(layer[down], layer[key] + 1)
            waiting[down] -= 1
            if waiting[down] == 0:
                ready.append(down)
    return layer


def lay_out(nodes: Sequence[Node], edges: Sequence[tuple[str, str]]) -> Layout:
    """Place ``nodes`` in layers and rows; edges are ``(upstream key, downstream key)``."""
    keys = [node.key for node in nodes]
    by_key = {node.key: node for node in nodes}
    kept = sorted({(u, d) for u, d in edges if u in by_key and d in by_key and u != d})
    layer = layers_of(keys, kept)
    columns: dict[int, list[str]] = defaultdict(list)
    for key in sorted(keys, key=lambda k: by_key[k].label):
        columns[layer[key]].append(key)
    ups: dict[str, list[str]] = defaultdict(list)
    downs: dict[str, list[str]] = defaultdict(list)
    routes: dict[tuple[str, str], list[str]] = {}
    for upstream, down in kept:
        # A waypoint per layer the edge crosses: a slot no box takes (its key is no task's).
        route = [upstream]
        for crossed in range(layer[upstream] + 1, layer[down]):
            waypoint = f"\0{upstream}\0{down}\0{crossed}"
            columns[crossed].append(waypoint)
            route.append(waypoint)
        route.append(down)
        for nearer, further in itertools.pairwise(route):
            ups[further].append(nearer)
            downs[nearer].append(further)
        routes[(upstream, down)] = route
    depth = max(columns, default=-1) + 1
    for sweep in range(SWEEPS):
        forward = sweep % 2 == 0
        order = range(1, depth) if forward else range(depth - 2, -1, -1)
        neighbours = ups if forward else downs
        for index in order:
            row = {key: i for i, key in enumerate(columns[index - 1 if forward else index + 1])}
            here = {key: i for i, key in enumerate(columns[index])}
            columns[index].sort(key=lambda k: _barycentre(neighbours[k], row, here[k]))
    positions: dict[str, tuple[int, int]] = {}
    placed: list[PlacedNode] = []
    for index in range(depth):
        for row_index, key in enumerate(columns[index]):
            x = MARGIN + index * (NODE_WIDTH + LAYER_GAP)
            y = MARGIN + row_index * (NODE_HEIGHT + ROW_GAP)
            positions[key] = (x, y)
            if key in by_key:
                placed.append(PlacedNode(by_key[key], index, x, y))
    drawn = tuple(
        PlacedEdge(u, d, _route([positions[point] for point in routes[(u, d)]])) for u, d in kept
    )
    tallest = max((len(column) for column in columns.values()), default=0)
    return Layout(
        tuple(placed),
        drawn,
        width=2 * MARGIN + max(depth, 1) * NODE_WIDTH + max(depth - 1, 0) * LAYER_GAP,
        height=2 * MARGIN + max(tallest, 1) * (NODE_HEIGHT + ROW_GAP) - ROW_GAP,
    )


def _barycentre(neighbours: list[str], row: dict[str, int], current: int) -> float:
    placed = [row[n] for n in neighbours if n in row]
    if not placed:
        return float(current)  # no neighbour there: keep its place
    return sum(placed) / len(placed)


def _route(points: Sequence[tuple[int, int]]) -> str:
    """An SVG path from the first box's right side to the last box's left side: a curve
    between neighbouring layers, straight across each waypoint's slot."""
    x, y = points[0][0] + NODE_WIDTH, points[0][1] + NODE_HEIGHT // 2
    parts = [f"M{x},{y}"]
    for index, (left, top) in enumerate(points[1:], start=1):
        x2, y2 = left, top + NODE_HEIGHT // 2
        bend = (x2 - x) // 2
        parts.append(f"C{x + bend},{y} {x2 - bend},{y2} {x2},{y2}")
        x, y = x2, y2
        if index < len(points) - 1:  # a waypoint: across its slot
            x += NODE_WIDTH
            parts.append(f"L{x},{y}")
    return " ".join(parts)

"""What the task graphs draw besides the tasks: the publish steps that follow them.

A run's or a definition's graph ends with its publication, when it has one: each quality check
after every leaf task (a task no other waits for), then the commit after the checks. Drawn as
boxes of their own, so that a reader sees that the data is used only after them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from veritask.scheduling import publication as publication_steps
from veritask.services import views
from veritask.ui import dag


def leaves(graph: views.TaskGraph) -> list[str]:
    """The tasks no other task waits for."""
    waited_for = {edge.upstream for edge in graph.edges}
    return [task for task in graph.tasks if task not in waited_for]


def publication(
    graph: views.TaskGraph,
    ends: Mapping[str, Sequence[str]],
    *,
    state: str,
    href: str,
    caption: Callable[[str], str] | None = None,
) -> tuple[list[dag.Node], list[tuple[str, str]]]:
    """The edges that put the publish steps after the leaf tasks, and a node in ``state``
    for each step that has none in ``ends`` (which maps a task or step key to its nodes'
    keys: a run's steps are instances of their own). ``caption(kind)`` labels the new nodes
    instead of their state where given (``check`` or ``commit``)."""
    if not graph.commit:
        return [], []
    sources = [key for task in leaves(graph) for key in ends.get(task, ())]
    nodes: list[dag.Node] = []

    def step(key: str, label: str, kind: str) -> Sequence[str]:
        present = ends.get(key)
        if present:
            return present
        nodes.append(dag.Node(key, label, state, href, caption(kind) if caption else ""))
        return (key,)

    checks = [
        key
        for name in graph.checks
        for key in step(publication_steps.CHECK_PREFIX + name, name, "check")
    ]
    commits = step(publication_steps.COMMIT_KEY, "commit", "commit")
    edges = [(source, check) for check in checks for source in sources]
    edges.extend((before, commit) for before in (checks or sources) for commit in commits)
    return nodes, edges


def definition_graph(graph: views.TaskGraph, caption: Callable[[str], str]) -> dag.Layout:
    """A definition's tasks and publish steps, before any run: each box says what it is."""
    nodes = [dag.Node(task, task, "CREATED", "#source", caption("task")) for task in graph.tasks]
    pairs = [(edge.upstream, edge.downstream) for edge in graph.edges]
    ends = {task: (task,) for task in graph.tasks}
    steps, joins = publication(graph, ends, state="PENDING", href="#source", caption=caption)
    return dag.lay_out([*nodes, *steps], [*pairs, *joins])

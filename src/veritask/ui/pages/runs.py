"""A run: both states with their reasons, the task graph, the timeline, the instances."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.services import activity, attestations, durations, explanations, reruns, runs, views
from veritask.services.tokens import TokenRole
from veritask.ui import context, dag, gantt, graphs, scrubber
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/runs", route_class=UiRoute, include_in_schema=False)


#: Task rows (a mapped task is one) per page of the instances table and the timeline.
PAGE_ROWS: Final = 200
#: The most boxes a run's graph is drawn with: past it, a layout no one can read costs
#: seconds to draw; the table lists every task.
GRAPH_MAX_BOXES: Final = 1000


@dataclass(frozen=True)
class Page:
    """Which task rows of the run one page shows (1-based ``number``)."""

    number: int
    count: int
    first: int
    last: int
    total: int


@router.get("/{run_id}")
def run_page(
    request: Request,
    run_id: str,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    as_of: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    """The run live, or as it was known at ``as_of`` (the time scrubber's instant: each
    state is ``explain``'s *known then* column, late events marked)."""
    found = context.page(request)
    position = activity.latest_position(found.platform, run_id=run_id)
    detail = runs.get_run(found.platform, run_id)
    graph = runs.run_graph(found.platform, run_id)
    scrub = scrubber.scrubber(found, detail, as_of)
    phases: dict[str, tuple[durations.PhaseInterval, ...]]
    if scrub.told is not None:
        detail = explanations.detail_then(detail, scrub.told)
        phases = {told.id: explanations.phases_then(told) for told in scrub.told.instances}
    rows = task_rows(detail)
    shown = page_of(len(rows), page)
    rows = rows[shown.first - 1 : shown.last]
    listed = [instance for row in rows for instance in (row.members or (row.instance,))]
    if scrub.told is None:
        # The same intervals as GET /api/v2/runs/{id}/durations: one computation of the phases.
        phases = {
            instance.instance_id: instance.phases
            for instance in durations.run_timeline(
                found.platform, run_id, only={instance.id for instance in listed}
            )
        }
    return context.render(
        found,
        "run.html",
        status=422 if scrub.error else 200,
        scrub=scrub,
        as_query=scrubber.query,
        detail=detail,
        run=detail.run,
        graph=(
            task_graph(detail, graph, late=scrub.late_instances)
            if shown.total <= GRAPH_MAX_BOXES
            else None
        ),
        graph_max=GRAPH_MAX_BOXES,
        chart=gantt.chart(
            [
                gantt.Row(
                    instance.id,
                    label_of(instance),
                    f"/ui/instances/{instance.id}",
                    instance.state.value,
                    phases.get(instance.id, ()),
                )
                for instance in listed
            ],
            scrub.as_of or found.platform.now(),
        ),
        phase_kinds=list(durations.Phase),
        position=position,
        choices=reruns.clear_choices(detail),
        rows=rows,
        page=shown,
        live=f"/ui/live?run={run_id}&since={position}",
        attestation=attestations.find(found.platform, run_id),
    )


@router.get("/{run_id}/attestation.json")
def run_attestation(request: Request, run_id: str) -> Response:
    """The run's signed attestation as GET /api/v2/runs/{id}/attestation serves it, for a
    signed-in reader (the run page links it)."""
    found = context.page(request)
    return JSONResponse(attestations.of_run(found.platform, run_id).as_json())


def page_of(total: int, wanted: int) -> Page:
    """Page ``wanted`` of ``total`` rows; a page past the last is the last."""
    count = max(1, -(-total // PAGE_ROWS))
    number = min(wanted, count)
    first = (number - 1) * PAGE_ROWS + 1
    return Page(number, count, min(first, total), min(number * PAGE_ROWS, total), total)


@router.post("/{run_id}/cancel")
async def cancel(request: Request, run_id: str) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    await run_in_threadpool(
        runs.cancel_run,
        found.platform,
        run_id,
        actor=principal.actor,
        reason=str(form.get("reason") or ""),
    )
    return RedirectResponse(f"/ui/runs/{run_id}", status_code=303)


@dataclass(frozen=True)
class TaskRow:
    """One task of the run page's list: its instance, or for an expanded mapped task the
    instance that records the expansion, its instances and how many are in each state."""

    instance: views.Instance
    members: tuple[views.Instance, ...] = ()
    counts: tuple[tuple[str, int], ...] = ()

    @property
    def attempts(self) -> int:
        return sum(len(i.attempts) for i in (self.instance, *self.members))


def task_rows(detail: views.RunDetail) -> list[TaskRow]:
    """The run's tasks in order, a mapped task as one row that opens into its instances."""
    members: dict[str, list[views.Instance]] = {}
    for instance in detail.instances:
        if instance.map_index >= 0:
            members.setdefault(instance.task, []).append(instance)
    rows = []
    for instance in detail.instances:
        if instance.map_index >= 0:
            continue
        group = sorted(members.pop(instance.task, ()), key=lambda i: i.map_index)
        rows.append(TaskRow(instance, tuple(group), _counts(group)))
    # Instances whose unmapped one is not in the run (never: kept for an incomplete read).
    rows.extend(
        TaskRow(group[0], tuple(group), _counts(group)) for group in members.values() if group
    )
    return rows


def _counts(group: list[views.Instance]) -> tuple[tuple[str, int], ...]:
    counted = Counter(i.state.value for i in group)
    return tuple(sorted(counted.items(), key=lambda pair: (-pair[1], pair[0])))


#: Which state a mapped group's box shows: the one that asks for attention first.
_ATTENTION = (
    "FAILED",
    "START_FAILED",
    "TIMEOUT",
    "UPSTREAM_FAILED",
    "LOST",
    "CANCEL_FAILED",
    "UP_FOR_RETRY",
    "CANCELLING",
    "RUNNING",
    "QUEUED",
    "SCHEDULED",
    "CREATED",
    "CANCELLED",
    "SUCCESS",
    "SKIPPED",
    "REMOVED",
)


def group_state(counts: tuple[tuple[str, int], ...]) -> str:
    present = {state for state, _ in counts}
    return next((state for state in _ATTENTION if state in present), "CREATED")


def label_of(instance: views.Instance) -> str:
    return instance.task if instance.map_index < 0 else f"{instance.task}[{instance.map_index}]"


def task_graph(
    detail: views.RunDetail, graph: views.TaskGraph, *, late: frozenset[str] = frozenset()
) -> dag.Layout:
    """The run's instances as nodes; a task's edges join every instance of the two tasks. An
    expanded mapped task is one box: its count of instances, the state that asks for
    attention first, and a link to its row, which opens into them. The instances in ``late``
    (an event of theirs arrived late for the instant shown) are marked."""
    by_task: dict[str, list[str]] = {}
    nodes = []
    for row in task_rows(detail):
        instance = row.instance
        by_task.setdefault(instance.task, []).append(instance.id)
        if row.members:
            nodes.append(
                dag.Node(
                    instance.id,
                    f"{instance.task} ×{len(row.members)}",
                    group_state(row.counts),
                    f"#mapped-{instance.task}",
                    late=any(member.id in late for member in row.members),
                )
            )
            continue
        nodes.append(
            dag.Node(
                instance.id,
                label_of(instance),
                instance.state.value,
                f"/ui/instances/{instance.id}",
                late=instance.id in late,
            )
        )
    pairs = [
        (up, down)
        for edge in graph.edges
        for up in by_task.get(edge.upstream, ())
        for down in by_task.get(edge.downstream, ())
    ]
    steps, joins = graphs.publication(
        graph, by_task, state=detail.run.publication_state.value, href="#run-states"
    )
    return dag.lay_out([*nodes, *steps], [*pairs, *joins])

"""A run: both states with their reasons, the task graph, the timeline, the instances."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.services import activity, runs, views
from veritask.services.platform import Platform
from veritask.services.runs import SubjectType
from veritask.services.tokens import TokenRole
from veritask.ui import context, dag, gantt, timeline
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/runs", route_class=UiRoute, include_in_schema=False)
#: The history of a run is read in pages of this many events.
HISTORY_PAGE = runs.MAX_HISTORY


@router.get("/{run_id}")
def run_page(request: Request, run_id: str) -> Response:
    found = context.page(request)
    position = activity.latest_position(found.platform, run_id=run_id)
    detail = runs.get_run(found.platform, run_id)
    edges = runs.run_edges(found.platform, run_id)
    events = full_history(found.platform, run_id)
    now = found.platform.now()
    phases = timeline.phases_by_instance(events, now)
    return context.render(
        found,
        "run.html",
        detail=detail,
        run=detail.run,
        graph=task_graph(detail, edges),
        chart=gantt.chart(
            [
                gantt.Row(
                    label_of(instance),
                    f"/ui/instances/{instance.id}",
                    instance.state.value,
                    phases.get(instance.id, ()),
                )
                for instance in detail.instances
            ]
        ),
        phase_kinds=list(timeline.PhaseKind),
        position=position,
        live=f"/ui/live?run={run_id}&since={position}",
    )


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


def full_history(platform: Platform, run_id: str) -> list[views.HistoryEvent]:
    """Every event of the run and its instances, page by page."""
    events: list[views.HistoryEvent] = []
    after: int | None = None
    while True:
        page = runs.history(platform, SubjectType.RUN, run_id, after=after, limit=HISTORY_PAGE)
        events.extend(page.events)
        if page.next_after is None:
            return events
        after = page.next_after


def label_of(instance: views.Instance) -> str:
    return instance.task if instance.map_index < 0 else f"{instance.task}[{instance.map_index}]"


def task_graph(detail: views.RunDetail, edges: tuple[views.TaskEdge, ...]) -> dag.Layout:
    """The run's instances as nodes; a task's edges join every instance of the two tasks."""
    by_task: dict[str, list[str]] = {}
    nodes = []
    for instance in detail.instances:
        by_task.setdefault(instance.task, []).append(instance.id)
        nodes.append(
            dag.Node(
                instance.id,
                label_of(instance),
                instance.state.value,
                f"/ui/instances/{instance.id}",
            )
        )
    pairs = [
        (up, down)
        for edge in edges
        for up in by_task.get(edge.upstream, ())
        for down in by_task.get(edge.downstream, ())
    ]
    return dag.lay_out(nodes, pairs)

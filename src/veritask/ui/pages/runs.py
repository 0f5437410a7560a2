"""A run: both states with their reasons, the task graph, the timeline, the instances."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.services import activity, durations, reruns, runs, views
from veritask.services.tokens import TokenRole
from veritask.ui import context, dag, gantt
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/runs", route_class=UiRoute, include_in_schema=False)


@router.get("/{run_id}")
def run_page(request: Request, run_id: str) -> Response:
    found = context.page(request)
    position = activity.latest_position(found.platform, run_id=run_id)
    detail = runs.get_run(found.platform, run_id)
    edges = runs.run_edges(found.platform, run_id)
    # The same intervals as GET /api/v2/runs/{id}/durations: one computation of the phases.
    phases = {
        instance.instance_id: instance.phases
        for instance in durations.run_timeline(found.platform, run_id)
    }
    return context.render(
        found,
        "run.html",
        detail=detail,
        run=detail.run,
        graph=task_graph(detail, edges),
        chart=gantt.chart(
            [
                gantt.Row(
                    instance.id,
                    label_of(instance),
                    f"/ui/instances/{instance.id}",
                    instance.state.value,
                    phases.get(instance.id, ()),
                )
                for instance in detail.instances
            ],
            found.platform.now(),
        ),
        phase_kinds=list(durations.Phase),
        position=position,
        choices=reruns.clear_choices(detail),
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

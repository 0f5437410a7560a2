"""An instance: attempts, progress, the full history (with the ledger's outcomes explained),
the log's tail as it grows (the viewer is :mod:`veritask.ui.pages.log_viewer`), and the
cancel and override forms (operators, with a reason)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.core.events import OverrideScope
from veritask.core.states import InstanceState
from veritask.services import activity, errors, logs, overrides, runs
from veritask.services.tokens import TokenRole
from veritask.ui import context
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/instances", route_class=UiRoute, include_in_schema=False)
#: How much of the log the page shows at first; the rest follows as it is written.
LOG_TAIL = 32 * 1024


@router.get("/{instance_id}")
def instance_page(request: Request, instance_id: str) -> Response:
    found = context.page(request)
    position = activity.latest_position(found.platform, instance_id=instance_id)
    detail = runs.get_instance(found.platform, instance_id)
    rejected = runs.rejected_events(found.platform, instance_id)
    current = detail.instance.attempts[-1] if detail.instance.attempts else None
    log = None
    if current is not None:
        try:
            log = logs.read_log(found.platform, instance_id, tail=LOG_TAIL)
        except errors.NotFound:
            log = None  # the log lives with its engine, outside this server
    return context.render(
        found,
        "instance.html",
        detail=detail,
        instance=detail.instance,
        current=current,
        rejected=rejected,
        log=log,
        override_states=[state.value for state in overrides.OVERRIDE_STATES],
        scopes=[scope.value for scope in OverrideScope],
        position=position,
        live=f"/ui/live?instance={instance_id}&since={position}",
    )


@router.post("/{instance_id}/cancel")
async def cancel(request: Request, instance_id: str) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    await run_in_threadpool(
        runs.cancel_instance,
        found.platform,
        instance_id,
        actor=principal.actor,
        reason=str(form.get("reason") or ""),
    )
    return RedirectResponse(f"/ui/instances/{instance_id}", status_code=303)


@router.post("/{instance_id}/override")
async def override(request: Request, instance_id: str) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    state = str(form.get("state") or "")
    scope = str(form.get("scope") or OverrideScope.INSTANCE.value)
    if state not in {s.value for s in overrides.OVERRIDE_STATES}:
        raise errors.InvalidInput.about("state", "an override sets SUCCESS or FAILED")
    if scope not in {s.value for s in OverrideScope}:
        raise errors.InvalidInput.about("scope", "instance, downstream or run")
    await run_in_threadpool(
        overrides.override,
        found.platform,
        instance_id,
        to_state=InstanceState(state),
        scope=OverrideScope(scope),
        reason=str(form.get("reason") or ""),
        actor=principal.actor,
    )
    return RedirectResponse(f"/ui/instances/{instance_id}", status_code=303)

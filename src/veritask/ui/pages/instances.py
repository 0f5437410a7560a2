"""An instance: attempts, progress, the full history (with the ledger's outcomes explained;
newest or oldest first, filtered by kind and outcome, routine events folded),
the log's tail as it grows (the viewer is :mod:`veritask.ui.pages.log_viewer`), and the
cancel and override forms (operators, with a reason)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.core.events import EventKind, OverrideScope
from veritask.core.states import InstanceState
from veritask.services import activity, errors, explanations, logs, overrides, runs
from veritask.services.tokens import TokenRole
from veritask.ui import context, history, rendering, scrubber
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/instances", route_class=UiRoute, include_in_schema=False)
#: How much of the log the page shows at first; the rest follows as it is written.
LOG_TAIL = 32 * 1024
EVENT_KINDS = tuple(kind.value for kind in EventKind)


@router.get("/{instance_id}")
def instance_page(
    request: Request,
    instance_id: str,
    order: str = "newest",
    kind: str = "",
    outcome: str = "",
    as_of: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    """The instance; its history newest first (``order=oldest`` for the recorded order), of
    one event ``kind`` and one ``outcome`` when asked (a value the page does not offer shows
    every event); its explain panel for ``as_of`` (the present without it)."""
    found = context.page(request)
    position = activity.latest_position(found.platform, instance_id=instance_id)
    detail = runs.get_instance(found.platform, instance_id)
    asked, problem = None, None
    if as_of is not None and as_of.strip():
        try:
            asked = scrubber.parse(as_of, found)
        except errors.InvalidInput as exc:
            problem = str(exc)
    told = explanations.explain_instance(found.platform, instance_id, as_of=asked)
    order = order if order in history.ORDERS else "newest"
    kind = kind if kind in EVENT_KINDS else ""
    outcome = outcome if outcome in history.OUTCOMES else ""
    listing = runs.instance_events(
        found.platform,
        instance_id,
        newest_first=order == "newest",
        kind=kind or None,
        outcome=outcome or None,
    )
    shown = history.rows(
        listing,
        newest_first=order == "newest",
        fold=not kind,
        t=found.t,
        when=rendering.when_in(found.zone),
    )
    filters = {"kind": kind, "outcome": outcome}
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
        status=422 if problem else 200,
        told=told,
        explain_error=problem,
        explain_typed=(as_of or "") if problem or asked is None else scrubber.typed(asked, found),
        as_query=scrubber.query,
        detail=detail,
        instance=detail.instance,
        current=current,
        history_rows=shown,
        history_truncated=listing.truncated,
        order=order,
        kind=kind,
        outcome=outcome,
        event_kinds=EVENT_KINDS,
        outcomes=history.OUTCOMES,
        clear_link=_query({"order": "" if order == "newest" else order}),
        order_links={choice: _query({"order": choice, **filters}) for choice in history.ORDERS},
        log=log,
        override_states=[state.value for state in overrides.OVERRIDE_STATES],
        scopes=[scope.value for scope in OverrideScope],
        position=position,
        live=f"/ui/live?instance={instance_id}&since={position}",
    )


def _query(values: dict[str, str]) -> str:
    return "?" + urlencode({name: value for name, value in values.items() if value})


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

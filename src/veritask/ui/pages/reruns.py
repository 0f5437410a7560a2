"""The run page's *Clear failed*, *Clear this task* and *Rerun…*: ask, show, then act.

Each goes in three steps: a form asks for the reason (and the choices), a confirm page shows
what will happen — the instances a clear sends back to waiting, as ``reruns.clear_scope``
computes them with the clear's own planning, or the version and the parameters a rerun
starts with — and only its confirm button acts. The confirm page carries what it showed
(the instance ids, the version number), so that a scope that moved meanwhile is refused
(409) rather than acted on unseen. Operators only; every post carries the CSRF token. A
refusal shows the form again with the problem's message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from veritask.core import refusals
from veritask.core.jsontypes import JSONObject
from veritask.services import errors, reruns, runs
from veritask.services.tokens import TokenRole
from veritask.ui import context, forms
from veritask.ui.pages.routing import UiRoute, status_of

router = APIRouter(prefix="/ui/runs", route_class=UiRoute, include_in_schema=False)
YES = "yes"


@dataclass(frozen=True)
class ClearAsk:
    """What the clear's form asked: the scope and the reason."""

    failed: bool
    tasks: list[str]
    downstream: bool
    reason: str = ""


@dataclass(frozen=True)
class RerunAsk:
    """What the rerun's form asked; ``lines`` None is the run's own parameters."""

    lines: str | None = None
    version: str = "same"
    key: str = ""
    reason: str = ""


# -- clear ----------------------------------------------------------------------------------


def clear_page(
    found: context.Page,
    run_id: str,
    asked: ClearAsk,
    *,
    problems: Sequence[errors.FieldProblem] = (),
    preview: reruns.ClearPreview | None = None,
    status: int = 200,
) -> Response:
    """The clear's form (``preview`` None) or its confirm step."""
    return context.render(
        found,
        "clear.html",
        status=status,
        run=runs.get_run(found.platform, run_id).run,
        asked=asked,
        problems=list(problems),
        preview=preview,
    )


@router.get("/{run_id}/clear")
def clear_form(request: Request, run_id: str) -> Response:
    found = context.page(request)
    found.require(TokenRole.OPERATOR)
    query = request.query_params
    asked = ClearAsk(
        query.get("failed") == YES, query.getlist("task"), query.get("downstream", YES) == YES
    )
    return clear_page(found, run_id, asked)


@router.post("/{run_id}/clear/preview")
async def clear_preview(request: Request, run_id: str) -> Response:
    found, form = await context.submitted(request)
    found.require(TokenRole.OPERATOR)
    asked = _clear_request(form)
    if not asked.reason:
        missing = errors.FieldProblem("reason", None, refusals.CLEAR_NEEDS_REASON.format())
        return await run_in_threadpool(
            clear_page, found, run_id, asked, problems=(missing,), status=422
        )
    try:
        preview = await run_in_threadpool(
            reruns.clear_scope,
            found.platform,
            run_id,
            failed=asked.failed,
            tasks=asked.tasks,
            downstream=asked.downstream,
        )
    except errors.ServiceError as exc:
        return await _clear_refused(found, run_id, asked, exc)
    return await run_in_threadpool(clear_page, found, run_id, asked, preview=preview)


@router.post("/{run_id}/clear")
async def clear(request: Request, run_id: str) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    asked = _clear_request(form)
    shown = [v for v in form.getlist("instance") if isinstance(v, str)]
    try:
        await run_in_threadpool(
            reruns.clear,
            found.platform,
            run_id,
            failed=asked.failed,
            tasks=asked.tasks,
            downstream=asked.downstream,
            reason=asked.reason,
            actor=principal.actor,
            expected=shown if form.get("previewed") == YES else None,
        )
    except errors.ServiceError as exc:
        return await _clear_refused(found, run_id, asked, exc)
    return RedirectResponse(f"/ui/runs/{run_id}", status_code=303)


def _clear_request(form: FormData) -> ClearAsk:
    tasks = [v for v in form.getlist("task") if isinstance(v, str) and v]
    return ClearAsk(
        form.get("failed") == YES,
        tasks,
        form.get("downstream") == YES,
        str(form.get("reason") or "").strip(),
    )


async def _clear_refused(
    found: context.Page, run_id: str, asked: ClearAsk, exc: errors.ServiceError
) -> Response:
    """The form again with the problem (an unknown run is the error page: no form to show)."""
    return await run_in_threadpool(
        clear_page, found, run_id, asked, problems=_problems_of(exc), status=status_of(exc)
    )


# -- rerun ----------------------------------------------------------------------------------


def rerun_page(
    found: context.Page,
    run_id: str,
    asked: RerunAsk,
    *,
    problems: Sequence[errors.FieldProblem] = (),
    preview: reruns.RerunPreview | None = None,
    given: JSONObject | None = None,
    status: int = 200,
    runs_named: Sequence[str] = (),
) -> Response:
    """The rerun's form, pre-filled with the run's parameters, or its confirm step;
    ``runs_named``: the runs a refusal is about (the active ones it waits for), linked."""
    run = runs.get_run(found.platform, run_id).run
    lines = asked.lines
    if lines is None:
        lines = _lines_of(run.parameters)
    return context.render(
        found,
        "rerun.html",
        status=status,
        run=run,
        lines=lines,
        asked=asked,
        problems=list(problems),
        preview=preview,
        given=json.dumps(given or {}, ensure_ascii=False, sort_keys=True),
        runs=tuple(runs_named),
    )


@router.get("/{run_id}/rerun")
def rerun_form(request: Request, run_id: str) -> Response:
    found = context.page(request)
    found.require(TokenRole.OPERATOR)
    return rerun_page(found, run_id, RerunAsk())


@router.post("/{run_id}/rerun/preview")
async def rerun_preview(request: Request, run_id: str) -> Response:
    found, form = await context.submitted(request)
    found.require(TokenRole.OPERATOR)
    lines = str(form.get("parameters") or "")
    asked = _rerun_request(form, lines)
    given, problems = forms.parameter_lines(lines)
    if not asked.reason:
        problems.append(errors.FieldProblem("reason", None, refusals.RERUN_NEEDS_REASON.format()))
    if problems:
        return await run_in_threadpool(
            rerun_page, found, run_id, asked, problems=problems, status=422
        )
    try:
        preview = await run_in_threadpool(
            reruns.rerun_preview,
            found.platform,
            run_id,
            parameters=given,
            version=asked.version,
        )
    except errors.ServiceError as exc:
        return await _rerun_refused(found, run_id, asked, exc)
    return await run_in_threadpool(rerun_page, found, run_id, asked, preview=preview, given=given)


@router.post("/{run_id}/rerun")
async def rerun(request: Request, run_id: str) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    given = _given_of(form.get("given"))
    asked = _rerun_request(form, _lines_of(given))
    shown = str(form.get("definition_version") or "")
    try:
        created = await run_in_threadpool(
            reruns.rerun,
            found.platform,
            run_id,
            parameters=given,
            version=asked.version,
            key=asked.key or None,
            reason=asked.reason or None,
            actor=principal.actor,
            expected_version=int(shown) if shown.isdigit() else None,
        )
    except errors.ServiceError as exc:
        return await _rerun_refused(found, run_id, asked, exc)
    return RedirectResponse(f"/ui/runs/{created.run_id}", status_code=303)


def _rerun_request(form: FormData, lines: str) -> RerunAsk:
    return RerunAsk(
        lines,
        str(form.get("version") or reruns.RerunVersion.SAME.value),
        str(form.get("key") or "").strip(),
        str(form.get("reason") or "").strip(),
    )


async def _rerun_refused(
    found: context.Page, run_id: str, asked: RerunAsk, exc: errors.ServiceError
) -> Response:
    """The form again with the problem (an unknown run is the error page: no form to show)."""
    return await run_in_threadpool(
        rerun_page,
        found,
        run_id,
        asked,
        problems=_problems_of(exc),
        status=status_of(exc),
        runs_named=exc.run_ids if isinstance(exc, errors.Conflict) else (),
    )


def _given_of(value: object) -> JSONObject:
    """The parameters the confirm page carries (JSON it wrote itself); {} when unreadable."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {}


def _lines_of(parameters: JSONObject) -> str:
    return "\n".join(f"{name}={forms.as_typed(value)}" for name, value in parameters.items())


def _problems_of(exc: errors.ServiceError) -> tuple[errors.FieldProblem, ...]:
    if isinstance(exc, errors.InvalidInput) and exc.problems:
        return exc.problems
    return (errors.FieldProblem("", None, str(exc)),)

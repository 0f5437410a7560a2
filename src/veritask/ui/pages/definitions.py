"""Definitions: the list, one definition (versions, diff, source, trigger, enable, delete),
and the editor, whose validation errors are shown at their line."""

from __future__ import annotations

import difflib
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.core.jsontypes import JSONValue
from veritask.core.states import TriggerKind
from veritask.services import activity, backfills, definitions, errors, runs
from veritask.services.tokens import TokenRole
from veritask.ui import context, forms, graphs
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/definitions", route_class=UiRoute, include_in_schema=False)
RECENT_RUNS = 10
RECENT_BACKFILLS = 5
NEW_DEFINITION = """\
name: my_pipeline
description: What this pipeline does
owner: data-platform
tasks:
  extract:
    run: echo extract
  load:
    run: echo load
    after: [extract]
"""


@router.get("")
def list_page(request: Request) -> Response:
    found = context.page(request)
    mark = activity.definitions_mark(found.platform)  # before the reads: no change is missed
    listed = definitions.list_definitions(found.platform)
    recent = {
        item.name: runs.list_runs(found.platform, definition=item.name, limit=RECENT_RUNS).items
        for item in listed
    }
    return context.render(
        found,
        "definitions.html",
        definitions=listed,
        recent=recent,
        live=f"/ui/live?definitions=1&since={mark}",
    )


@router.get("/new")
def new_page(request: Request) -> Response:
    found = context.page(request)
    found.require(TokenRole.ADMIN)
    return _editor(found, NEW_DEFINITION, problems=(), name=None)


@router.post("/new")
async def create(request: Request) -> Response:
    return await _apply(request, name=None)


@router.get("/{name}")
def detail_page(
    request: Request,
    name: str,
    older: Annotated[int | None, Query(alias="from", ge=1)] = None,
    newer: Annotated[int | None, Query(alias="to", ge=1)] = None,
) -> Response:
    return detail(context.page(request), name, older, newer)


def detail(
    found: context.Page,
    name: str,
    older: int | None = None,
    newer: int | None = None,
    *,
    trigger_problems: tuple[errors.FieldProblem, ...] = (),
    typed: str = "",
    status: int = 200,
    **backfill: object,
) -> Response:
    """The definition's page; after a refused trigger, the form again with its problems and
    what was typed (and the *Backfill…* form's values, problems and preview: pages/backfills.py)."""
    mark = activity.definitions_mark(found.platform)  # before the reads: no change is missed
    detail = definitions.get_definition(found.platform, name)
    diff: list[tuple[str, str]] | None = None
    if older is not None and newer is not None:
        diff = _diff(
            definitions.version_source(found.platform, name, older),
            definitions.version_source(found.platform, name, newer),
            older,
            newer,
        )
    latest = [v.version for v in detail.versions]
    recent = runs.list_runs(found.platform, definition=name, limit=RECENT_RUNS * 2).items
    recent_backfills = backfills.list_backfills(
        found.platform, definition=name, limit=RECENT_BACKFILLS
    )
    return context.render(
        found,
        "definition.html",
        live=f"/ui/live?definitions=1&since={mark}",
        graph=(
            graphs.definition_graph(detail.graph, lambda kind: found.t(f"graph.{kind}"))
            if detail.graph is not None and detail.graph.tasks
            else None
        ),
        status=status,
        trigger_problems=trigger_problems,
        typed=typed,
        detail=detail,
        item=detail.definition,
        recent=recent,
        diff=diff,
        diff_from=older or (latest[-2] if len(latest) > 1 else None),
        diff_to=newer or (latest[-1] if latest else None),
        recent_backfills=recent_backfills,
        **{"backfill_typed": None, "backfill_problems": (), "preview": None, **backfill},
    )


@router.get("/{name}/edit")
def edit_page(request: Request, name: str) -> Response:
    found = context.page(request)
    found.require(TokenRole.ADMIN)
    detail = definitions.get_definition(found.platform, name)
    return _editor(found, detail.source or "", problems=(), name=name)


@router.post("/{name}/edit")
async def edit(request: Request, name: str) -> Response:
    return await _apply(request, name=name)


@router.post("/{name}/trigger")
async def trigger(request: Request, name: str) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    parameters: dict[str, JSONValue] = {}
    for key, value in form.multi_items():
        if key.startswith("param.") and isinstance(value, str) and value.strip():
            parameters[key.removeprefix("param.")] = forms.typed_value(value)
    extra = form.get("extra")
    typed = extra if isinstance(extra, str) else ""
    given, malformed = forms.parameter_lines(typed)
    parameters.update(given)
    if malformed:
        return await run_in_threadpool(
            detail, found, name, trigger_problems=tuple(malformed), typed=typed, status=422
        )
    key_given = str(form.get("idempotency_key") or "").strip() or None
    try:
        triggered = await run_in_threadpool(
            runs.trigger_run,
            found.platform,
            name,
            actor=principal.actor,
            kind=TriggerKind.MANUAL,
            parameters=parameters,
            key=key_given,
        )
    except errors.InvalidInput as exc:
        found_problems = exc.problems or (errors.FieldProblem("", None, str(exc)),)
        return await run_in_threadpool(
            detail, found, name, trigger_problems=found_problems, typed=typed, status=422
        )
    return RedirectResponse(f"/ui/runs/{triggered.run_id}", status_code=303)


@router.post("/{name}/enable")
async def enable(request: Request, name: str) -> Response:
    return await _set_enabled(request, name, enabled=True)


@router.post("/{name}/disable")
async def disable(request: Request, name: str) -> Response:
    return await _set_enabled(request, name, enabled=False)


@router.get("/{name}/delete")
def delete_page(request: Request, name: str) -> Response:
    found = context.page(request)
    found.require(TokenRole.ADMIN)
    preview = definitions.deletion_preview(found.platform, name)
    return context.render(found, "delete.html", preview=preview)


@router.post("/{name}/delete")
async def delete(request: Request, name: str) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.ADMIN)
    await run_in_threadpool(
        definitions.delete_definition,
        found.platform,
        name,
        actor=principal.actor,
        purge=form.get("purge") == "yes",
    )
    return RedirectResponse(f"/ui/definitions/{name}", status_code=303)


# -- helpers ---------------------------------------------------------------------------------


async def _apply(request: Request, *, name: str | None) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.ADMIN)
    source = str(form.get("source") or "")
    try:
        applied = await run_in_threadpool(
            definitions.apply_definition, found.platform, source, actor=principal.actor
        )
    except errors.InvalidInput as exc:
        return _editor(found, source, problems=exc.problems, name=name, status=422)
    return RedirectResponse(f"/ui/definitions/{applied.name}", status_code=303)


def _editor(
    found: context.Page,
    source: str,
    *,
    problems: tuple[errors.FieldProblem, ...] | list[errors.FieldProblem],
    name: str | None,
    status: int = 200,
) -> Response:
    by_line: dict[int, list[errors.FieldProblem]] = {}
    general: list[errors.FieldProblem] = []
    for problem in problems:
        if problem.line is None:
            general.append(problem)
        else:
            by_line.setdefault(problem.line, []).append(problem)
    lines = source.split("\n")
    return context.render(
        found,
        "editor.html",
        status=status,
        source=source,
        lines=lines,
        line_count=max(len(lines), 1),
        by_line=by_line,
        general=general,
        problems=problems,
        name=name,
    )


async def _set_enabled(request: Request, name: str, *, enabled: bool) -> Response:
    found, _ = await context.submitted(request)
    principal = found.require(TokenRole.ADMIN)
    await run_in_threadpool(
        definitions.set_enabled, found.platform, name, enabled=enabled, actor=principal.actor
    )
    return RedirectResponse(f"/ui/definitions/{name}", status_code=303)


def _diff(old: str, new: str, older: int, newer: int) -> list[tuple[str, str]]:
    """The unified diff of two versions' sources as (kind, line) pairs for the page."""
    shown: list[tuple[str, str]] = []
    for line in difflib.unified_diff(
        old.splitlines(), new.splitlines(), f"v{older}", f"v{newer}", lineterm=""
    ):
        if line.startswith(("+++", "---")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        shown.append((kind, line))
    return shown

"""Backfills in the web UI: the definition page's *Backfill…* form, its dry-run preview, the
confirmation that acts, and the page of one backfill (its intervals and progress)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from veritask.core import refusals
from veritask.core.jsontypes import JSONValue
from veritask.services import backfills, errors
from veritask.services.tokens import TokenRole
from veritask.ui import context, forms
from veritask.ui.pages import definitions
from veritask.ui.pages.routing import UiRoute

router = APIRouter(route_class=UiRoute, include_in_schema=False)
CONFIRM: Final = "confirm"


@dataclass(frozen=True)
class Typed:
    """The form as the operator filled it in: shown again with a refusal or the preview."""

    start: str = ""
    end: str = ""
    existing: str = backfills.EXISTING_CHOICES[0]
    max_active: str = "1"
    parameters: str = ""
    reason: str = ""


@router.post("/ui/definitions/{name}/backfill")
async def backfill(request: Request, name: str) -> Response:
    """Preview the backfill (a dry run), or, once confirmed, ask for it and show it."""
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    typed = _typed(form)
    confirmed = form.get("step") == CONFIRM
    try:
        start, end, max_active, parameters = _checked(typed, found)
        requested = await run_in_threadpool(
            backfills.request_backfill,
            found.platform,
            name,
            start=start,
            end=end,
            actor=principal.actor,
            parameters=parameters,
            max_active_runs=max_active,
            existing=typed.existing,
            dry_run=not confirmed,
            reason=typed.reason,
        )
    except errors.InvalidInput as exc:
        problems = exc.problems or (errors.FieldProblem("", None, str(exc)),)
        return await _again(found, name, typed, problems)
    except errors.Conflict as exc:
        return await _again(found, name, typed, (errors.FieldProblem("", None, str(exc)),))
    if not confirmed:
        return await run_in_threadpool(
            definitions.detail, found, name, backfill_typed=typed, preview=requested.backfill
        )
    return RedirectResponse(f"/ui/backfills/{requested.backfill.id}", status_code=303)


@router.get("/ui/backfills/{backfill_id}")
def backfill_page(request: Request, backfill_id: str) -> Response:
    found = context.page(request)
    shown = backfills.get_backfill(found.platform, backfill_id)
    return context.render(found, "backfill.html", backfill=shown)


def _typed(form: FormData) -> Typed:
    def text(key: str, default: str = "") -> str:
        value = form.get(key)
        return value.strip() if isinstance(value, str) else default

    return Typed(
        start=text("from"),
        end=text("to"),
        existing=text("existing", Typed.existing),
        max_active=text("max_active", Typed.max_active),
        parameters=text("parameters"),
        reason=text("reason"),
    )


def _checked(
    typed: Typed, found: context.Page
) -> tuple[datetime, datetime, int, dict[str, JSONValue]]:
    """The form's values, or InvalidInput naming every field that is wrong."""
    problems: list[errors.FieldProblem] = []
    moments: list[datetime] = []
    for field, text in (("from", typed.start), ("to", typed.end)):
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            problems.append(
                errors.FieldProblem(field, None, refusals.NOT_A_MOMENT.format(value=text))
            )
            continue
        # A time typed without a zone is in the viewer's zone, as the page shows times.
        moments.append(moment if moment.tzinfo is not None else moment.replace(tzinfo=found.zone))
    try:
        max_active = int(typed.max_active)
    except ValueError:
        max_active = 0  # the service names the field and the range allowed
    parameters, malformed = forms.parameter_lines(typed.parameters)
    problems += malformed
    if not typed.reason:
        problems.append(
            errors.FieldProblem("reason", None, refusals.BACKFILL_NEEDS_REASON.format())
        )
    if problems:
        raise errors.InvalidInput(problems[0].message, problems)
    return moments[0], moments[1], max_active, parameters


async def _again(
    found: context.Page,
    name: str,
    typed: Typed,
    problems: tuple[errors.FieldProblem, ...] | list[errors.FieldProblem],
) -> Response:
    """The definition page with the form as typed and what is wrong with it (422)."""
    return await run_in_threadpool(
        definitions.detail,
        found,
        name,
        backfill_typed=typed,
        backfill_problems=tuple(problems),
        status=422,
    )

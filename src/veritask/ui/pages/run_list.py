"""The runs list at ``/ui/runs``: the filters of ``GET /api/v2/runs`` as a GET form, pages by
cursor (older and newer), live; and a definition's grid at ``/ui/definitions/{name}/grid``.

The form's times are ``datetime-local`` values, read in the viewer's time zone; a value the
form could not have sent (a state that does not exist, a time that is not one) is refused with
the field it came in, as the API refuses it.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Final, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from veritask.core import problems, refusals
from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.services import activity, definitions, grid, run_lists
from veritask.services.errors import InvalidInput
from veritask.ui import context, rendering
from veritask.ui import grid as ui_grid
from veritask.ui.pages.routing import UiRoute

router = APIRouter(route_class=UiRoute, include_in_schema=False)
PAGE_SIZE: Final = 50
#: The form's fields, in the order the page shows them and a link repeats them.
TIME_FIELDS: Final = ("logical_from", "logical_to", "created_from", "created_to")
CHOICE_FIELDS: Final = ("execution_state", "publication_state", "trigger_kind")
Choice = TypeVar("Choice", bound=StrEnum)


@router.get("/ui/runs")
def runs_page(
    request: Request,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    before: Annotated[str | None, Query(max_length=512)] = None,
) -> Response:
    found = context.page(request)
    given = request.query_params
    text = {name: given.get(name, "").strip() for name in ("definition", "q", *TIME_FIELDS)}
    chosen = {name: [v for v in given.getlist(name) if v] for name in CHOICE_FIELDS}
    times = {name: _moment(name, text[name], found.zone) for name in TIME_FIELDS}
    filters = run_lists.RunFilters(
        definition=text["definition"] or None,
        execution_states=_choices("execution_state", chosen["execution_state"], RunExecutionState),
        publication_states=_choices(
            "publication_state", chosen["publication_state"], PublicationState
        ),
        trigger_kinds=_choices("trigger_kind", chosen["trigger_kind"], TriggerKind),
        logical_from=times["logical_from"],
        logical_to=times["logical_to"],
        created_from=times["created_from"],
        created_to=times["created_to"],
        text=text["q"] or None,
    )
    position = activity.latest_position(found.platform)
    listed = run_lists.list_runs(
        found.platform, filters, cursor=cursor, before=before, limit=PAGE_SIZE
    )
    kept: list[tuple[str, str]] = [
        (name, text[name]) for name in ("definition", "q", *TIME_FIELDS) if text[name]
    ]
    kept += [(name, value) for name in CHOICE_FIELDS for value in chosen[name]]
    return context.render(
        found,
        "runs.html",
        listed=listed,
        text=text,
        chosen=chosen,
        names=[d.name for d in definitions.list_definitions(found.platform)],
        execution_states=[s.value for s in RunExecutionState],
        publication_states=[s.value for s in PublicationState],
        trigger_kinds=[k.value for k in TriggerKind],
        older=_link(kept, "cursor", listed.next_cursor),
        newer=_link(kept, "before", listed.previous_cursor),
        filtered=bool(kept),
        live=f"/ui/live?since={position}",
    )


@router.get("/ui/definitions/{name}/grid")
def grid_page(request: Request, name: str, runs: Annotated[str, Query()] = "") -> Response:
    found = context.page(request)
    count = _whole_number("runs", runs) if runs else grid.DEFAULT_RUNS
    position = activity.latest_position(found.platform)
    shown = grid.definition_grid(found.platform, name, runs=count)
    return context.render(
        found,
        "grid.html",
        grid=shown,
        cells=ui_grid.row_writer(found.t, rendering.sentence_in(found.t, found.zone)),
        count=count,
        counts=sorted({10, grid.DEFAULT_RUNS, 50, grid.MAX_RUNS, count}),
        live=f"/ui/live?since={position}",
    )


def _link(kept: Sequence[tuple[str, str]], name: str, value: str | None) -> str | None:
    if value is None:
        return None
    return "/ui/runs?" + urlencode([*kept, (name, value)])


def _moment(name: str, text: str, zone: zoneinfo.ZoneInfo) -> datetime | None:
    """A ``datetime-local`` value (or any ISO time) in the viewer's zone unless it has one."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput.about(name, refusals.NOT_A_MOMENT.format(value=text)) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def _choices(name: str, values: Sequence[str], kind: type[Choice]) -> list[Choice]:
    known = [member.value for member in kind]
    picked = []
    for value in values:
        if value not in known:
            raise InvalidInput.about(
                name, problems.EXPECTED_ONE_OF.format(names=", ".join(known), kind=repr(value))
            )
        picked.append(kind(value))
    return picked


def _whole_number(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidInput.about(name, refusals.BETWEEN.format(low=1, high=grid.MAX_RUNS)) from None

"""The services' views into the wire models, where the wire flattens a view's parts."""

from __future__ import annotations

import dataclasses

from veritask.api import schemas
from veritask.services import views


def definition_detail(view: views.DefinitionDetail) -> schemas.DefinitionDetail:
    return schemas.DefinitionDetail.model_validate(
        {
            **dataclasses.asdict(view.definition),
            "versions": view.versions,
            "source": view.source,
            **dataclasses.asdict(view.publications),
        }
    )


def run_summary(view: views.Run) -> schemas.Run:
    return schemas.Run.model_validate(_fields(view))


def run_detail(view: views.RunDetail, next_cursor: str | None = None) -> schemas.RunDetail:
    return schemas.RunDetail.model_validate(
        {
            **_fields(view.run),
            "instances": view.instances,
            "instances_next_cursor": next_cursor,
            "upstream_runs": view.upstream_runs,
        }
    )


def instance_detail(view: views.InstanceDetail) -> schemas.InstanceDetail:
    return schemas.InstanceDetail.model_validate(
        {
            **_fields(view.instance),
            "definition": view.definition,
            "events": view.history.events,
            "next_after": view.history.next_after,
        }
    )


def _fields(view: views.Run | views.Instance) -> dict[str, object]:
    """The view's own fields, shallowly (nested views stay objects, read by attribute)."""
    return {field.name: getattr(view, field.name) for field in dataclasses.fields(view)}

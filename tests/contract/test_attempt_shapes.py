"""An attempt's record has four shapes: the fold's view (``core/fold.py``), the ledger's row
(``ledger/rows.py``), the services' view (``services/views.py``) and the API's model
(``api/schemas.py``). Each boundary is crossed by one mapping, in one direction:

- view to row: ``ledger.statements.attempt_row`` (``Ledger.refresh_lease`` goes through it);
- row read back: ``AttemptRow.from_row``;
- view and row to the services' view: ``services.reading.instance_view``;
- services' view to the API: the model reads the view's attributes (``from_attributes``).

These tests keep the shapes in step, so a field added to one is added to the next.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

from veritask.api import schemas
from veritask.core.fold import AttemptView
from veritask.core.policy import TaskPolicy
from veritask.core.states import AttemptState
from veritask.ledger import attempt_reports, pools, rows, schema, statements
from veritask.services import views

SRC = Path(__file__).resolve().parents[2] / "src" / "veritask"


def _columns() -> set[str]:
    return {column.name for column in schema.attempts.columns}


def test_the_row_mapping_writes_every_column_of_the_attempts_table() -> None:
    ended = dataclasses.replace(_blank_view(), attempt_no=1, state=AttemptState.SUCCESS, late=())
    written = set(statements.attempt_row("instance-1", ended, TaskPolicy()))

    # The worker's report (its last error and what it cost) is written once, by its own
    # statement, and so is the pool an attempt holds (by the transaction that opens it); the
    # progress it recorded is counted by its own statement too: never with the fold's columns,
    # and together they are every column.
    once = (
        set(attempt_reports.REPORT_COLUMNS)
        | set(attempt_reports.COUNTER_COLUMNS)
        | set(pools.SLOT_COLUMNS)
    )
    assert written | once == _columns()
    assert not written & once


def test_the_row_read_back_has_every_column() -> None:
    assert {f.name for f in dataclasses.fields(rows.AttemptRow)} == _columns()


def test_the_api_model_has_the_services_fields_and_no_other() -> None:
    assert set(schemas.Attempt.model_fields) == {f.name for f in dataclasses.fields(views.Attempt)}
    assert set(schemas.Progress.model_fields) == {
        f.name for f in dataclasses.fields(views.Progress)
    }


def test_the_lease_a_row_caches_is_derived_in_one_place_of_the_ledger() -> None:
    calls = [
        path.relative_to(SRC).as_posix()
        for path in sorted((SRC / "ledger").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "lease_expiry"
    ]

    assert calls == ["ledger/statements.py"]


def _blank_view() -> AttemptView:
    """A view with every field empty: what the mapping names, not what it computes."""
    blank: dict[str, Any] = {f.name: None for f in dataclasses.fields(AttemptView)}
    return AttemptView(**blank)

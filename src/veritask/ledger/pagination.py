"""Keyset pagination on ``(created_at, id)``: stable under inserts, no OFFSET scans.

A cursor names the last row of a page; the next page holds the rows strictly after it in the
listing's order. The API hands cursors out as opaque strings (``Cursor.encode``).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

import sqlalchemy as sa

T = TypeVar("T")


@dataclass(frozen=True)
class Cursor:
    """The position of one row in a listing ordered by ``(created_at, id)``."""

    created_at: datetime
    id: str

    def encode(self) -> str:
        """An opaque, URL-safe string for the API."""
        payload = json.dumps({"t": self.created_at.isoformat(), "id": self.id})
        return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Read a cursor made by ``encode``; ValueError if it is not one."""
        try:
            padded = text + "=" * (-len(text) % 4)
            payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
            created_at = datetime.fromisoformat(payload["t"])
            row_id = payload["id"]
        except (binascii.Error, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a page cursor: {text!r}") from exc
        if created_at.tzinfo is None or not isinstance(row_id, str):
            raise ValueError(f"not a page cursor: {text!r}")
        return cls(created_at=created_at, id=row_id)


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing and the cursor of the next, None on the last page."""

    items: list[T]
    next_cursor: Cursor | None


def after(
    created_at: sa.ColumnElement[datetime],
    row_id: sa.ColumnElement[str],
    cursor: Cursor,
    *,
    newest_first: bool,
) -> sa.ColumnElement[bool]:
    """The rows strictly after ``cursor`` in ``(created_at, id)`` order (a row comparison)."""
    key = sa.tuple_(created_at, row_id)
    bound = sa.tuple_(sa.literal(cursor.created_at, type_=created_at.type), sa.literal(cursor.id))
    return key < bound if newest_first else key > bound


def order(
    created_at: sa.ColumnElement[datetime],
    row_id: sa.ColumnElement[str],
    *,
    newest_first: bool,
) -> tuple[sa.UnaryExpression[datetime], sa.UnaryExpression[str]]:
    """The ORDER BY that ``after`` pages through."""
    if newest_first:
        return created_at.desc(), row_id.desc()
    return created_at.asc(), row_id.asc()

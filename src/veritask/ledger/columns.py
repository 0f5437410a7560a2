"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime, identical on both databases.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so the value is stored as a
    naive UTC ``TIMESTAMP`` text that sorts in time order and comes back as aware UTC. Naive
    datetimes are refused: a datetime without a zone is a bug, not a UTC value.
    """

    impl = sa.TIMESTAMP(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()} refused; pass an aware one")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def json_column_type(*, none_as_null: bool = False) -> sa.JSON:
    """JSON everywhere, JSONB on PostgreSQL (indexable, compact, compared by value).

    ``none_as_null`` makes Python ``None`` an SQL NULL rather than the JSON ``null``, for
    columns where "absent" is meaningful (a snapshot's fold before the first event).
    """
    return sa.JSON(none_as_null=none_as_null).with_variant(
        postgresql.JSONB(none_as_null=none_as_null), "postgresql"
    )


#: Event and alert positions: BIGINT on PostgreSQL; on SQLite only ``INTEGER PRIMARY KEY`` is
#: the rowid alias that autoincrements, so the type must be INTEGER there.
PositionType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

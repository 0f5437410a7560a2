"""A ledger's history, loaded rather than run: copies of a real run's rows (``bench.scale``).

Each copy holds all of the run's rows (the run, its instances with their folds, their attempts,
every event with its fingerprint) with new ids and tokens and every time moved back by a whole
number of minutes, so that the fold, the ids' time order and the indexes see what a real run
left. Loading writes straight to the tables (``executemany`` on SQLite, ``COPY`` on
PostgreSQL); ``settle`` then gives the database what one grown over months would have had.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from veritask.ledger import dialects, schema

#: How far back each copy is from the one before it.
SPACING: Final = timedelta(minutes=10)
#: Instances copied per transaction, about: whole runs, however small.
INSTANCES_PER_BATCH: Final = 10_000

#: What a copy renews: UUIDs (ids, the idempotency key's), hex tokens (token hashes, nonces)
#: and ISO times inside text and JSON.
_TOKENS = re.compile(
    r"\b(?P<token>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|[0-9a-f]{64}|[0-9a-f]{32})\b"
    r"|(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6})?\+00:00)"
)
_MS_MASK: Final = (1 << 48) - 1
#: The tables a run's rows live in, in the order their foreign keys need.
_TABLES: Final = (schema.runs, schema.task_instances, schema.attempts, schema.events)


# -- the template: a real run's rows, with what each copy renews marked ------------------------


@dataclass
class Template:
    """A run's rows, each cell either kept or an index into what a copy renews.

    A copy builds one pool of values (the kept constants, then its tokens, its times, its
    texts and its fingerprints) and takes each row out of it with an ``itemgetter``: the
    copies of a million rows cost a format per text and a tuple per row."""

    kept: set[str]
    dialect: str
    constants: list[object] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    times: dict[datetime, int] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    #: Per table: its columns and, per row, the pool indexes of its cells (symbolic until
    #: ``seal``: ("c", i), ("k", i), ("t", i), ("x", i), ("f", i)).
    columns: dict[str, list[str]] = field(default_factory=dict)
    cells: dict[str, list[list[tuple[str, int]]]] = field(default_factory=dict)
    getters: dict[str, list[Callable[[list[object]], tuple[object, ...]]]] = field(
        default_factory=dict
    )
    instances: int = 0

    def _token(self, token: str) -> int:
        return self.tokens.setdefault(token, len(self.tokens))

    def _time(self, moment: datetime) -> int:
        return self.times.setdefault(moment, len(self.times))

    def _text(self, text: str) -> tuple[str, int] | None:
        """A format over the copy's tokens ({0[i]}) and ISO times ({1[i]}), or None when the
        text has nothing to renew."""
        parts: list[str] = []
        last = 0
        for match in _TOKENS.finditer(text):
            token, moment = match.group("token"), match.group("time")
            if token is not None and token in self.kept:
                continue
            parts.append(text[last : match.start()].replace("{", "{{").replace("}", "}}"))
            if token is not None:
                parts.append(f"{{0[{self._token(token)}]}}")
            else:
                parts.append(f"{{1[{self._time(datetime.fromisoformat(moment))}]}}")
            last = match.end()
        if not parts:
            return None
        parts.append(text[last:].replace("{", "{{").replace("}", "}}"))
        self.texts.append("".join(parts))
        return ("x", len(self.texts) - 1)

    def _cell(self, value: object, *, json_column: bool) -> tuple[str, int]:
        if isinstance(value, datetime):
            return ("t", self._time(value))
        if json_column and value is not None:
            value = json.dumps(value)
        if isinstance(value, str):
            if value in self.kept:
                pass
            elif (whole := _TOKENS.fullmatch(value)) is not None and whole.group("token"):
                return ("k", self._token(value))
            else:
                text = self._text(value)
                if text is not None:
                    return text
        self.constants.append(value)
        return ("c", len(self.constants) - 1)

    def add(self, table: sa.Table, row: sa.RowMapping) -> None:
        names = [c.name for c in table.columns if c.name != "position"]
        self.columns.setdefault(table.name, names)
        cells = []
        for name in names:
            if table is schema.events and name == "fingerprint":
                content = _fingerprinted(row)
                if hashlib.sha256(content.encode()).hexdigest() != row["fingerprint"]:
                    raise RuntimeError(f"cannot rebuild the fingerprint of event {row['event_id']}")
                text = self._text(content)
                if text is None:
                    raise RuntimeError(f"event {row['event_id']} has nothing to renew")
                self.fingerprints.append(self.texts.pop())
                cells.append(("f", len(self.fingerprints) - 1))
                continue
            json_column = isinstance(table.columns[name].type, sa.JSON)
            cells.append(self._cell(row[name], json_column=json_column))
        self.cells.setdefault(table.name, []).append(cells)

    def seal(self) -> None:
        """Turn the symbolic cells into pool indexes, now that every part's length is known."""
        starts = {"c": 0}
        starts["k"] = starts["c"] + len(self.constants)
        starts["t"] = starts["k"] + len(self.tokens)
        starts["x"] = starts["t"] + len(self.times)
        starts["f"] = starts["x"] + len(self.texts)
        for table, rows in self.cells.items():
            self.getters[table] = [
                operator.itemgetter(*(starts[kind] + index for kind, index in cells))
                for cells in rows
            ]

    def copy(self, shift: timedelta) -> dict[str, list[tuple[object, ...]]]:
        """Every row of one copy, each time moved by ``shift``, with new ids and tokens."""
        shift_ms = int(shift.total_seconds() * 1000)
        tokens = [_renewed(token, shift_ms) for token in self.tokens]
        moments = [moment + shift for moment in self.times]
        iso = [moment.isoformat() for moment in moments]
        stored: list[object]
        if self.dialect == "sqlite":
            # As SQLAlchemy stores a UTCDateTime there: naive UTC, always six decimals.
            stored = [f"{m:%Y-%m-%d %H:%M:%S.%f}" for m in moments]
        else:
            stored = list(moments)
        texts = [text.format(tokens, iso) for text in self.texts]
        prints = [
            hashlib.sha256(text.format(tokens, iso).encode()).hexdigest()
            for text in self.fingerprints
        ]
        pool: list[object] = [*self.constants, *tokens, *stored, *texts, *prints]
        return {table: [get(pool) for get in getters] for table, getters in self.getters.items()}


def _fingerprinted(row: sa.RowMapping) -> str:
    """What the platform hashed for an event's fingerprint (core ``events.fingerprint`` for an
    instance's, ``run_store.record_subject_event`` for a run's)."""
    if row["instance_id"] is not None:
        content = {
            "instance_id": row["instance_id"],
            "attempt_no": row["attempt_no"],
            "kind": row["kind"],
            "actor": row["actor"],
            "event_time": row["event_time"].isoformat(),
            "evidence": row["evidence"],
            "seq": row["seq"],
        }
        return json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    subject = [row["subject_type"], row["subject_id"], row["kind"], row["actor"], row["evidence"]]
    return json.dumps(subject, sort_keys=True, default=str)


def _renewed(token: str, shift_ms: int) -> str:
    """A UUID keeps its random bits and moves its 48-bit time prefix, so a copy's ids sort
    among themselves as the template's did (the fold breaks ties between events by id); a hex
    token (a token's hash, a nonce) is drawn anew."""
    if "-" not in token:
        return secrets.token_hex(len(token) // 2)
    prefix = (int(token[:8] + token[9:13], 16) + shift_ms) & _MS_MASK
    head = f"{prefix:012x}"
    return f"{head[:8]}-{head[8:]}{token[13:]}"


def template_of(engine: Engine, run_id: str, definition_id: str) -> Template:
    r, t, a, e = (table.c for table in _TABLES)
    with dialects.read_transaction(engine) as connection:
        definition_hashes = connection.execute(
            sa.select(schema.definition_versions.c.content_hash).where(
                schema.definition_versions.c.definition_id == definition_id
            )
        ).scalars()
        kept = {definition_id, *(h.removeprefix("sha256:") for h in definition_hashes)}
        template = Template(kept, engine.dialect.name)
        selects = (
            sa.select(schema.runs).where(r.id == run_id),
            sa.select(schema.task_instances).where(t.run_id == run_id).order_by(t.id),
            sa.select(schema.attempts)
            .join(schema.task_instances, t.id == a.instance_id)
            .where(t.run_id == run_id)
            .order_by(a.instance_id, a.attempt_no),
            sa.select(schema.events).where(e.run_id == run_id).order_by(e.position),
        )
        for table, select in zip(_TABLES, selects, strict=True):
            for row in connection.execute(select).mappings():
                template.add(table, row)
    template.instances = len(template.cells[schema.task_instances.name])
    template.seal()
    return template


# -- loading ---------------------------------------------------------------------------------


def _batches(
    template: Template, first: int, count: int
) -> Iterator[dict[str, list[tuple[object, ...]]]]:
    """Copies ``first`` .. ``first + count - 1``, each one SPACING further back in time."""
    per_batch = max(1, INSTANCES_PER_BATCH // max(1, template.instances))
    for start in range(first, first + count, per_batch):
        batch: dict[str, list[tuple[object, ...]]] = {table.name: [] for table in _TABLES}
        for n in range(start, min(first + count, start + per_batch)):
            for table, rows in template.copy(-SPACING * (n + 1)).items():
                batch[table].extend(rows)
        yield batch


def load(engine: Engine, template: Template, first: int, count: int) -> None:
    if engine.dialect.name == "postgresql":
        _load_postgres(engine, template, first, count)
    else:
        _load_sqlite(engine, template, first, count)


def _load_postgres(engine: Engine, template: Template, first: int, count: int) -> None:
    pooled = engine.raw_connection()
    try:
        driver = pooled.driver_connection
        if not isinstance(driver, psycopg.Connection):
            raise TypeError("loading PostgreSQL needs the psycopg driver")
        for batch in _batches(template, first, count):
            with driver.cursor() as cursor:
                for table in _TABLES:
                    columns = ", ".join(template.columns[table.name])
                    with cursor.copy(f"COPY {table.name} ({columns}) FROM STDIN") as copy:
                        for row in batch[table.name]:
                            copy.write_row(row)
            driver.commit()
    finally:
        pooled.close()


def _load_sqlite(engine: Engine, template: Template, first: int, count: int) -> None:
    pooled = engine.raw_connection()
    try:
        driver = pooled.driver_connection
        if not isinstance(driver, sqlite3.Connection):
            raise TypeError("loading SQLite needs the sqlite3 driver")
        # A bulk load may trade durability for speed: a crash loses only copied rows.
        driver.execute("PRAGMA synchronous = OFF")
        try:
            for batch in _batches(template, first, count):
                driver.execute("BEGIN IMMEDIATE")
                for table in _TABLES:
                    columns = template.columns[table.name]
                    driver.executemany(
                        f"INSERT INTO {table.name} ({', '.join(columns)}) "
                        f"VALUES ({', '.join('?' for _ in columns)})",
                        batch[table.name],
                    )
                driver.execute("COMMIT")
        finally:
            driver.execute("PRAGMA synchronous = NORMAL")
    finally:
        pooled.close()


def settle(engine: Engine) -> None:
    """What a database grown over months has had: a checkpoint; on PostgreSQL, autovacuum's
    visibility map and statistics."""
    if engine.dialect.name == "sqlite":
        pooled = engine.raw_connection()
        try:
            pooled.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[union-attr]
        finally:
            pooled.close()
        return
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT")
        for table in _TABLES:
            connection.exec_driver_sql(f"VACUUM ANALYZE {table.name}")
        connection.exec_driver_sql("CHECKPOINT")


def ledger_bytes(engine: Engine, url: str) -> int:
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            size = connection.exec_driver_sql("SELECT pg_database_size(current_database())")
            return int(size.scalar_one())
    path = Path(url.removeprefix("sqlite:///"))
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))

"""An attempt's log: the tail, a byte range to follow it, or the lines that match a search.

The server decides where an attempt's log is, from the attempt's identity alone: the copy its
engine keeps elsewhere, when the engine has one (``execution/engines.py``, ``read_log``: a
Celery worker ships its log to the result backend), else its attempt directory under
``VERITASK_HOME/executor/attempts/<instance id>/<attempt no>/task.log``, where the local
executor's worker writes it. The path a worker's report names is never read: a
report must not be a way to read any other file of the server (the judge refuses a report
that names another log). Every answer is capped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final, NamedTuple

from veritask.core import refusals
from veritask.core.fold import AttemptView
from veritask.execution import engines, layout
from veritask.ledger import dialects, queries
from veritask.services import reading, views
from veritask.services.errors import InvalidInput, NotFound
from veritask.services.platform import Platform

#: The most bytes one answer carries.
MAX_CHUNK: Final = 1024 * 1024
DEFAULT_TAIL: Final = 64 * 1024
#: The most attempts one search reads, newest runs first.
MAX_SEARCHED_ATTEMPTS: Final = 500
#: The most matching lines one search returns.
MAX_MATCHES: Final = 1000


class ShippedLog(NamedTuple):
    """A log its engine keeps away from this server, and what an answer calls it."""

    location: str
    data: bytes


def attempt_of(
    platform: Platform, instance_id: str, attempt_no: int | None
) -> tuple[int, AttemptView]:
    """The attempt whose log is asked for (default: the current one), with its number;
    NotFound for no such instance or attempt."""
    loaded = platform.ledger.snapshot(instance_id)
    if loaded is None:
        raise NotFound(refusals.NO_INSTANCE.format(instance_id=instance_id))
    snapshot, _ = loaded
    number = attempt_no if attempt_no is not None else snapshot.epoch
    attempt = snapshot.attempt(number)
    if attempt is None:
        raise NotFound(refusals.NO_ATTEMPT.format(instance_id=instance_id, attempt_no=number))
    return number, attempt


def read_log(
    platform: Platform,
    instance_id: str,
    *,
    attempt_no: int | None = None,
    offset: int | None = None,
    tail: int = DEFAULT_TAIL,
    search: str | None = None,
    limit: int = MAX_CHUNK,
) -> views.LogChunk:
    """Part of the log of ``attempt_no`` (default: the current attempt).

    With ``search``: the lines that contain it (case-insensitive). With ``offset``: the bytes
    from there on, to follow a growing log (``next_offset`` continues). Otherwise the last
    ``tail`` bytes.
    """
    if not 1 <= limit <= MAX_CHUNK:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_CHUNK))
    if not 0 <= tail <= MAX_CHUNK:
        raise InvalidInput.about("tail", refusals.BETWEEN.format(low=0, high=MAX_CHUNK))
    if offset is not None and offset < 0:
        raise InvalidInput.about("offset", refusals.NOT_NEGATIVE.format())
    number, attempt = attempt_of(platform, instance_id, attempt_no)
    ended = attempt.state.is_terminal
    shipped = shipped_log(attempt.executor, instance_id, number)
    if shipped is not None:
        return _from_bytes(
            shipped.location,
            instance_id,
            number,
            shipped.data,
            offset,
            tail,
            search,
            limit,
            ended,
        )
    location = _location(platform, instance_id, number)
    if location is None:
        return views.LogChunk(instance_id, number, None, 0, 0, 0, "", False, ended)
    path = Path(location)
    size = _size(path)
    if search:
        text, truncated = _search(path, search, limit) if size else ("", False)
        return views.LogChunk(instance_id, number, location, size, 0, size, text, truncated, ended)
    start = offset if offset is not None else max(0, size - tail)
    start = min(start, size)
    length = min(limit, size - start) if offset is not None else min(limit, tail, size - start)
    data = _read(path, start, length) if length else b""
    truncated = start + len(data) < size
    return views.LogChunk(
        instance_id,
        number,
        location,
        size,
        start,
        start + len(data),
        data.decode(errors="replace"),
        truncated,
        ended,
    )


def search_logs(
    platform: Platform,
    text: str,
    *,
    definition: str | None = None,
    run_id: str | None = None,
    instance_id: str | None = None,
    max_matches: int = MAX_MATCHES,
) -> views.LogSearch:
    """The lines containing ``text`` (case-insensitive) in every attempt's log of a
    definition's recent runs, of a run, or of an instance; exactly one scope is needed.

    An attempt's log is the one its engine keeps, when it keeps one (a Celery worker's shipped
    log), else the file in its attempt directory. Attempts whose log neither holds are skipped,
    not refused: one unreadable attempt does not hide the others' matches.
    """
    if not text.strip():
        raise InvalidInput.about("text", refusals.NOT_BLANK.format())
    if not 1 <= max_matches <= MAX_MATCHES:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_MATCHES))
    scopes = [
        name
        for name, value in (("definition", definition), ("run", run_id), ("instance", instance_id))
        if value is not None
    ]
    if len(scopes) != 1:
        raise InvalidInput.about("definition", refusals.ONE_SCOPE.format())
    with dialects.read_transaction(platform.engine) as connection:
        definition_id = None
        if definition is not None:
            definition_id = reading.definition_named(connection, definition).id
        elif run_id is not None and queries.get_run(connection, run_id) is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        elif instance_id is not None and queries.get_instance(connection, instance_id) is None:
            raise NotFound(refusals.NO_INSTANCE.format(instance_id=instance_id))
        attempts = queries.attempt_logs(
            connection,
            definition_id=definition_id,
            run_id=run_id,
            instance_id=instance_id,
            limit=MAX_SEARCHED_ATTEMPTS + 1,
        )
    truncated = len(attempts) > MAX_SEARCHED_ATTEMPTS
    attempts = attempts[:MAX_SEARCHED_ATTEMPTS]
    matches: list[views.LogMatch] = []
    budget = MAX_CHUNK
    for attempt in attempts:
        shipped = shipped_log(attempt.executor, attempt.instance_id, attempt.attempt_no)
        if shipped is not None:
            found = _matching(shipped.data.splitlines(keepends=True), text)
        else:
            location = _location(platform, attempt.instance_id, attempt.attempt_no)
            if location is None:
                continue
            found = _matching_lines(Path(location), text)
        for line_no, line in found:
            if len(matches) >= max_matches or len(line) > budget:
                return views.LogSearch(text, tuple(matches), len(attempts), True)
            budget -= len(line)
            matches.append(
                views.LogMatch(
                    attempt.run_id,
                    attempt.instance_id,
                    attempt.task_key,
                    attempt.attempt_no,
                    line_no,
                    line,
                )
            )
    return views.LogSearch(text, tuple(matches), len(attempts), truncated)


def _matching(lines: Iterable[bytes], needle: str) -> Iterator[tuple[int, str]]:
    wanted = needle.casefold()
    for number, raw in enumerate(lines, start=1):
        line = raw.decode(errors="replace")
        if wanted in line.casefold():
            yield number, line.rstrip("\n")


def _matching_lines(path: Path, needle: str) -> Iterator[tuple[int, str]]:
    try:
        with path.open("rb") as handle:
            yield from _matching(handle, needle)
    except (FileNotFoundError, IsADirectoryError):
        return


def attempt_log(platform: Platform, instance_id: str, attempt_no: int) -> Path | None:
    """The attempt's own log on this server, derived from its identity: the file below the
    executor's folder, or None when the identity cannot name one (never any other file)."""
    try:
        layout.parse_attempt_key(layout.attempt_key(instance_id, attempt_no))
    except ValueError:
        return None
    executor = layout.ExecutorHome(platform.home / "executor")
    return executor.attempt(instance_id, attempt_no).log


def _location(platform: Platform, instance_id: str, attempt_no: int) -> str | None:
    """The attempt's log, symlinks resolved, if it is that very file and a regular one.

    The executor's folder may link elsewhere (a tmpfs); nothing below it may: a link planted
    in an attempt directory does not make another file the attempt's log.
    """
    derived = attempt_log(platform, instance_id, attempt_no)
    if derived is None:
        return None
    own = (platform.home / "executor").resolve() / os.path.relpath(
        derived, platform.home / "executor"
    )
    resolved = derived.resolve()
    if resolved != own or not platform.holds(resolved):
        return None
    return str(resolved)


def own_log_location(platform: Platform, instance_id: str, attempt_no: int) -> str | None:
    """Where the attempt's own log is on this server, written yet or not."""
    return _location(platform, instance_id, attempt_no)


def own_log_file(platform: Platform, instance_id: str, attempt_no: int) -> str | None:
    """The attempt's own log file, when this server holds it as a regular file."""
    location = _location(platform, instance_id, attempt_no)
    return location if location is not None and Path(location).is_file() else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _read(path: Path, start: int, length: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(start)
            return handle.read(length)
    except FileNotFoundError:
        return b""  # cleaned up meanwhile


def _search(path: Path, needle: str, limit: int) -> tuple[str, bool]:
    wanted = needle.casefold()
    found: list[str] = []
    used = 0
    try:
        with path.open("rb") as handle:
            for raw in handle:
                line = raw.decode(errors="replace")
                if wanted not in line.casefold():
                    continue
                if used + len(raw) > limit:
                    return "".join(found), True
                found.append(line)
                used += len(raw)
    except FileNotFoundError:
        return "", False
    return "".join(found), False


def shipped_log(executor: str | None, instance_id: str, attempt_no: int) -> ShippedLog | None:
    """The attempt's log as its engine keeps it away from this server (a Celery worker's, in
    the result backend), or None when the engine keeps none."""
    if executor is None:
        return None
    data = engines.read_log(executor, os.environ, instance_id=instance_id, attempt_no=attempt_no)
    if data is None:
        return None
    return ShippedLog(f"{executor}:{instance_id}/{attempt_no}", data)


def _from_bytes(
    location: str,
    instance_id: str,
    attempt_no: int,
    data: bytes,
    offset: int | None,
    tail: int,
    search: str | None,
    limit: int,
    ended: bool,
) -> views.LogChunk:
    """The same answer as for a file, over a log held in memory (capped by the worker)."""
    size = len(data)
    if search:
        wanted = search.casefold()
        found: list[str] = []
        used = 0
        truncated = False
        for raw in data.splitlines(keepends=True):
            line = raw.decode(errors="replace")
            if wanted in line.casefold():
                if used + len(raw) > limit:
                    truncated = True
                    break
                found.append(line)
                used += len(raw)
        text = "".join(found)
        return views.LogChunk(
            instance_id, attempt_no, location, size, 0, size, text, truncated, ended
        )
    start = min(offset if offset is not None else max(0, size - tail), size)
    length = min(limit, size - start) if offset is not None else min(limit, tail, size - start)
    part = data[start : start + length]
    return views.LogChunk(
        instance_id,
        attempt_no,
        location,
        size,
        start,
        start + len(part),
        part.decode(errors="replace"),
        start + len(part) < size,
        ended,
    )

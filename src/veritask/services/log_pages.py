"""An attempt's log read as numbered lines, a page at a time: the log viewer's queries.

A log may be hundreds of megabytes and still growing, so nothing here reads it whole. A line
index, built once per file by counting newlines a mebibyte at a time, says how many newlines
come before each mebibyte; finding where line *n* starts then reads one mebibyte. The index is
kept (for the last few files) and extended as the log grows: logs are only appended to. A
search reads the file by chunks too and keeps the numbers of the matching lines.

Where the log is comes from :mod:`veritask.services.logs` (the attempt's identity, never a
path a report named).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import AnyStr, Final, Protocol

from veritask.services import logs
from veritask.services.platform import Platform

#: Lines on one page of the viewer.
PAGE_LINES: Final = 1000
#: The most bytes one page reads (a page of very long lines is cut there).
MAX_PAGE_BYTES: Final = 2 * 1024 * 1024
#: A longer line is shown cut (the download has all of it).
MAX_LINE_CHARS: Final = 10_000
#: How much of the log the follower's one answer reads.
FOLLOW_BYTES: Final = 256 * 1024
#: A follower further behind than this goes on from the log's tail.
MAX_BEHIND: Final = 4 * 1024 * 1024
#: The index's step: it counts the newlines before every multiple of this many bytes.
INDEX_STEP: Final = 1024 * 1024
#: The most matching lines a search keeps.
MAX_HITS: Final = 10_000
_CACHED_FILES: Final = 32
_CACHED_SEARCHES: Final = 16


class Source(Protocol):
    """Bytes that only grow: a log file on this server or a log a worker shipped."""

    @property
    def key(self) -> tuple[object, ...]: ...

    def size(self) -> int: ...

    def read(self, start: int, length: int) -> bytes: ...


@dataclass(frozen=True)
class FileSource:
    path: Path

    @property
    def key(self) -> tuple[object, ...]:
        try:
            stat = self.path.stat()
        except OSError:
            return ("file", str(self.path))
        return ("file", str(self.path), stat.st_dev, stat.st_ino)

    def size(self) -> int:
        try:
            return self.path.stat().st_size if self.path.is_file() else 0
        except OSError:
            return 0

    def read(self, start: int, length: int) -> bytes:
        try:
            with self.path.open("rb") as handle:
                handle.seek(start)
                return handle.read(length)
        except OSError:
            return b""  # cleaned up meanwhile

    def chunks(self, size: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
        """The first ``size`` bytes, a chunk at a time (a download never holds the file)."""
        try:
            with self.path.open("rb") as handle:
                left = size
                while left > 0:
                    data = handle.read(min(chunk, left))
                    if not data:
                        return
                    left -= len(data)
                    yield data
        except OSError:
            return


@dataclass(frozen=True)
class BytesSource:
    name: str
    data: bytes

    @property
    def key(self) -> tuple[object, ...]:
        return ("bytes", self.name)

    def size(self) -> int:
        return len(self.data)

    def read(self, start: int, length: int) -> bytes:
        return self.data[start : start + length]


@dataclass(frozen=True)
class LogLine:
    number: int
    text: str
    """The line without its newline, decoded (invalid bytes replaced), at most
    ``MAX_LINE_CHARS`` characters."""
    cut: bool


@dataclass(frozen=True)
class AttemptLog:
    """Where an attempt's log is, if this server holds it, and whether it may still grow."""

    instance_id: str
    attempt_no: int
    source: Source | None
    ended: bool


@dataclass(frozen=True)
class LogPage:
    """One page of numbered lines, with what the viewer needs around it."""

    instance_id: str
    attempt_no: int
    held: bool
    """This server holds the log (otherwise its engine keeps it elsewhere)."""
    ended: bool
    size: int
    total_lines: int
    first_line: int
    lines: tuple[LogLine, ...]
    cut: bool
    """The page's lines did not fit in ``MAX_PAGE_BYTES``: only the first are shown."""
    follow_offset: int
    """Where a follower reads on: the start of the last line shown (it may be incomplete)."""
    follow_line: int
    query: str
    hits: tuple[int, ...] = ()
    hits_truncated: bool = False

    @property
    def page(self) -> int:
        return (self.first_line - 1) // PAGE_LINES + 1

    @property
    def pages(self) -> int:
        return max(1, (self.total_lines + PAGE_LINES - 1) // PAGE_LINES)

    @property
    def last_line(self) -> int:
        return self.first_line + len(self.lines) - 1

    @property
    def is_last_page(self) -> bool:
        return self.page >= self.pages

    def hits_here(self) -> frozenset[int]:
        low = bisect.bisect_left(self.hits, self.first_line)
        high = bisect.bisect_right(self.hits, self.last_line)
        return frozenset(self.hits[low:high])

    def previous_hit(self) -> int | None:
        """The last matching line before this page."""
        index = bisect.bisect_left(self.hits, self.first_line)
        return self.hits[index - 1] if index else None

    def next_hit(self) -> int | None:
        """The first matching line after this page."""
        index = bisect.bisect_right(self.hits, max(self.last_line, self.first_line))
        return self.hits[index] if index < len(self.hits) else None


@dataclass(frozen=True)
class FollowedLines:
    """The lines from a byte offset on, for the follower; the last may be incomplete and is
    sent again, whole, by a later answer."""

    lines: tuple[LogLine, ...]
    next_offset: int
    next_line: int
    ended: bool
    skipped: bool = False
    """The log ran more than ``MAX_BEHIND`` bytes ahead: these lines are its tail, not what
    came right after the lines shown (the page drops those and links to the pages)."""
    more: bool = False
    """More was written than this answer read: ask again at once."""


def attempt_log(platform: Platform, instance_id: str, attempt_no: int | None) -> AttemptLog:
    """The attempt's log (default: the current attempt's); NotFound for no such attempt."""
    number, attempt = logs.attempt_of(platform, instance_id, attempt_no)
    ended = attempt.state.is_terminal
    source: Source | None = None
    shipped = logs.shipped_log(attempt.executor, instance_id, number)
    if shipped is not None:
        source = BytesSource(shipped.location, shipped.data)
    if source is None:
        location = logs.own_log_location(platform, instance_id, number)
        if location is not None:
            source = FileSource(Path(location))
    return AttemptLog(instance_id, number, source, ended)


def page(found: AttemptLog, *, line: int | None = None, query: str = "") -> LogPage:
    """The page holding ``line`` (default: the last page, where a growing log grows)."""
    query = query.strip()
    if found.source is None:
        return LogPage(
            found.instance_id, found.attempt_no, False, found.ended, 0, 0, 1, (), False, 0, 1, query
        )
    source = found.source
    size = source.size()
    index = _index_of(source)
    total = index.total_lines(source, size)
    wanted = total if line is None else min(max(line, 1), max(total, 1))
    first = (max(wanted, 1) - 1) // PAGE_LINES * PAGE_LINES + 1
    start = index.line_start(source, size, first) if total else 0
    beyond = first + PAGE_LINES
    end = index.line_start(source, size, beyond) if beyond <= total else size
    cut = end - start > MAX_PAGE_BYTES
    data = source.read(start, min(end - start, MAX_PAGE_BYTES))
    lines = _numbered(data, first)
    last_start = start + (data.rfind(b"\n", 0, len(data) - 1) + 1 if lines else 0)
    hits: tuple[int, ...] = ()
    truncated = False
    if query:
        hits, truncated = _hits_of(source, size, query)
    return LogPage(
        found.instance_id,
        found.attempt_no,
        True,
        found.ended,
        size,
        total,
        first,
        lines,
        cut,
        last_start if lines else start,
        lines[-1].number if lines else first,
        query,
        hits,
        truncated,
    )


def follow(found: AttemptLog, *, offset: int, line: int) -> FollowedLines:
    """The lines from ``offset`` (the start of line ``line``) on, at most ``FOLLOW_BYTES``."""
    if found.source is None:
        return FollowedLines((), offset, line, found.ended)
    size = found.source.size()
    offset = min(max(offset, 0), size)
    skipped = False
    if size - offset > MAX_BEHIND:
        # Far behind (a fast writer, a tab left open): go on from the tail, whole lines.
        start = size - FOLLOW_BYTES
        newline = found.source.read(start, FOLLOW_BYTES).find(b"\n")
        offset = start + newline + 1 if newline >= 0 else start
        line = _index_of(found.source).line_at(found.source, size, offset)
        skipped = True
    data = found.source.read(offset, min(FOLLOW_BYTES, size - offset))
    lines = _numbered(data, max(line, 1))
    more = offset + len(data) < size
    if not lines:
        return FollowedLines((), offset, max(line, 1), found.ended, skipped, more)
    complete = data.endswith(b"\n")
    last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
    last = lines[-1].number
    if complete or (found.ended and not more):
        # Every line read is whole (a finished attempt's last line is whole too).
        return FollowedLines(lines, offset + len(data), last + 1, found.ended, skipped, more)
    if len(data) == FOLLOW_BYTES and last_start == 0:
        # One line fills the whole read: read on after it, still in the same line (the page
        # shows the part that came last, the download has it all).
        return FollowedLines(lines, offset + len(data), last, found.ended, skipped, more)
    return FollowedLines(lines, offset + last_start, last, found.ended, skipped, more)


def _numbered(data: bytes, first: int) -> tuple[LogLine, ...]:
    if not data:
        return ()
    pieces = data.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    numbered = []
    for number, raw in enumerate(pieces, start=first):
        text = raw.decode(errors="replace").removesuffix("\r")
        cut = len(text) > MAX_LINE_CHARS
        numbered.append(LogLine(number, text[:MAX_LINE_CHARS] if cut else text, cut))
    return tuple(numbered)


# -- the line index ----------------------------------------------------------------------------


@dataclass
class _Index:
    """The newlines before each multiple of ``INDEX_STEP`` bytes (``counts[i]`` for byte
    ``i * INDEX_STEP``), over the whole steps read so far."""

    counts: list[int] = field(default_factory=lambda: [0])
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def indexed(self) -> int:
        return (len(self.counts) - 1) * INDEX_STEP

    def extend(self, source: Source, size: int) -> None:
        with self.lock:
            if size < self.indexed:  # not the same log any more: count again
                self.counts[1:] = []
            while self.indexed + INDEX_STEP <= size:
                step = source.read(self.indexed, INDEX_STEP)
                if len(step) < INDEX_STEP:
                    return
                self.counts.append(self.counts[-1] + step.count(b"\n"))

    def total_lines(self, source: Source, size: int) -> int:
        """Lines in the first ``size`` bytes; an unfinished last line counts."""
        if size == 0:
            return 0
        self.extend(source, size)
        indexed = min(self.indexed, size)
        tail = source.read(indexed, size - indexed)
        newlines = self.counts[indexed // INDEX_STEP] + tail.count(b"\n")
        ends_a_line = (tail[-1:] if tail else source.read(size - 1, 1)) == b"\n"
        return newlines + (0 if ends_a_line else 1)

    def line_at(self, source: Source, size: int, offset: int) -> int:
        """The number of the line that holds byte ``offset``."""
        self.extend(source, size)
        step = min(offset // INDEX_STEP, len(self.counts) - 1)
        begin = step * INDEX_STEP
        return self.counts[step] + source.read(begin, offset - begin).count(b"\n") + 1

    def line_start(self, source: Source, size: int, line: int) -> int:
        """The byte where ``line`` (1-based) starts: after the (line-1)th newline."""
        wanted = line - 1
        if wanted <= 0:
            return 0
        self.extend(source, size)
        step = bisect.bisect_left(self.counts, wanted) - 1
        begin = step * INDEX_STEP
        data = source.read(begin, min(INDEX_STEP, size - begin))
        position = -1
        for _ in range(wanted - self.counts[step]):
            position = data.find(b"\n", position + 1)
            if position < 0:
                return size
        return begin + position + 1


_indexes: OrderedDict[tuple[object, ...], _Index] = OrderedDict()
_searches: OrderedDict[tuple[object, ...], tuple[tuple[int, ...], bool]] = OrderedDict()
_guard = threading.Lock()


def _index_of(source: Source) -> _Index:
    with _guard:
        found = _indexes.get(source.key)
        if found is None:
            found = _indexes[source.key] = _Index()
        _indexes.move_to_end(source.key)
        while len(_indexes) > _CACHED_FILES:
            _indexes.popitem(last=False)
        return found


# -- search ------------------------------------------------------------------------------------


def _hits_of(source: Source, size: int, query: str) -> tuple[tuple[int, ...], bool]:
    key = (*source.key, size, query)
    with _guard:
        cached = _searches.get(key)
    if cached is not None:
        return cached
    found = search(source, size, query)
    with _guard:
        _searches[key] = found
        while len(_searches) > _CACHED_SEARCHES:
            _searches.popitem(last=False)
    return found


def search(source: Source, size: int, query: str) -> tuple[tuple[int, ...], bool]:
    """The numbers of the lines that contain ``query`` (case-insensitive), at most
    ``MAX_HITS``, and whether there were more. Read a chunk of whole lines at a time."""
    ascii_only = query.isascii()
    needle_bytes = query.lower().encode()
    needle_text = query.casefold()
    hits: list[int] = []
    line = 1  # the number of the line at ``carry``'s start
    position = 0
    carry = b""
    while position < size:
        data = carry + source.read(position, min(INDEX_STEP, size - position))
        read = len(data) - len(carry)
        if read <= 0:
            break
        position += read
        cut = data.rfind(b"\n") + 1 if position < size else len(data)
        if cut == 0 and len(data) < MAX_PAGE_BYTES:
            carry = data  # no whole line yet: read on
            continue
        if cut == 0:
            cut = len(data)  # an endless line: search what there is
        chunk, carry = data[:cut], data[cut:]
        more = _hits_in(chunk, line, needle_bytes if ascii_only else None, needle_text, hits)
        if more:
            return tuple(hits), True
        line += chunk.count(b"\n")
    return tuple(hits), False


def _hits_in(
    chunk: bytes, line: int, needle_bytes: bytes | None, needle_text: str, hits: list[int]
) -> bool:
    """Add the matching lines of ``chunk`` (whole lines from ``line`` on); True when
    ``MAX_HITS`` is passed. An ASCII needle is looked for in the bytes (fast); another in the
    decoded, case-folded text."""
    if needle_bytes is not None:
        return _scan(chunk.lower(), needle_bytes, b"\n", line, hits)
    return _scan(chunk.decode(errors="replace").casefold(), needle_text, "\n", line, hits)


def _scan(haystack: AnyStr, needle: AnyStr, newline: AnyStr, line: int, hits: list[int]) -> bool:
    counted = 0
    at = 0
    while True:
        found = haystack.find(needle, at)
        if found < 0:
            return False
        line += haystack.count(newline, counted, found)
        if len(hits) >= MAX_HITS:
            return True
        hits.append(line)
        end = haystack.find(newline, found)
        if end < 0:
            return False
        at = end + 1
        line += 1
        counted = at

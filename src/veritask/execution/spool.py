"""The spool: a write-ahead journal of one attempt's events, in its attempt directory.

Every event is written here (atomically) before any transport sees it, under its sequence
number: ``event.00000007.json``. Once delivered it is renamed ``.sent`` (or ``.rejected`` when
the platform refused it for good). So:

- the platform being unreachable changes nothing but the time of delivery: undelivered events
  wait in the journal and go out in ``seq`` order with their original ids;
- a worker that restarts on the same directory finds what it has not delivered yet, and
  continues numbering after the highest ``seq`` it finds, so no number is used twice.

The journal survives the worker's death, not the machine's: it is not fsync-ed, to keep an
attempt cheap. What must survive a power cut, the completion, is fsync-ed: its file is also the
exit record (``exit.json`` is a second name of it, which a rename to ``.sent`` leaves alone),
and a restarted worker re-spools it from there if the journal lost its name.

One worker owns the directory at a time (the attempt's worker lock); within it, one thread
appends and one delivers.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from veritask.execution import layout, wire

_PREFIX = "event."
_PENDING = ".json"


class Disposition(StrEnum):
    """What became of a spooled event."""

    SENT = "sent"
    """The platform acknowledged it (any 2xx, whatever its outcome)."""
    REJECTED = "rejected"
    """The platform refused it for good (4xx); it is not sent again."""


@dataclass(frozen=True)
class SpooledEvent:
    path: Path
    event: wire.WorkerEvent

    @property
    def seq(self) -> int:
        return self.event["seq"]


def _seq_of(name: str) -> int | None:
    if not name.startswith(_PREFIX):
        return None
    number, dot, _ = name.removeprefix(_PREFIX).partition(".")
    return int(number) if dot and number.isdigit() else None


class Spool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        seqs = [seq for name in os.listdir(directory) if (seq := _seq_of(name)) is not None]
        self._last_seq = max(seqs, default=0)

    def next_seq(self) -> int:
        """Reserve the next sequence number; the caller appends an event with it."""
        with self._lock:
            self._last_seq += 1
            return self._last_seq

    def append(
        self, event: wire.WorkerEvent, *, durable: bool = False, also: Path | None = None
    ) -> SpooledEvent:
        """Journal ``event``; ``also`` names the same file as a record of the attempt (the
        task record, the exit record), in place before the event is in the journal."""
        path = self._path(event["seq"], _PENDING)
        layout.write_atomically(path, wire.encode(event), durable=durable, also=also)
        with self._lock:
            self._last_seq = max(self._last_seq, event["seq"])
        return SpooledEvent(path, event)

    def holds(self, seq: int) -> bool:
        """Whether an event with this number was ever spooled (delivered or not)."""
        prefix = f"{_PREFIX}{seq:08d}."
        return any(name.startswith(prefix) for name in os.listdir(self.directory))

    def undelivered(self) -> list[SpooledEvent]:
        """The events still to deliver, in ``seq`` order."""
        names = sorted(
            name
            for name in os.listdir(self.directory)
            if name.startswith(_PREFIX) and name.endswith(_PENDING)
        )
        found = []
        for name in names:
            path = self.directory / name
            found.append(SpooledEvent(path, wire.decode(path.read_bytes())))
        return found

    def settle(self, spooled: SpooledEvent, disposition: Disposition) -> None:
        os.replace(spooled.path, self._path(spooled.seq, f".{disposition}"))

    def _path(self, seq: int, suffix: str) -> Path:
        return self.directory / f"{_PREFIX}{seq:08d}{suffix}"

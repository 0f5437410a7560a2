"""Several schedulers on one PostgreSQL database divide the runs (docs/scheduling.md, section 6).

The unit of sharing is the run: its advances, the monitor's and the reconciler's decisions on
its instances, and the stops sent for them. Who shares is read from the ``schedulers`` table
(the live rows: a heartbeat fresher than ``STALE_AFTER``); each run belongs to the live
scheduler that wins rendezvous (highest random weight) hashing of (scheduler id, run id), a
stable hash (BLAKE2b), so every scheduler that sees the same members computes the same owner,
and when one leaves or joins only the runs it held or takes move.

Ownership only divides work: it guards nothing. Every decision is still compare-and-set on
the version it was made on, so while two schedulers see different members (one joined, or one
died and its heartbeat is not stale yet) a run decided by two of them, or by none for a while,
costs time, never correctness.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from datetime import datetime

from veritask.ledger import dialects, scheduler_lease
from veritask.ledger.ledger import Ledger
from veritask.scheduling.lease import STALE_AFTER

log = logging.getLogger(__name__)

#: How often a scheduler reads who is alive; a run it newly owns is read at the next tick.
READ_EVERY_SECONDS = 2.0
#: Bound of the memo of owned runs (cleared when full).
_MEMO_LIMIT = 100_000


def weight(member: str, run_id: str) -> int:
    """The rendezvous weight of ``member`` for ``run_id``: the highest weight owns the run."""
    digest = hashlib.blake2b(member.encode() + b"\0" + run_id.encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big")


def owner(run_id: str, members: Iterable[str]) -> str:
    """The member that owns ``run_id`` (ties, which a 64-bit hash makes unlikely, by id)."""
    return max(members, key=lambda member: (weight(member, run_id), member))


class Share:
    """This scheduler's part of the runs, for one view of the live members."""

    def __init__(self, me: str, members: Iterable[str] = ()) -> None:
        self.me = me
        self.members: tuple[str, ...] = tuple(sorted({*members, me}))
        #: One member: every run is this scheduler's, and nothing is hashed.
        self.solo = len(self.members) == 1
        self._prefixes = [
            (member, hashlib.blake2b(member.encode() + b"\0", digest_size=8))
            for member in self.members
        ]
        self._memo: dict[str, bool] = {}

    def owns(self, run_id: str) -> bool:
        """Whether this scheduler moves the run ``run_id``."""
        if self.solo:
            return True
        owned = self._memo.get(run_id)
        if owned is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            owned = self._memo[run_id] = self.owner(run_id) == self.me
        return owned

    def owner(self, run_id: str) -> str:
        """The member that owns ``run_id``: the same answer as :func:`owner`, faster."""
        data = run_id.encode()
        best, best_key = self.me, (-1, "")
        for member, prefix in self._prefixes:
            hashed = prefix.copy()
            hashed.update(data)
            key = (int.from_bytes(hashed.digest(), "big"), member)
            if key > best_key:
                best, best_key = member, key
        return best

    def describe(self) -> str:
        return ", ".join(f"{m} (this one)" if m == self.me else m for m in self.members)


class Membership:
    """Who shares the work with the scheduler ``me``: the live rows of ``schedulers``.

    Read at most every ``READ_EVERY_SECONDS``; only where several schedulers may run (not on
    SQLite, which allows one, so the loop there never reads it).
    """

    def __init__(self, ledger: Ledger, me: str, *, read_every: float = READ_EVERY_SECONDS) -> None:
        self.ledger = ledger
        self.me = me
        self.read_every = read_every
        self._read_at = float("-inf")

    def due(self) -> bool:
        return time.monotonic() - self._read_at >= self.read_every

    def read(self, now: datetime) -> Share:
        """This scheduler's share among the schedulers alive at ``now`` (itself always counts)."""
        self._read_at = time.monotonic()
        with dialects.read_transaction(self.ledger.engine) as connection:
            live = scheduler_lease.live_scheduler_ids(connection, now - STALE_AFTER)
        return Share(self.me, live)


def membership_for(ledger: Ledger, scheduler_id: str) -> Membership | None:
    """The membership of a scheduler on this ledger; None on SQLite (one scheduler only)."""
    if ledger.engine.url.get_backend_name() == "sqlite":
        return None
    return Membership(ledger, scheduler_id)

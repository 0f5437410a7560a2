"""Ids that sort by creation time: UUID version 7 (RFC 9562), in canonical text form.

Event ids and row ids are keys of unique B-tree indexes that grow by millions of rows. A
random id (version 4) lands on a random leaf page, so once the index outgrows the database's
cache nearly every insert reads a page from disk; an id that starts with the time lands on the
newest pages, which stay cached however large the table is. The 74 random bits keep ids
unguessable and unique across processes and hosts without coordination.

This module sits outside the layers so that the worker, the ledger and the scheduler share it.
"""

from __future__ import annotations

import secrets
import time
import uuid

_VERSION = 7
_VARIANT = 0b10


def time_ordered_id(unix_ms: int | None = None) -> str:
    """A new UUIDv7: 48 bits of Unix time in milliseconds, version, 74 random bits, variant."""
    millis = time.time_ns() // 1_000_000 if unix_ms is None else unix_ms
    if not 0 <= millis < 1 << 48:
        raise ValueError(f"unix_ms must fit in 48 bits, got {millis}")
    random_bits = secrets.randbits(74)
    rand_a = random_bits >> 62  # 12 bits
    rand_b = random_bits & ((1 << 62) - 1)
    value = (millis << 80) | (_VERSION << 76) | (rand_a << 64) | (_VARIANT << 62) | rand_b
    return str(uuid.UUID(int=value))


#: How many characters of an id its short form keeps.
SHORT_LENGTH = 8


def short(made: str) -> str:
    """The short form people read in lists: the id's LAST characters.

    An id starts with its millisecond, so ids made within a minute share their first eight
    characters; the last ones are random bits, which tell two ids apart however close in time.
    A search for part of an id (the runs list, ``veritask runs -q``) finds it by this form.
    """
    return made[-SHORT_LENGTH:]

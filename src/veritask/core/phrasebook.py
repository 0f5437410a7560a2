"""Every phrase the platform writes, in one book that recognises their sentences.

The reasons it records (:mod:`.reasons`), the messages of the alerts it raises
(:mod:`.alert_messages`), the problems a definition is refused with (:mod:`.problems`) and the
services' refusals (:mod:`.refusals`). The web UI asks
:func:`match` which phrase wrote a stored sentence, then shows that key's catalog entry.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType

from veritask.core import alert_messages, problems, reasons, refusals
from veritask.core.phrases import Phrase, Phrasebook, Slot

MODULES: tuple[ModuleType, ...] = (reasons, alert_messages, problems, refusals)


def _phrases_of(module: ModuleType) -> list[Phrase]:
    """The module's phrases, alone or in tuples (one per cron field, say)."""
    found: list[Phrase] = []
    for value in vars(module).values():
        if isinstance(value, Phrase):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend(item for item in value if isinstance(item, Phrase))
    return found


BOOK = Phrasebook(phrase for module in MODULES for phrase in _phrases_of(module))

#: How several sentences are joined into one (the run's "active: a; ready: b", a list of
#: "task state"), widest first.
SEPARATORS = ("; ", ", ")


@dataclass(frozen=True)
class Plain:
    """Text no phrase wrote: a person's words, an engine's error, a list of names."""

    text: str

    @property
    def unread(self) -> int:
        return len(self.text)


@dataclass(frozen=True)
class Said:
    """A phrase's sentence: its fields' recorded text, and the reading of each nested one."""

    text: str
    phrase: Phrase
    fields: tuple[tuple[str, str], ...]
    nested: tuple[tuple[str, Reading], ...]
    unread: int


@dataclass(frozen=True)
class Joined:
    """Sentences joined into one with ``separator``, each written by a phrase."""

    text: str
    separator: str
    parts: tuple[Reading, ...]
    unread: int


Reading = Plain | Said | Joined


def match(text: str) -> tuple[Phrase, dict[str, str]] | None:
    """The phrase that wrote ``text`` and the recorded text of its fields, or None.

    When several templates fit, the one whose nested sentences are best recognised wins,
    then the most specific.
    """
    said = [reading for reading in _readings(text) if isinstance(reading, Said)]
    if not said:
        return None
    best = min(said, key=lambda reading: reading.unread)
    return best.phrase, dict(best.fields)


def read(text: str) -> Reading:
    """How ``text`` is best read: the reading that leaves the least text unrecognised (a
    phrase's free field can swallow clauses that were joined to it, so both are tried)."""
    return min(_readings(text), key=lambda reading: reading.unread, default=Plain(text))


@functools.lru_cache(maxsize=8192)
def _readings(text: str) -> tuple[Reading, ...]:
    found: list[Reading] = []
    for phrase, fields in BOOK.fits(text):
        nested = tuple(
            (name, read(value))
            for name, value in fields.items()
            if phrase.slots[name] is Slot.SENTENCE
        )
        # Fields kept as recorded count as unread too: the reading that explains the most of
        # the text by templates wins ("… (cycle a -> b -> a) (blocking: a, b)" is a blocking
        # note around a deadlock, not a cycle that ends in "(blocking: a, b").
        unread = sum(reading.unread for _, reading in nested) + sum(
            len(value) for name, value in fields.items() if phrase.slots[name] is not Slot.SENTENCE
        )
        found.append(Said(text, phrase, tuple(fields.items()), nested, unread))
    for separator in SEPARATORS:
        parts = text.split(separator)
        if len(parts) < 2:
            continue
        readings = tuple(read(part) for part in parts)
        if not any(isinstance(reading, Plain) for reading in readings):
            unread = sum(reading.unread for reading in readings)
            found.append(Joined(text, separator, readings, unread))
    return tuple(found)

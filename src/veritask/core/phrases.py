"""Sentences the platform records or refuses with, each defined once as a template.

A :class:`Phrase` has a stable ``key`` and an English template with named ``{fields}``. The
code that writes a reason, a validator message or a refusal calls :meth:`Phrase.format`, so
the stored English is exactly what an f-string wrote before; the API, the CLI and the audit
show it as stored. A reader in another language gets it back through :meth:`Phrasebook.match`:
the template compiled to a pattern recognises the sentence and gives back its fields, and the
web UI renders the key's catalog entry with them. Each field has a :class:`Slot` saying what it
holds, so that the UI knows which fields are platform words to translate too (states, event
kinds, durations, nested sentences) and which are names and numbers to keep.

Pure: no I/O; the phrase modules (:mod:`veritask.core.reasons` and the others gathered by
:mod:`veritask.core.phrasebook`) are data.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Final

from veritask.core.states import (
    AttemptState,
    DefinitionLifecycle,
    InstanceState,
    PublicationState,
    RunExecutionState,
)


class Slot(StrEnum):
    """What a phrase's field holds, and so how a reader in another language sees it."""

    TEXT = "text"
    """Names, ids, times, a person's words, an engine's words: shown as recorded."""
    SENTENCE = "sentence"
    """A sentence of its own (often another phrase): recognised and translated in turn."""
    NUMBER = "number"
    """A number: shown as recorded."""
    STATE = "state"
    """A state name (any case): shown in the reader's words."""
    STATES = "states"
    """State names separated by ``, ``: each in the reader's words."""
    EVENT_KIND = "event_kind"
    """An event kind such as ``lease_expired``."""
    OPEN_REASON = "open_reason"
    """Why an attempt was opened (``first``, ``retry``, …)."""
    LIFECYCLE = "lifecycle"
    """A definition's lifecycle (``ACTIVE``, ``DISABLED``, …)."""
    ACTOR = "actor"
    """Who did it, ``kind:name`` (``operator:alice``): the kind in the reader's words."""
    TIME = "time"
    """A moment as ``datetime.isoformat`` writes it: shown in the reader's time zone."""
    DURATION = "duration"
    """A ``timedelta`` as Python prints it (``0:10:00``, ``1 day, 2:00:00``)."""
    CODE = "code"
    """A word of the definition language (``all_success``): code, kept."""
    FIELD = "field"
    """A field path of a definition or a request (``tasks.load.after[0]``): code, kept."""


def _names(*enums: Iterable[StrEnum]) -> str:
    words = sorted({member.value for enum in enums for member in enum}, key=lambda w: -len(w))
    return "|".join(re.escape(word) for word in words)


_STATE_WORDS = _names(InstanceState, AttemptState, RunExecutionState, PublicationState)

#: The pattern of each slot's text; free text is as short as the rest of the template allows.
_PATTERNS: Final[Mapping[Slot, str]] = {
    Slot.TEXT: r".+?",
    Slot.SENTENCE: r".+?",
    Slot.NUMBER: r"-?\d+(?:\.\d+)?",
    Slot.STATE: rf"(?i:{_STATE_WORDS})",
    Slot.STATES: rf"(?i:(?:{_STATE_WORDS})(?:, (?:{_STATE_WORDS}))*)",
    Slot.EVENT_KIND: r"[a-z_]+",
    Slot.OPEN_REASON: r"[a-z_]+",
    Slot.LIFECYCLE: rf"(?:{_names(DefinitionLifecycle)})",
    Slot.ACTOR: r"\S+",
    Slot.TIME: r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?",
    Slot.DURATION: r"(?:-?\d+ days?, )?\d+:\d\d:\d\d(?:\.\d+)?",
    Slot.CODE: r"[a-z]+(?:_[a-z]+)*",
    Slot.FIELD: r"[A-Za-z_][\w.\[\]/-]*",
}
#: A field written ``{name!r}`` holds a Python repr: a quoted string, a number, True, None.
_REPR = r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[-+\w.]+)"


class Phrase:
    """One sentence: a stable key, an English template and what each field holds.

    ``Phrase("reason.fenced", "fenced: {why}", why=Slot.SENTENCE)``; fields not named are
    :attr:`Slot.TEXT`. A field may carry a conversion or a format spec (``{name!r}``,
    ``{seconds:g}``) that :meth:`format` applies as an f-string would; catalogs write it
    plainly (``{name}``) and get the recorded text of the field.
    """

    __slots__ = ("_pattern", "key", "literal", "slots", "template")

    def __init__(self, key: str, template: str, /, **slots: Slot) -> None:
        self.key = key
        self.template = template
        parts = list(string.Formatter().parse(template))
        names = [name for _, name, _, _ in parts if name is not None]
        if any(not name.isidentifier() for name in names) or len(set(names)) != len(names):
            raise ValueError(f"phrase {key}: fields must be distinct names, got {names}")
        unknown = set(slots) - set(names)
        if unknown:
            raise ValueError(f"phrase {key}: no field {sorted(unknown)} in {template!r}")
        self.slots: Mapping[str, Slot] = {name: slots.get(name, Slot.TEXT) for name in names}
        self.literal = "".join(literal for literal, _, _, _ in parts)
        pattern = []
        for literal, name, _, conversion in parts:
            pattern.append(re.escape(literal))
            if name is not None:
                body = _REPR if conversion == "r" else _PATTERNS[self.slots[name]]
                pattern.append(f"(?P<{name}>{body})")
        self._pattern = re.compile("".join(pattern), re.DOTALL)

    @property
    def fields(self) -> frozenset[str]:
        """The names of the template's fields."""
        return frozenset(self.slots)

    def format(self, **values: object) -> str:
        """The English sentence, exactly as an f-string of the template would write it."""
        if set(values) != self.fields:
            raise TypeError(f"phrase {self.key} takes {sorted(self.fields)}, got {sorted(values)}")
        return self.template.format(**values)

    def fullmatch(self, text: str) -> dict[str, str] | None:
        """The fields of ``text`` if it is this sentence, else None."""
        found = self._pattern.fullmatch(text)
        return None if found is None else found.groupdict()

    def __repr__(self) -> str:
        return f"Phrase({self.key!r}, {self.template!r})"


class Phrasebook:
    """A set of phrases, each key once, most specific template first."""

    def __init__(self, phrases: Iterable[Phrase]) -> None:
        found = list(phrases)
        keys = [phrase.key for phrase in found]
        if len(set(keys)) != len(keys):
            raise ValueError("two phrases share a key")
        # The template with the most fixed text first: ``attempt {n}: {reason}; no retries
        # left`` before ``attempt {n}: {reason}``, which would also match.
        self.phrases: tuple[Phrase, ...] = tuple(
            sorted(found, key=lambda p: (-len(p.literal), p.key))
        )
        self.by_key: Mapping[str, Phrase] = {phrase.key: phrase for phrase in self.phrases}

    def fits(self, text: str) -> list[tuple[Phrase, dict[str, str]]]:
        """Each phrase whose template fits ``text`` with its fields, most specific first."""
        found = []
        for phrase in self.phrases:
            fields = phrase.fullmatch(text)
            if fields is not None:
                found.append((phrase, fields))
        return found

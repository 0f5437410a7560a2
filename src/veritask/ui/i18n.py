"""Every string a page shows, in English and Simplified Chinese: one JSON catalog per language.

Templates and page code call ``t(key, **values)``; a key missing from a catalog is a bug that
the catalog test finds (both catalogs have the same keys, every key used exists), and at run
time it shows as the key itself rather than failing the page.

A count in a sentence (the value named ``n``, ``count`` or ``intervals``) that is 1 takes the
key's ``.one`` form where the language has one: English says "1 interval", "This instance";
Chinese has no plural forms, so its catalog has no ``.one`` keys.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Final

from markupsafe import Markup, escape


class Language(StrEnum):
    """A language the UI speaks; the value is the catalog's file name and the HTML lang."""

    EN = "en"
    """English."""
    ZH = "zh"
    """Simplified Chinese (简体中文)."""


DEFAULT_LANGUAGE: Final = Language.EN
#: The suffix of a key's form for a count of one.
ONE: Final = ".one"
#: The values that count what a sentence is about, in the order they are looked at.
COUNTS: Final = ("n", "count", "intervals")
LANGUAGE_NAMES: Final = {Language.EN: "English", Language.ZH: "简体中文"}


@functools.cache
def catalog(language: Language) -> Mapping[str, str]:
    """The catalog of ``language``: message key → text with ``{name}`` placeholders."""
    text = resources.files("veritask.ui").joinpath("catalogs", f"{language.value}.json")
    loaded = json.loads(text.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise TypeError(f"catalog {language} is not an object")
    return {str(key): str(value) for key, value in loaded.items()}


@dataclass(frozen=True)
class Translator:
    """``t(key, **values)`` in one language."""

    language: Language

    def __call__(self, key: str, /, **values: object) -> str:
        texts = catalog(self.language)
        if _is_one(values) and key + ONE in texts:
            key += ONE
        text = texts.get(key, key)
        if any(isinstance(value, Markup) for value in values.values()):
            # A value a helper wrote as HTML (a ``<time>``) stays HTML: the sentence is
            # escaped, then filled in with the markup as it is and any other value escaped.
            return escape(text).format(**values)
        return text.format(**values) if values else text

    def has(self, key: str) -> bool:
        return key in catalog(self.language)


def _is_one(values: Mapping[str, object]) -> bool:
    counted = next((values[name] for name in COUNTS if name in values), None)
    return isinstance(counted, int) and not isinstance(counted, bool) and counted == 1


def pick_language(cookie: str | None, accept_language: str | None) -> Language:
    """The language chosen by cookie, else the first the browser prefers that we speak."""
    if cookie is not None and cookie in {language.value for language in Language}:
        return Language(cookie)
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()
        if tag.startswith("zh"):
            return Language.ZH
        if tag.startswith("en"):
            return Language.EN
    return DEFAULT_LANGUAGE

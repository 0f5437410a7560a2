"""Labels fitted to their box on the server, by an estimate of how wide they draw.

The page never measures text: it is drawn on the server, and a box that grows with its label
would move every box after it. So each character is given an advance (a fraction of the font
size) no smaller than its glyph's in DejaVu Sans Bold, the widest of the common sans-serif
faces and the one Chromium picks on Linux; the faces of other systems (Segoe UI, San
Francisco, Noto Sans) are narrower, so a label that fits by this estimate fits when drawn in
any of them. A label too wide loses its middle to an ellipsis: task keys that differ differ
at their end as often as at their start (``load_orders_2024``, ``load_orders_2025``,
``load[17]``), so both ends stay. The full label goes in the box's tooltip and its name.
"""

from __future__ import annotations

import unicodedata
from typing import Final

ELLIPSIS: Final = "…"

#: Advances in em, each an upper bound of its characters' advances in DejaVu Sans Bold.
_ADVANCE_CLASSES: Final = (
    (0.46, " 'ijlIJ/\\|,.:;f-!()[]"),
    (0.53, 'tr_`"*'),
    (0.72, "abcdeghknopqsuvxyz0123456789?$S{}EFLT"),
    (0.88, "ABCDGHKNOPQRUVXYZ#+<=>^~&×"),
    (1.11, "mwMW@%"),
)
_ADVANCES: Final = {char: em for em, chars in _ADVANCE_CLASSES for char in chars}
#: Any other character: a CJK ideograph, a full-width form or the ellipsis takes a whole em;
#: nothing else common is wider.
_OTHER: Final = 1.0


def advance(char: str) -> float:
    """How wide ``char`` draws, at most, in em."""
    known = _ADVANCES.get(char)
    if known is not None:
        return known
    if unicodedata.combining(char):
        return 0.0
    return _OTHER if unicodedata.east_asian_width(char) in "WF" or not char.isascii() else 0.88


def width(text: str, *, size: float) -> float:
    """How wide ``text`` draws, at most, in pixels, at a font size of ``size`` pixels."""
    return size * sum(advance(char) for char in text)


def fit(text: str, room: float, *, size: float) -> str:
    """``text`` if it fits in ``room`` pixels at font size ``size``; else its start and its
    end around an ellipsis, as much of both as fits (about two parts start to one part end).
    """
    if width(text, size=size) <= room:
        return text
    budget = room / size - advance(ELLIPSIS)
    if budget <= 0:
        return ""
    tail_budget = budget / 3
    tail_length, used = 0, 0.0
    for char in reversed(text):
        if used + advance(char) > tail_budget:
            break
        used += advance(char)
        tail_length += 1
    head_length, head_used = 0, 0.0
    for char in text[: len(text) - tail_length]:
        if head_used + advance(char) > budget - used:
            break
        head_used += advance(char)
        head_length += 1
    head, tail = text[:head_length], text[len(text) - tail_length :]
    return f"{head.rstrip()}{ELLIPSIS}{tail.lstrip()}"

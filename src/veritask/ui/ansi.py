"""A log line's ANSI colours as classed segments: text plus the classes our stylesheet draws.

Logs are untrusted: nothing from a line becomes markup. SGR colour codes (``ESC[…m``) turn
into class names from a fixed set (``a-f1`` foreground 1, ``a-b4`` background 4, ``a-bold``…);
the text stays text, escaped by the template or set with ``textContent`` by the script. Every
other escape sequence (cursor moves, clearing, titles) is dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final

#: SGR, the other CSI sequences, OSC (window titles, links) and two-byte escapes.
_ESCAPE: Final = re.compile(
    r"\x1b\[([0-9;:]*)m"
    r"|\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]?"
)
#: Control characters a terminal would not print (tab stays).
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Style:
    """What the SGR codes so far have set: colours 0-15 and three attributes."""

    fg: int | None = None
    bg: int | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False

    def classes(self) -> str:
        names = []
        if self.fg is not None:
            names.append(f"a-f{self.fg}")
        if self.bg is not None:
            names.append(f"a-b{self.bg}")
        for flag, name in (
            (self.bold, "a-bold"),
            (self.dim, "a-dim"),
            (self.italic, "a-it"),
            (self.underline, "a-ul"),
        ):
            if flag:
                names.append(name)
        return " ".join(names)


PLAIN: Final = Style()
#: A segment: the classes (empty for plain text) and the text.
Segment = tuple[str, str]


def segments(line: str, style: Style = PLAIN) -> tuple[list[Segment], Style]:
    """The line cut where its style changes, and the style in force at its end (terminals
    carry it to the next line)."""
    found: list[Segment] = []
    position = 0
    for match in _ESCAPE.finditer(line):
        _append(found, style, line[position : match.start()])
        if match.group(1) is not None:
            style = apply_sgr(style, match.group(1))
        position = match.end()
    _append(found, style, line[position:])
    return found, style


def plain(line: str) -> str:
    """The line's text without any escape sequence (what a search reads)."""
    return _CONTROL.sub("", _ESCAPE.sub("", line))


def apply_sgr(style: Style, codes: str) -> Style:
    """``style`` after the SGR parameters ``codes`` (``"1;31"``); unknown codes are ignored."""
    numbers = [int(part) if part.isdigit() else 0 for part in re.split("[;:]", codes)]
    index = 0
    while index < len(numbers):
        code = numbers[index]
        index += 1
        if code == 0:
            style = PLAIN
        elif code == 1:
            style = replace(style, bold=True)
        elif code == 2:
            style = replace(style, dim=True)
        elif code == 3:
            style = replace(style, italic=True)
        elif code == 4:
            style = replace(style, underline=True)
        elif code == 22:
            style = replace(style, bold=False, dim=False)
        elif code == 23:
            style = replace(style, italic=False)
        elif code == 24:
            style = replace(style, underline=False)
        elif 30 <= code <= 37:
            style = replace(style, fg=code - 30)
        elif 90 <= code <= 97:
            style = replace(style, fg=code - 90 + 8)
        elif code == 39:
            style = replace(style, fg=None)
        elif 40 <= code <= 47:
            style = replace(style, bg=code - 40)
        elif 100 <= code <= 107:
            style = replace(style, bg=code - 100 + 8)
        elif code == 49:
            style = replace(style, bg=None)
        elif code in (38, 48):
            colour, index = _extended(numbers, index)
            style = replace(style, fg=colour) if code == 38 else replace(style, bg=colour)
    return style


def _extended(numbers: list[int], index: int) -> tuple[int | None, int]:
    """A 256-colour (``5;n``) or true-colour (``2;r;g;b``) argument: its nearest of the 16
    colours our palette draws for the first 16, none otherwise; and where the codes go on."""
    if index < len(numbers) and numbers[index] == 5:
        value = numbers[index + 1] if index + 1 < len(numbers) else 0
        return (value if value < 16 else None), index + 2
    if index < len(numbers) and numbers[index] == 2:
        return None, index + 4
    return None, index


def _append(found: list[Segment], style: Style, text: str) -> None:
    text = _CONTROL.sub("", text)
    if not text:
        return
    classes = style.classes()
    if found and found[-1][0] == classes:
        found[-1] = (classes, found[-1][1] + text)
    else:
        found.append((classes, text))

"""The state and status icons: small SVG drawings shipped with the pages.

A state is a colour, an icon and a translated word. The icon is drawn, not typed: a character
such as ⌛ depends on the fonts of the viewer's machine and shows as an empty box where none
has it. Each icon is path data on a 16×16 grid, stroked in the text's colour (``currentColor``)
so that it takes the badge's tone; ``solid`` paths are filled as well. The markup is inline
SVG, so it needs no request and passes the pages' content security policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from markupsafe import Markup


@dataclass(frozen=True)
class Icon:
    """Path data on a 16×16 grid: ``outline`` is stroked, ``solid`` is stroked and filled."""

    outline: str = ""
    solid: str = ""


_CIRCLE = "M8 2.5a5.5 5.5 0 1 0 0 11a5.5 5.5 0 1 0 0-11"
CHECK: Final = Icon("M3 8.5l3.2 3.2L13 4.5")
CROSS: Final = Icon("M4 4l8 8M12 4l-8 8")
HOURGLASS: Final = Icon("M4 2h8M4 14h8M5 2.5L11 13.5M11 2.5L5 13.5M5.5 13.5h5L8 9.5z")
BLOCKED: Final = Icon(f"{_CIRCLE}M4.2 11.8l7.6-7.6")
STOPPED: Final = Icon(solid="M4 4h8v8H4z")
STOPPING: Final = Icon("M4 4h8v8H4z", solid="M4 4h4v8H4z")
WARNING: Final = Icon("M8 2L14.5 13.5h-13zM8 6.5v3.5M8 12v.2")
PLAYING: Final = Icon(solid="M5 3l8 5-8 5z")
UNKNOWN: Final = Icon("M5.5 6a2.5 2.5 0 1 1 3.6 2.2c-.7.4-1.1.9-1.1 1.6v.7M8 13v.2")
WAITING: Final = Icon("M3 8h.2M8 8h.2M13 8h.2")
NOT_STARTED: Final = Icon(_CIRCLE)
AGAIN: Final = Icon("M13 8a5 5 0 1 1-1.6-3.7M13 2.5v3h-3")
PASSED_OVER: Final = Icon("M3 11a5 5 0 0 1 9.5-2.5M13 5v4h-4")
NOTHING: Final = Icon("M4 8h8")
NEVER_ARRIVED: Final = Icon(f"{_CIRCLE}M12.5 2.5L3.5 13.5")
CLOSED_OFF: Final = Icon(f"{_CIRCLE}M5.8 5.8l4.4 4.4M10.2 5.8l-4.4 4.4")
DOT: Final = Icon("M8 8h.2")
ATTENTION: Final = Icon("M8 3v6M8 12.5v.2")
HALF: Final = Icon(_CIRCLE, solid="M8 2.5a5.5 5.5 0 0 1 0 11z")

#: One icon per state, beside the colour (for colour-blind readers) and the word.
STATE_ICONS: Final = {
    "SUCCESS": CHECK,
    "PUBLISHED": CHECK,
    "NOT_REQUIRED": NOTHING,
    "FAILED": CROSS,
    "START_FAILED": CROSS,
    "UPSTREAM_FAILED": BLOCKED,
    "CHECK_FAILED": CROSS,
    "PUBLISH_FAILED": CROSS,
    "TIMEOUT": HOURGLASS,
    "CANCELLED": STOPPED,
    "CANCELLING": STOPPING,
    "CANCEL_FAILED": WARNING,
    "RUNNING": PLAYING,
    "CHECKING": PLAYING,
    "PUBLISHING": PLAYING,
    "LOST": UNKNOWN,
    "QUEUED": WAITING,
    "SCHEDULED": WAITING,
    "CREATED": NOT_STARTED,
    "PENDING": NOT_STARTED,
    "UP_FOR_RETRY": AGAIN,
    "SKIPPED": PASSED_OVER,
    "REMOVED": NOTHING,
    "NOT_RECEIVED": NEVER_ARRIVED,
    "ABANDONED": CLOSED_OFF,
}

#: An alert's status.
ALERT_ICONS: Final = {"open": ATTENTION, "acknowledged": HALF, "resolved": CHECK}

_STROKE = (
    'fill="none" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" '
    'stroke-linejoin="round"'
)


def drawing(
    icon: Icon, *, at: tuple[float, float] | None = None, size: float = 12, ink: str = ""
) -> Markup:
    """The icon as inline SVG: sized to the text (``1em``) in HTML, or placed ``at`` (x, y)
    with ``size`` inside another SVG drawing, drawn in the tone ``ink`` where given (else in
    the text's colour). Decorative: the word beside it says the state."""
    classes = f"icon ink-{ink}" if ink else "icon"
    where = (
        f'class="{classes}" width="1em" height="1em"'
        if at is None
        else f'class="{classes}" x="{at[0]:g}" y="{at[1]:g}" width="{size:g}" height="{size:g}"'
    )
    paths = []
    if icon.outline:
        paths.append(f'<path d="{icon.outline}"/>')
    if icon.solid:
        paths.append(f'<path d="{icon.solid}" fill="currentColor"/>')
    return Markup(
        f'<svg {where} viewBox="0 0 16 16" aria-hidden="true" focusable="false" {_STROKE}>'
        f"{''.join(paths)}</svg>"
    )


def of_state(
    value: str, *, at: tuple[float, float] | None = None, size: float = 12, ink: str = ""
) -> Markup:
    """The icon of a state (a dot for one this page does not know)."""
    return drawing(STATE_ICONS.get(value, DOT), at=at, size=size, ink=ink)

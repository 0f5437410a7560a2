"""The Jinja environment (autoescaped), and how values look on a page.

Dates are shown in the viewer's time zone with the UTC time in the ``title`` (on hover);
states are a colour *and* an icon (:mod:`veritask.ui.icons`) and a translated word, so that
they read without colour.
Sentences the platform stored in English (reasons, a validator's messages, refusals) are
recognised by the phrase that wrote them and shown in the viewer's language (``sentence``).
"""

from __future__ import annotations

import json
import re
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final, assert_never

import jinja2
from markupsafe import Markup, escape

from veritask import ids
from veritask.core import phrasebook
from veritask.core.phrases import Slot
from veritask.definitions.schedule import ScheduleWords
from veritask.ui import dag, i18n, icons, labels

#: The colour family of each state (a CSS class); the glyph and the word carry the meaning.
STATE_TONES: Final = {
    "SUCCESS": "good",
    "PUBLISHED": "good",
    "FAILED": "bad",
    "START_FAILED": "bad",
    "UPSTREAM_FAILED": "bad",
    "CHECK_FAILED": "bad",
    "PUBLISH_FAILED": "bad",
    "TIMEOUT": "bad",
    "NOT_RECEIVED": "bad",
    "ABANDONED": "bad",
    "CANCEL_FAILED": "warn",
    "LOST": "warn",
    "UP_FOR_RETRY": "warn",
    "CANCELLING": "warn",
    "CANCELLED": "muted",
    "SKIPPED": "muted",
    "REMOVED": "muted",
    "NOT_REQUIRED": "muted",
    "RUNNING": "live",
    "CHECKING": "live",
    "PUBLISHING": "live",
}

#: An alert's status as a tone, beside its icon and its translated word.
ALERT_STATUS_TONES: Final = {"open": "bad", "acknowledged": "warn", "resolved": "good"}

_environment = jinja2.Environment(
    loader=jinja2.PackageLoader("veritask.ui", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def environment() -> jinja2.Environment:
    """The one environment: autoescape on, undefined names are errors."""
    return _environment


def render(
    template: str,
    *,
    t: i18n.Translator,
    zone: zoneinfo.ZoneInfo,
    now: datetime | None = None,
    **values: object,
) -> str:
    """``template`` rendered with the helpers bound to the viewer's language and zone (and
    to the moment of the request, which relative times count from)."""
    helpers: dict[str, object] = {
        "t": t,
        "lang": t.language.value,
        "languages": i18n.LANGUAGE_NAMES,
        "zone": zone.key,
        "when": when_in(zone, t, now),
        "moment": moment_in(zone),
        "compact": compact_in(zone),
        "duration": duration_in(t),
        "state": state_in(t),
        "alert_status": alert_status_in(t),
        "actor": actor_in(t),
        "event_kind": event_kind_in(t),
        "schedule_phrase": schedule_in(t),
        "sentence": sentence_in(t, zone),
        "as_json": as_json,
        "tone": tone,
        "glyph": glyph,
        "glyph_at": glyph_at,
        "fit": labels.fit,
        "short_id": ids.short,
        "dag": dag,
    }
    return _environment.get_template(template).render(**helpers, now=now, **values)


def when_in(
    zone: zoneinfo.ZoneInfo, t: i18n.Translator | None = None, now: datetime | None = None
) -> Callable[[datetime | None], Markup]:
    """``when(dt)``: a ``<time>`` in the viewer's zone with the UTC time on hover, and beside
    it how long ago (or how soon) that is from ``now``, in the viewer's language."""

    def when(moment: datetime | None) -> Markup:
        if moment is None:
            return Markup('<span class="none">—</span>')
        utc = moment.astimezone(UTC)
        local = moment.astimezone(zone)
        shown = Markup('<time datetime="{}" title="{}">{}</time>').format(
            utc.isoformat(),
            utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
            local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        )
        if t is None or now is None:
            return shown
        return shown + Markup(' <span class="ago">{}</span>').format(relative(t, moment, now))

    return when


def moment_in(zone: zoneinfo.ZoneInfo) -> Callable[[datetime], str]:
    """``moment(dt)``: plain text in the viewer's zone, for tooltips and other attributes."""

    def moment(value: datetime) -> str:
        return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")

    return moment


def compact_in(zone: zoneinfo.ZoneInfo) -> Callable[[datetime], str]:
    """``compact(dt)``: month, day and time in the viewer's zone, for narrow columns."""

    def compact(value: datetime) -> str:
        return value.astimezone(zone).strftime("%m-%d %H:%M")

    return compact


def relative(t: i18n.Translator, moment: datetime, now: datetime) -> str:
    """``3 min ago`` or ``in 2 h``: the distance from ``now`` in its largest whole unit."""
    seconds = (now - moment).total_seconds()
    distance = abs(seconds)
    if distance < 10:
        return t("ago.now")
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1)):
        if distance >= size:
            span = t(f"ago.{unit}", n=int(distance // size))
            break
    return t("ago.past", span=span) if seconds > 0 else t("ago.future", span=span)


def duration_in(t: i18n.Translator) -> Callable[[timedelta | None], str]:
    """``duration(td)``: ``1h 2m 3s`` in the viewer's language."""

    def duration(span: timedelta | None) -> str:
        if span is None:
            return "—"
        exact = max(0.0, span.total_seconds())
        if 0 < exact < 10 and exact != int(exact):
            return t("unit.seconds", n=f"{exact:.1f}")  # short phases still compare
        seconds = round(exact)
        hours, rest = divmod(seconds, 3600)
        minutes, seconds = divmod(rest, 60)
        parts = []
        if hours:
            parts.append(t("unit.hours", n=hours))
        if minutes:
            parts.append(t("unit.minutes", n=minutes))
        if seconds or not parts:
            parts.append(t("unit.seconds", n=seconds))
        return " ".join(parts)

    return duration


def state_in(t: i18n.Translator) -> Callable[[str | None], Markup]:
    """``state(value)``: a badge with the colour, the icon and the translated word."""

    def state(value: str | None) -> Markup:
        if value is None:
            return Markup('<span class="none">—</span>')
        return Markup('<span class="badge tone-{}" data-state="{}">{} {}</span>').format(
            tone(value), value, glyph(value), t(f"state.{value}")
        )

    return state


def alert_status_in(t: i18n.Translator) -> Callable[[str], Markup]:
    """``alert_status(value)``: a badge with the colour, the icon and the translated word."""

    def alert_status(value: str) -> Markup:
        mark = icons.drawing(icons.ALERT_ICONS.get(value, icons.DOT))
        return Markup('<span class="badge tone-{}" data-alert-status="{}">{} {}</span>').format(
            ALERT_STATUS_TONES.get(value, "idle"), value, mark, t(f"alert_status.{value}")
        )

    return alert_status


def actor_in(t: i18n.Translator) -> Callable[[str | None], str]:
    """``actor(text)``: ``operator:alice`` with its kind in the viewer's language; the name
    after the colon is the person's and stays as it is. An unknown kind is shown as recorded."""

    def actor(text: str | None) -> str:
        if not text:
            return "—"
        kind, colon, name = text.partition(":")
        key = f"actor_kind.{kind}"
        if not t.has(key):
            return text
        return f"{t(key)}{colon}{name}"

    return actor


def event_kind_in(t: i18n.Translator) -> Callable[[str | None], Markup]:
    """``event_kind(kind)``: the kind in the viewer's language, the recorded name on hover
    (what the API and the CLI print); a kind the catalog does not know is shown as recorded."""

    def event_kind(kind: str | None) -> Markup:
        if not kind:
            return Markup('<span class="none">?</span>')
        key = f"event_kind.{kind}"
        if not t.has(key):
            return Markup("<code>{}</code>").format(kind)
        return Markup('<span class="event-kind" title="{}">{}</span>').format(kind, t(key))

    return event_kind


def schedule_in(t: i18n.Translator) -> Callable[[ScheduleWords], str]:
    """``schedule_phrase(words)``: a schedule's pattern and values phrased in the viewer's
    language ("every day at 06:00 (UTC)", "每天 06:00（UTC）"). In English it reads exactly as
    the API's ``schedule`` text, which ``definitions.schedule.english`` phrases."""

    def schedule_phrase(words: ScheduleWords) -> str:
        phrase = t(
            f"schedule.{words.pattern.value}",
            n=words.every,
            minute=words.minute,
            times=listed(t, list(words.times)),
            days=listed(t, [t(f"weekday.{day}") for day in words.weekdays]),
            day=words.day,
            month=t(f"month.{words.month}") if words.month else "",
            cron=words.cron,
        )
        return t("schedule.in_zone", phrase=phrase, zone=words.timezone)

    return schedule_phrase


_UTC_ZONE = zoneinfo.ZoneInfo("UTC")


def sentence_in(
    t: i18n.Translator, zone: zoneinfo.ZoneInfo = _UTC_ZONE
) -> Callable[[str | None], str]:
    """``sentence(text)``: a sentence the platform stored in English, in the viewer's language.

    The phrase that wrote it is recognised (:func:`veritask.core.phrasebook.match`) and its
    catalog entry is rendered with the fields; fields that are platform words (states, event
    kinds, durations, nested sentences) are translated too, times are shown in the viewer's
    ``zone``, names and numbers are kept. A sentence no phrase wrote (a person's words, an
    engine's error) is shown as stored.
    """

    def sentence(text: str | None) -> str:
        if not text:
            return ""
        if t.language is i18n.Language.EN and _MOMENT.search(text) is None:
            return text  # the catalog's English is the template itself
        return translate_sentence(t, text, zone)

    return sentence


#: Sentences joined into one: the run's "active: a; ready: b", lists of "task state".
_JOINED = {"; ": "list.clauses", ", ": "list.separator"}
_TIMEDELTA = re.compile(r"(?:(-?\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)")
_MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def translate_sentence(t: i18n.Translator, text: str, zone: zoneinfo.ZoneInfo = _UTC_ZONE) -> str:
    """``text`` in ``t``'s language, as far as phrases wrote it; the rest as stored."""
    return _render(t, zone, phrasebook.read(text))


def _render(t: i18n.Translator, zone: zoneinfo.ZoneInfo, reading: phrasebook.Reading) -> str:
    match reading:
        case phrasebook.Plain(text):
            return text
        case phrasebook.Joined(separator=separator, parts=parts):
            between = t(_JOINED.get(separator, "list.clauses"))
            return between.join(_render(t, zone, part) for part in parts)
        case phrasebook.Said(text=text, phrase=phrase, fields=fields, nested=nested):
            if not t.has(phrase.key):
                return text
            inner = dict(nested)
            values = {
                name: _render(t, zone, inner[name])
                if name in inner
                else _field(t, zone, slot, value)
                for (name, value), slot in zip(fields, phrase.slots.values(), strict=True)
            }
            return t(phrase.key, **values)
        case _:
            assert_never(reading)


def _field(t: i18n.Translator, zone: zoneinfo.ZoneInfo, slot: Slot, value: str) -> str:
    match slot:
        case Slot.STATE:
            return _word(t, "state", value.upper())
        case Slot.STATES:
            return t("list.separator").join(
                _word(t, "state", word.upper()) for word in value.split(", ")
            )
        case Slot.EVENT_KIND:
            return _word(t, "event_kind", value)
        case Slot.OPEN_REASON:
            return _word(t, "open_reason", value)
        case Slot.LIFECYCLE:
            return _word(t, "lifecycle", value)
        case Slot.ACTOR:
            return actor_in(t)(value)
        case Slot.TIME:
            return _moment_in(zone, value)
        case Slot.DURATION:
            return _timedelta_in(t, value)
        case Slot.TEXT | Slot.SENTENCE | Slot.NUMBER | Slot.CODE | Slot.FIELD:
            return value


def _moment_in(zone: zoneinfo.ZoneInfo, text: str) -> str:
    """A recorded ``isoformat`` time as :func:`when_in` shows one (a time with no offset was
    recorded in UTC)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")


def _word(t: i18n.Translator, prefix: str, value: str) -> str:
    key = f"{prefix}.{value}"
    return t(key) if t.has(key) else value


def _timedelta_in(t: i18n.Translator, text: str) -> str:
    """A ``timedelta`` as Python printed it (``1 day, 0:10:00``), as :func:`duration_in`."""
    found = _TIMEDELTA.fullmatch(text)
    if found is None:
        return text
    days, hours, minutes, seconds = found.groups()
    span = timedelta(
        days=int(days or 0), hours=int(hours), minutes=int(minutes), seconds=float(seconds)
    )
    return duration_in(t)(span)


def listed(t: i18n.Translator, items: list[str]) -> str:
    """``a, b and c`` in the viewer's language."""
    if len(items) < 2:
        return "".join(items)
    return t("list.and", rest=t("list.separator").join(items[:-1]), last=items[-1])


def tone(value: str) -> str:
    return STATE_TONES.get(value, "idle")


def glyph(value: str) -> Markup:
    """The state's icon, sized to the text beside it."""
    return icons.of_state(value)


def glyph_at(value: str, x: float, y: float) -> Markup:
    """The state's icon inside an SVG drawing, its top left corner at (``x``, ``y``)."""
    return icons.of_state(value, at=(x, y), ink=tone(value))


def as_json(value: object) -> Markup:
    """A JSON value, escaped, for ``<pre>``: user data is never markup."""
    return escape(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str))

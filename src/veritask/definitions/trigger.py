"""Reading ``trigger:``: the definitions whose publications start a run, and whether all of
them or any one must have published (docs/definitions.md, "trigger").

Every problem is placed at its item (``trigger.on_published[1]``): an empty list, a name
listed twice, the definition's own name, ``when`` other than ``all`` or ``any``. Whether a
named definition exists, and publishes, is checked at apply, as for ``wait_for``.
"""

from __future__ import annotations

from veritask.core import problems
from veritask.definitions.model import SLUG, OnPublished, PublishedWhen
from veritask.definitions.reader import Reader, entry_line, kind, slug_message
from veritask.definitions.source import Entry, Scalar

TRIGGER_FIELDS = ("on_published", "when")
_PATH = "trigger.on_published"


def read_trigger(reader: Reader, entry: Entry | None, own_name: str) -> OnPublished | None:
    """``trigger:`` of the definition named ``own_name``; absent or null: None."""
    f = reader.fields_of(entry, "trigger", TRIGGER_FIELDS, required=("on_published",))
    if f is None:
        return None
    since = len(reader.problems)
    when = reader.choice(f.get("when"), "trigger.when", PublishedWhen, PublishedWhen.ALL)
    listed = f.get("on_published")
    if listed is None:
        return None  # already reported as required
    items = reader.items(listed, _PATH)
    if not items and len(reader.problems) == since:
        reader.add(_PATH, entry_line(listed), problems.NO_UPSTREAMS.format())
    upstreams: list[str] = []
    lines: list[int | None] = []
    for i, item in enumerate(items):
        path = f"{_PATH}[{i}]"
        if not (isinstance(item, Scalar) and isinstance(item.value, str)):
            reader.add(path, item.line, problems.EXPECTED_STRING.format(kind=kind(item)))
            continue
        name = item.value
        if not SLUG.fullmatch(name):
            reader.add(path, item.line, slug_message(name, problems.NOT_A_NAME))
        elif name in upstreams:
            reader.add(path, item.line, problems.LISTED_TWICE.format(key=name))
        elif name == own_name:
            reader.add(path, item.line, problems.TRIGGERED_BY_ITSELF.format())
        upstreams.append(name)
        lines.append(item.line)
    return reader.attempt(
        lambda: OnPublished(tuple(upstreams), when, tuple(lines)), entry_line(entry), since
    )

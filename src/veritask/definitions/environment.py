"""Reading ``env:`` (on a definition and on a task): variable names to strings or secret
references, with a problem at the field and line of each bad entry.

Values are taken as written: no template is expanded in them, so a parameter can never become
a variable's value behind the author's back. ``{secret: NAME}`` is kept as a reference
(:class:`SecretRef`): the worker looks the value up when the attempt starts.
"""

from __future__ import annotations

from veritask.core import problems
from veritask.definitions.model import ENV_NAME, RESERVED_ENV_PREFIX, EnvValue, SecretRef
from veritask.definitions.reader import Reader, entry_line, is_null, kind
from veritask.definitions.source import Entry, Map, Scalar


def read_env(reader: Reader, entry: Entry | None, path: str) -> dict[str, EnvValue]:
    """``env:`` at ``path``; an absent or null one is empty."""
    if entry is None or is_null(entry):
        return {}
    if not isinstance(entry.value, Map):
        message = problems.EXPECTED_MAPPING.format(kind=kind(entry.value))
        reader.add(path, entry.value.line, message)
        return {}
    found: dict[str, EnvValue] = {}
    for item in entry.value.entries:
        where = f"{path}.{item.key}"
        if not ENV_NAME.fullmatch(item.key):
            reader.add(where, item.key_line, problems.NOT_AN_ENV_NAME.format(name=item.key))
        elif item.key.upper().startswith(RESERVED_ENV_PREFIX):
            reader.add(where, item.key_line, problems.RESERVED_ENV_NAME.format(name=item.key))
        value = _value(reader, item, where)
        if value is not None:
            found[item.key] = value
    return found


def _value(reader: Reader, item: Entry, path: str) -> EnvValue | None:
    value = item.value
    if isinstance(value, Scalar) and isinstance(value.value, str):
        return value.value
    if not isinstance(value, Map):
        reader.add(path, value.line, problems.EXPECTED_ENV_VALUE.format(kind=kind(value)))
        return None
    f = reader.fields(value, path, ("secret",), required=("secret",), line=item.key_line)
    if f is None:
        return None
    name = reader.text(f.get("secret"), f"{path}.secret")
    if name is None:
        return None
    if not ENV_NAME.fullmatch(name):
        line = entry_line(f.get("secret"))
        reader.add(f"{path}.secret", line, problems.NOT_A_SECRET_NAME.format(name=name))
        return None
    return SecretRef(name)

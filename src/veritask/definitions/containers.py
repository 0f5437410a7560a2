"""Reading a container task's ``volumes:`` and ``secret_files:``, with a problem at the field
and line of each bad entry.

Which host paths may be mounted is the platform's to say, not this module's: the platform
that applies a definition passes a check (``VolumeCheck``) that names its allow-list.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

from veritask.core import problems
from veritask.definitions.model import ENV_NAME, VolumeSpec
from veritask.definitions.reader import Reader, entry_line, is_null, kind
from veritask.definitions.source import Entry, Map, Scalar

#: Why a host path may not be mounted here (a problem's message), or None when it may.
VolumeCheck = Callable[[str], str | None]

_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def read_volumes(
    reader: Reader, entry: Entry | None, path: str, check: VolumeCheck | None
) -> tuple[VolumeSpec, ...]:
    """``volumes:`` at ``path``: a list of ``HOST:CONTAINER[:ro]``; each host path is put to
    ``check`` when there is one."""
    found: list[VolumeSpec] = []
    for i, item in enumerate(reader.items(entry, path)):
        where = f"{path}[{i}]"
        if not (isinstance(item, Scalar) and isinstance(item.value, str)):
            reader.add(where, item.line, problems.EXPECTED_STRING.format(kind=kind(item)))
            continue
        volume = parse_volume(item.value)
        if volume is None:
            reader.add(where, item.line, problems.NOT_A_VOLUME.format(value=item.value))
            continue
        problem = check(volume.host) if check is not None else None
        if problem is not None:
            reader.add(where, item.line, problem)
            continue
        found.append(volume)
    return tuple(found)


def parse_volume(text: str) -> VolumeSpec | None:
    """``HOST:CONTAINER`` or ``HOST:CONTAINER:ro`` (``:rw`` too), both absolute and without
    ``..``; the paths normalised. None when it is not one."""
    parts = text.split(":")
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        host, container, mode = parts
    elif len(parts) == 2:
        (host, container), mode = parts, "rw"
    else:
        return None
    if not all(_plain_absolute(p) for p in (host, container)):
        return None
    return VolumeSpec(posixpath.normpath(host), posixpath.normpath(container), mode == "ro")


def _plain_absolute(path: str) -> bool:
    return path.startswith("/") and ".." not in path.split("/") and "\0" not in path


def read_secret_files(reader: Reader, entry: Entry | None, path: str) -> dict[str, str]:
    """``secret_files:`` at ``path``: file names (in ``/run/secrets``) to secret names."""
    if entry is None or is_null(entry):
        return {}
    if not isinstance(entry.value, Map):
        message = problems.EXPECTED_MAPPING.format(kind=kind(entry.value))
        reader.add(path, entry.value.line, message)
        return {}
    found: dict[str, str] = {}
    for item in entry.value.entries:
        where = f"{path}.{item.key}"
        if not _FILE_NAME.fullmatch(item.key):
            reader.add(where, item.key_line, problems.NOT_A_SECRET_FILE.format(name=item.key))
            continue
        name = reader.text(item, where)
        if name is None:
            continue
        if not ENV_NAME.fullmatch(name):
            reader.add(where, entry_line(item), problems.NOT_A_SECRET_NAME.format(name=name))
            continue
        found[item.key] = name
    return found

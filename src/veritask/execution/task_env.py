"""A task's environment: an allowlist, never the platform's own.

The worker's process holds the platform's settings (the ledger's URL, SQL passwords, the alert
webhook's secret, tokens); none of them reaches a task. A task gets only:

1. what any program needs to run, from the worker's environment: :data:`BASE_NAMES` and
   every ``LC_*`` (``PYTHONPATH`` and ``VIRTUAL_ENV`` too: a ``call:`` task and a task that
   runs ``python`` import their modules from there);
2. the names the operator lists in ``VERITASK_TASK_ENV_PASSTHROUGH`` (comma-separated), from
   the environment of the process that runs the workers (the scheduler for ``local``, the
   Celery worker for ``celery``): so each executor's hosts pass their own;
3. what its definition declares (``env:``), the values as written and the secrets resolved;
4. the task's own ``VERITASK_*`` variables (its run, instance, attempt, token, callback).

A pass-through name that is a platform setting (any ``VERITASK_*``) is refused.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from importlib import machinery

PASSTHROUGH_ENV = "VERITASK_TASK_ENV_PASSTHROUGH"
BASE_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "PYTHONPATH",
        "VIRTUAL_ENV",
    }
)
BASE_PREFIXES = ("LC_",)
#: Every setting of the platform, and every variable the worker sets for the task, has it.
PLATFORM_PREFIX = "VERITASK_"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The variable of the task's own that names its attempt (its token is unique): every process
#: the task starts inherits it, so it marks the attempt's processes for whoever must find them
#: without their worker (a process keeps it across ``setsid`` and a double fork).
ATTEMPT_MARK = "VERITASK_ATTEMPT_TOKEN"


def attempt_mark(attempt_token: str) -> bytes:
    """The ``NAME=value`` entry that the environment of the attempt's processes holds."""
    return f"{ATTEMPT_MARK}={attempt_token}".encode()


class TaskEnvError(ValueError):
    """A pass-through list that cannot be used; the message names the setting and the name."""


def passthrough_names(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The names ``VERITASK_TASK_ENV_PASSTHROUGH`` lists; raises :class:`TaskEnvError` for an
    invalid name or a platform setting."""
    listed = [name.strip() for name in environ.get(PASSTHROUGH_ENV, "").split(",")]
    names = tuple(name for name in listed if name)
    for name in names:
        if not NAME.fullmatch(name):
            raise TaskEnvError(f"{PASSTHROUGH_ENV}: {name!r} is not a variable name")
        if name.upper().startswith(PLATFORM_PREFIX):
            raise TaskEnvError(
                f"{PASSTHROUGH_ENV}: {name} is a setting of the platform, never passed to a task"
            )
    return names


def inherited(environ: Mapping[str, str]) -> dict[str, str]:
    """What a task takes from the worker's environment: the allowlist and the pass-through."""
    passed = set(passthrough_names(environ))
    return {
        name: value
        for name, value in environ.items()
        if name in BASE_NAMES or name.startswith(BASE_PREFIXES) or name in passed
    }


def build(
    environ: Mapping[str, str],
    *,
    declared: Mapping[str, str],
    secrets: Mapping[str, str],
    own: Mapping[str, str],
) -> dict[str, str]:
    """The task's whole environment; later layers win: inherited, declared (the spec's
    ``env``), resolved secrets, then the task's own ``VERITASK_*``."""
    built = {**inherited(environ), **declared, **secrets, **own}
    for name, value in built.items():
        problem = _variable_problem(name, value)
        if problem is not None:
            raise TaskEnvError(problem)
    return built


def _variable_problem(name: str, value: str) -> str | None:
    """Why a process's environment cannot hold this variable (a run's parameter may name
    anything a trigger sent), or None: the attempt then fails to start, naming it."""
    shown = repr(name[:128])
    if not name or "=" in name or "\x00" in name:
        return f"the task's environment cannot hold a variable named {shown}"
    if "\x00" in value:
        return f"{shown} holds a NUL character, which no environment variable can"
    for text in (name, value):
        try:
            text.encode(errors="surrogateescape")
        except UnicodeEncodeError:
            return f"{shown} is not text an environment variable can hold"
    return None


def finds_module(module: str, environ: Mapping[str, str]) -> bool:
    """Whether a ``call:`` task of a local worker started with ``environ`` finds ``module``'s
    top package: on its ``PYTHONPATH`` or among this interpreter's own (site-packages).
    Nothing is imported, so no code of the module runs."""
    top = module.partition(".")[0]
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return True
    given = [entry for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    mine = set(os.environ.get("PYTHONPATH", "").split(os.pathsep))
    # sys.path[0] is this process's script folder or working folder, not the worker's.
    own = [entry for entry in sys.path[1:] if entry and entry not in mine]
    return machinery.PathFinder.find_spec(top, [*given, *own]) is not None

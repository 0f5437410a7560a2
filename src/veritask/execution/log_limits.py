"""How much of a task's output an attempt's log keeps, when its definition does not say.

The operator sets it per executor by environment, read by the scheduler when it submits:
``VERITASK_LOG_LIMIT_<EXECUTOR>`` (``VERITASK_LOG_LIMIT_LOCAL``, ``…_CELERY``; ``-`` in the
executor's name is ``_``) first, then ``VERITASK_LOG_LIMIT`` for every executor, else 10 MiB.
A definition's ``log_limit`` (in ``defaults`` or on a task) wins over both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from veritask.core import sizes

VARIABLE: Final = "VERITASK_LOG_LIMIT"


def variable_for(executor: str) -> str:
    """The variable that sets ``executor``'s log limit alone."""
    return f"{VARIABLE}_{executor.upper().replace('-', '_')}"


def executor_log_limit(executor: str, environ: Mapping[str, str] | None = None) -> int:
    """The log limit of ``executor``'s attempts whose definition names none, in bytes.

    A value that is not a size, or is out of range, raises ``ValueError`` naming the variable.
    """
    found = os.environ if environ is None else environ
    for name in (variable_for(executor), VARIABLE):
        text = found.get(name, "").strip()
        if text:
            try:
                return sizes.parse_log_limit(int(text) if text.isdigit() else text)
            except sizes.InvalidSize as exc:
                raise ValueError(f"{name}: {exc}") from None
    return sizes.DEFAULT_LOG_LIMIT

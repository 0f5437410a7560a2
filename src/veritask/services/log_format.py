"""The platform's own logs as JSON Lines (``VERITASK_LOG_FORMAT=json``), for log collectors.

Each line has ``time`` (UTC ISO 8601), ``level``, ``logger``, ``message``, ``process``,
``thread``, and the ids the call site knew, passed as ``extra``: ``definition``, ``run_id``,
``instance_id``, ``attempt_no`` (absent when unknown); ``exception`` holds a traceback.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Final

#: The ``extra`` keys that are copied into each line when a call site gives them.
CONTEXT_KEYS: Final = ("definition", "run_id", "instance_id", "attempt_no")


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "thread": record.threadName,
        }
        for key in CONTEXT_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def formatter(kind: str) -> logging.Formatter:
    """``json`` or ``text`` (the default); ValueError names the variable otherwise."""
    if kind == "json":
        return JsonFormatter()
    if kind in ("", "text"):
        return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise ValueError(f"VERITASK_LOG_FORMAT: expected json or text, got {kind!r}")

"""What the CLI prints: rich tables for people, JSON (``--json``) for scripts.

JSON output is the API's own JSON, with the state names of docs/state-machine.md, so a script
reads the same fields from the CLI and from the API.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import TextIO

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from veritask.core.jsontypes import JSONObject, JSONValue


def _width(stream: TextIO) -> int | None:
    """A terminal's own width; piped output is not squeezed into 80 columns."""
    if stream.isatty():
        return None
    return int(os.environ.get("COLUMNS", "0")) or 200


# No markup: reasons and evidence are data, and a "[…]" in them must print as it is.
out = Console(highlight=False, markup=False, soft_wrap=False, width=_width(sys.stdout))
err = Console(stderr=True, highlight=False, markup=False, width=_width(sys.stderr))

_GOOD = {"SUCCESS", "PUBLISHED", "NOT_REQUIRED", "active", "applied"}
_BAD = {
    "FAILED",
    "START_FAILED",
    "TIMEOUT",
    "UPSTREAM_FAILED",
    "CHECK_FAILED",
    "PUBLISH_FAILED",
    "CANCEL_FAILED",
    "ABANDONED",
    "NOT_RECEIVED",
    "rejected",
    "conflict",
}
_WARN = {"LOST", "CANCELLING", "CANCELLED", "UP_FOR_RETRY", "SKIPPED", "stale", "deleting"}


def print_json(value: JSONValue) -> None:
    """JSON on stdout, nothing else (scripts parse it)."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def listing(
    found: list[JSONObject], *, as_json: bool, table: Callable[[list[JSONObject]], Table]
) -> None:
    """A list a verb found: JSON for scripts with ``--json``, else ``table(found)``."""
    if as_json:
        print_json(list[JSONValue](found))
    else:
        out.print(table(found))


def text(value: JSONValue) -> str:
    """A cell: empty for null, the value otherwise."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def items(value: JSONValue) -> list[JSONObject]:
    """The objects of a JSON list (anything else is skipped)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def state(value: JSONValue) -> Text:
    """A state name, coloured by what it means."""
    name = text(value)
    style = (
        "green" if name in _GOOD else "red" if name in _BAD else "yellow" if name in _WARN else ""
    )
    return Text(name, style=style)


def when(value: JSONValue) -> str:
    """A timestamp, shortened to the second for tables (JSON keeps it whole)."""
    raw = text(value)
    return raw.replace("T", " ")[:19] if raw else ""


def definitions_table(found: Iterable[JSONObject]) -> Table:
    table = Table(title="Definitions", title_justify="left")
    for column in ("NAME", "LIFECYCLE", "VERSION", "SCHEDULE", "NEXT FIRE (UTC)", "TASKS"):
        table.add_column(column)
    for d in found:
        tasks = d.get("tasks")
        table.add_row(
            text(d.get("name")),
            state(d.get("lifecycle")),
            text(d.get("current_version")),
            text(d.get("schedule")) or "manual",
            when(d.get("next_fire_time")),
            ", ".join(text(t) for t in tasks) if isinstance(tasks, list) else "",
        )
    return table


def runs_table(found: Iterable[JSONObject]) -> Table:
    table = Table(title="Runs", title_justify="left")
    columns = ("RUN", "DEFINITION", "EXECUTION", "PUBLICATION", "TRIGGER", "LOGICAL TIME (UTC)")
    for column in (*columns, "CREATED", "REASON"):
        table.add_column(column, overflow="fold")
    for r in found:
        table.add_row(
            text(r.get("id")),
            text(r.get("definition")),
            state(r.get("execution_state")),
            state(r.get("publication_state")),
            text(r.get("trigger_kind")),
            when(r.get("logical_time")),
            when(r.get("created_at")),
            text(r.get("execution_reason")),
        )
    return table


def tokens_table(found: Iterable[JSONObject]) -> Table:
    table = Table(title="API tokens", title_justify="left")
    for column in ("ID", "NAME", "ROLE", "CREATED", "REVOKED"):
        table.add_column(column, overflow="fold")
    for t in found:
        table.add_row(
            text(t.get("id")),
            text(t.get("name")),
            text(t.get("role")),
            when(t.get("created_at")),
            when(t.get("revoked_at")) if t.get("revoked_at") else "",
        )
    return table


def run_header(run: JSONObject) -> list[str]:
    return [
        f"run {text(run.get('id'))}  definition {text(run.get('definition'))} "
        f"v{text(run.get('definition_version'))}  ({text(run.get('trigger_kind'))})",
        f"execution:   {text(run.get('execution_state'))} — {text(run.get('execution_reason'))}",
        f"publication: {text(run.get('publication_state'))}"
        + (f" — {text(run.get('publication_reason'))}" if run.get("publication_reason") else ""),
        *_started_by(items(run.get("upstream_runs"))),
    ]


def _started_by(upstreams: list[JSONObject]) -> list[str]:
    """The published runs that started a run, as ``definition run_id``."""
    if not upstreams:
        return []
    named = ", ".join(
        f"{text(u.get('definition')) or '?'} {text(u.get('run_id'))}" for u in upstreams
    )
    return [f"started by:  {named}"]


def instances_table(instances: Iterable[JSONObject]) -> Table:
    table = Table(title="Instances", title_justify="left")
    for column in ("TASK", "STATE", "ATTEMPTS", "PROGRESS", "INSTANCE", "REASON"):
        table.add_column(column, overflow="fold")
    for i in instances:
        attempts = items(i.get("attempts"))
        index = i.get("map_index")
        mapped = f"[{index}]" if isinstance(index, int) and index >= 0 else ""
        table.add_row(
            text(i.get("task")) + mapped,
            state(i.get("state")),
            str(len(attempts)),
            progress(attempts[-1]) if attempts else "",
            text(i.get("id")),
            text(i.get("reason")),
        )
    return table


def progress(attempt: JSONObject) -> str:
    found = attempt.get("progress")
    if not isinstance(found, dict):
        return ""
    done, total = found.get("done"), found.get("total")
    amount = f" {done}/{total}" if done is not None and total is not None else ""
    message = f" {found.get('message')}" if found.get("message") else ""
    return f"{text(found.get('phase'))}{amount}{message}"


def attempts_table(task: str, attempts: Iterable[JSONObject]) -> Group:
    """The attempts, one row each, then each attempt's last error under the table."""
    table = Table(title=f"Attempts of {task}", title_justify="left")
    columns = (
        "#",
        "STATE",
        "STARTED",
        "ENDED",
        "EXIT",
        "CATEGORY",
        "COST",
        "EXTERNAL ID",
        "REASON",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    errors: list[Text] = []
    for a in attempts:
        late = a.get("late")
        reason = text(a.get("reason")) + (
            "; " + "; ".join(text(n) for n in late) if isinstance(late, list) and late else ""
        )
        table.add_row(
            text(a.get("attempt_no")),
            state(a.get("state")),
            when(a.get("started_at")),
            when(a.get("ended_at")),
            text(a.get("exit_code")),
            text(a.get("error_category")),
            cost(a),
            text(a.get("external_id")),
            reason,
        )
        message = a.get("error_message")
        if isinstance(message, str) and message:
            errors.append(Text(f"Last error of attempt {text(a.get('attempt_no'))}:", style="bold"))
            errors.append(Text(message))
        if a.get("output") is not None:
            errors.append(Text(f"Output of attempt {text(a.get('attempt_no'))}:", style="bold"))
            errors.append(Text(output(a.get("output"))))
    return Group(table, *errors)


def output(value: JSONValue, limit: int = 2000) -> str:
    """A task's output as JSON, cut at ``limit`` characters (``--json`` has all of it)."""
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def cost(attempt: JSONObject) -> str:
    """``cpu 1.20s user 0.30s sys, rss 45.1 MiB``: what the attempt's process used, if known."""
    user, system = attempt.get("cpu_user_seconds"), attempt.get("cpu_system_seconds")
    rss = attempt.get("peak_rss_bytes")
    parts = []
    if isinstance(user, int | float) and isinstance(system, int | float):
        parts.append(f"cpu {user:.2f}s user {system:.2f}s sys")
    if isinstance(rss, int):
        parts.append(f"rss {rss / 2**20:.1f} MiB")
    return ", ".join(parts)


def history_table(events: Iterable[JSONObject]) -> Table:
    table = Table(title="History", title_justify="left")
    columns = (
        "OBSERVED (UTC)",
        "EVENT TIME (UTC)",
        "ACTOR",
        "KIND",
        "ATTEMPT",
        "TO",
        "OUTCOME",
        "EVIDENCE",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for e in events:
        evidence = e.get("evidence")
        table.add_row(
            when(e.get("observed_at")),
            when(e.get("event_time")),
            text(e.get("actor")),
            text(e.get("kind")),
            text(e.get("attempt_no")),
            state(e.get("to_state")),
            state(e.get("outcome")),
            _short(text(evidence) if evidence else ""),
        )
    return table


def _short(value: str, limit: int = 160) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"

"""How ``veritask replay --policy`` reads its times and prints its estimate for people: one
row per difference of an instance (the recorded policy's course beside the other policy's),
a line per run that differs, then the totals. ``--json`` prints the report's own JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from rich.table import Table

from veritask.cli import render
from veritask.cli.client import EXIT_USAGE, CliError
from veritask.core.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    from veritask.services.what_if import Report


def moment(text: str, option: str, now: datetime) -> datetime:
    """An ISO 8601 time (UTC without an offset), or a duration back from ``now`` (``24h``)."""
    from veritask.definitions.durations import InvalidDuration, parse_duration

    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            return now - parse_duration(text)
        except InvalidDuration:
            raise CliError(
                EXIT_USAGE,
                f"{option}: {text!r} is neither an ISO 8601 time (2026-03-01T02:00:00) "
                "nor a duration back from now (24h)",
            ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def print_report(report: Report) -> None:
    """The differences, run by run, and the totals."""
    data = report.to_json()
    render.out.print(
        f"What-if replay under {_policy(data.get('policy'))} (an estimate; reads only)"
    )
    runs = data.get("runs")
    if isinstance(runs, list) and runs:
        table = Table(title="Differences", title_justify="left")
        for column in ("RUN", "TASK", "WHAT", "RECORDED POLICY", "WHAT IF"):
            table.add_column(column, overflow="fold")
        for run in runs:
            if isinstance(run, dict):
                _add_run(table, run)
        render.out.print(table)
    else:
        render.out.print("No run would have differed.")
    totals = data.get("totals")
    if isinstance(totals, dict):
        render.out.print(_totals(totals))
    if data.get("truncated"):
        render.out.print("Only the oldest runs were read: narrow --since/--until or raise --limit.")


def _add_run(table: Table, run: JSONObject) -> None:
    run_id = str(run.get("id"))
    first = True
    for instance in _objects(run.get("instances")):
        task = str(instance.get("task"))
        if instance.get("map_index", -1) not in (-1, None):
            task += f"[{instance.get('map_index')}]"
        if not instance.get("reproduces_recording"):
            task += " (!)"
        for difference in _objects(instance.get("differences")):
            what = str(difference.get("what"))
            table.add_row(
                run_id if first else "",
                task,
                what,
                _aspect(what, difference.get("recorded")),
                _aspect(what, difference.get("what_if")),
            )
            first = False
    recorded, what_if = run.get("recorded"), run.get("what_if")
    if isinstance(recorded, dict) and isinstance(what_if, dict) and recorded != what_if:
        table.add_row("", "(run)", "duration", _span(recorded), _span(what_if))


def _aspect(what: str, value: JSONValue) -> str:
    if what == "outcome" and isinstance(value, dict):
        state = str(value.get("state"))
        at = _time(value.get("at"))
        seconds = value.get("duration_seconds")
        bound = ">= " if value.get("lower_bound") else ""
        took = f" ({bound}{_seconds(seconds)})" if isinstance(seconds, int | float) else ""
        return f"{state} at {at}{took}" if at else state
    if what == "attempts" and isinstance(value, list):
        return "; ".join(_attempt(a) for a in value if isinstance(a, dict)) or "none"
    if isinstance(value, list):
        calls = [f"#{c.get('attempt_no')} at {_time(c.get('at'))}" for c in _objects(value)]
        return "; ".join(calls) or "none"
    return str(value)


def _attempt(value: JSONObject) -> str:
    n = value.get("attempt_no")
    if not value.get("evidence"):
        return f"#{n} opened {_time(value.get('opened_at'))}, no evidence"
    ended = _time(value.get("ended_at"))
    return f"#{n} {value.get('state')}" + (f" at {ended}" if ended else "")


def _span(value: JSONObject) -> str:
    seconds = value.get("duration_seconds")
    took = _seconds(seconds) if isinstance(seconds, int | float) else "-"
    if value.get("lower_bound"):
        took = f">= {took}"
    failed = value.get("failed_at")
    return took + (f", failed at {_time(failed)}" if failed else "")


def _totals(totals: JSONObject) -> str:
    def pair(key: str) -> str:
        value = totals.get(key)
        if isinstance(value, dict):
            return f"{key} {value.get('recorded')} -> {value.get('what_if')}"
        return f"{key} ?"

    parts = [
        f"{totals.get('runs')} runs ({totals.get('runs_differing')} differ)",
        f"{totals.get('instances')} instances ({totals.get('instances_differing')} differ)",
        pair("attempts"),
        pair("lost"),
        pair("failed"),
        pair("unknown"),
    ]
    line = "Totals: " + ", ".join(parts)
    if totals.get("not_reproduced"):
        line += (
            f"; {totals.get('not_reproduced')} instances (!) the replay under the recorded "
            "policy does not end as recorded"
        )
    if totals.get("not_replayed"):
        line += f"; {totals.get('not_replayed')} instances not replayed (an operator acted)"
    return line


def _policy(value: JSONValue) -> str:
    if not isinstance(value, dict):
        return "?"
    from veritask.definitions.durations import format_duration

    shown = []
    for key, item in value.items():
        if isinstance(item, float):
            item = format_duration(timedelta(seconds=item))
        shown.append(f"{key}={item}")
    return ",".join(shown)


def _seconds(value: JSONValue) -> str:
    if not isinstance(value, int | float):
        return "-"
    return str(timedelta(seconds=round(float(value), 3)))


def _time(value: JSONValue) -> str:
    if not isinstance(value, str):
        return ""
    return render.when(value)


def _objects(value: JSONValue) -> list[JSONObject]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []

"""``veritask explain``: a run or an instance as known at an instant, beside what is known now
for it, over the API (docs/explain.md)."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from veritask.cli import render
from veritask.cli.client import EXIT_NOT_FOUND, ApiClient, CliError
from veritask.cli.verbs import JSON_OPTION, _moment, api_client
from veritask.core.jsontypes import JSONObject, JSONValue

THEN = "KNOWN THEN (recorded by T)"
NOW = "KNOWN NOW FOR THEN (happened by T)"


@click.command("explain")
@click.argument("ident", metavar="RUN_ID|INSTANCE_ID")
@click.option(
    "--as-of",
    "as_of",
    default=None,
    metavar="T",
    help="The instant, RFC 3339 / ISO 8601 (UTC without an offset); default: the present.",
)
@click.option(
    "--axis",
    type=click.Choice(["observed", "event"]),
    default=None,
    help="Only one column: observed (recorded by T: known then) or event (happened by T, "
    "learned then or later: known now). Default: both.",
)
@JSON_OPTION
def explain_command(ident: str, as_of: str | None, axis: str | None, as_json: bool) -> None:
    """Why a run or an instance was in its state at T: what was known then and what is known
    now for then, the event and the transition rule that made each state, the events refused
    by then, and what changed afterwards (late evidence, reconciliation, overrides)."""
    params: dict[str, str | int] = {}
    if as_of is not None:
        params["as_of"] = _moment(as_of, "--as-of")
    if axis is not None:
        params["axis"] = axis
    with api_client() as api:
        kind, found = _explained(api, ident, params)
    if as_json:
        render.print_json({**found, "object": kind})
        return
    if kind == "run":
        _print_run(found)
    else:
        _print_instance(found, header=True)


def _explained(api: ApiClient, ident: str, params: dict[str, str | int]) -> tuple[str, JSONObject]:
    for kind, path in (
        ("run", f"/runs/{ident}/explain"),
        ("instance", f"/instances/{ident}/explain"),
    ):
        try:
            return kind, api.get(path, params)
        except CliError as exc:
            if exc.exit_code != EXIT_NOT_FOUND:
                raise
    raise CliError(EXIT_NOT_FOUND, f"no run or instance {ident!r}")


def _when(value: JSONValue) -> str:
    """A time to the millisecond: late and early are often a fraction of a second apart."""
    raw = render.text(value)
    return raw.replace("T", " ")[:23] if raw else ""


def _as_of(found: JSONObject) -> str:
    as_of = found.get("as_of")
    return f"as of {render.text(as_of)}" if as_of else "now (no --as-of)"


def _columns(found: JSONObject) -> list[tuple[str, JSONObject]]:
    shown: list[tuple[str, JSONObject]] = []
    for key, title in (("known_then", THEN), ("known_now", NOW)):
        column = found.get(key)
        if isinstance(column, dict):
            shown.append((title, column))
    return shown


def _cause_rows(causes: list[JSONValue]) -> list[list[str]]:
    """Rows of a cause per column: who made it, both times, the rule."""
    rows: list[list[str]] = [[], [], [], [], []]
    for cause in causes:
        c = cause if isinstance(cause, dict) else {}
        late = "  [late: recorded after T]" if c.get("late") else ""
        made = f"{render.text(c.get('kind'))} by {render.text(c.get('actor'))}" if c else ""
        attempt = c.get("attempt_no")
        if c and isinstance(attempt, int) and attempt > 0:
            made += f" (attempt {attempt})"
        rows[0].append(made + late)
        rows[1].append(_when(c.get("event_time")))
        rows[2].append(_when(c.get("observed_at")))
        rows[3].append(render.text(c.get("rule")))
        evidence = c.get("evidence")
        rows[4].append(render.text(evidence) if evidence else "")
    return rows


_CAUSE_LABELS = ("made by", "  happened (UTC)", "  recorded (UTC)", "  rule", "  evidence")


def _print_instance(found: JSONObject, *, header: bool) -> None:
    if header:
        render.out.print(
            f"instance {render.text(found.get('id'))}  task {render.text(found.get('task'))}  "
            f"run {render.text(found.get('run_id'))}  {_as_of(found)}"
        )
    columns = _columns(found)
    table = Table(box=None, show_header=True, header_style="bold")
    table.add_column("")
    for title, _ in columns:
        table.add_column(title, overflow="fold")
    table.add_row("state", *(render.state(c.get("state")) for _, c in columns))
    table.add_row("reason", *(render.text(c.get("reason")) for _, c in columns))
    rows = _cause_rows([c.get("made_by") for _, c in columns])
    for label, row in zip(_CAUSE_LABELS, rows, strict=True):
        table.add_row(label, *row)
    render.out.print(table)
    render.out.print(f"state now: {render.text(found.get('state_now'))}")
    _print_details(found)


def _print_details(found: JSONObject) -> None:
    late = render.items(found.get("late"))
    if late:
        render.out.print("late (happened by T, recorded after it):")
        for c in late:
            render.out.print(
                f"  {render.text(c.get('kind'))} by {render.text(c.get('actor'))}: happened "
                f"{_when(c.get('event_time'))}, recorded {_when(c.get('observed_at'))}"
                f"  [{render.text(c.get('event_id'))}]"
            )
    refused = render.items(found.get("refused"))
    if refused:
        render.out.print("refused by T:")
        for r in refused:
            rules = r.get("table_rules")
            table_rules = f" (the table's rules: {render.text(rules)})" if rules else ""
            render.out.print(
                f"  {render.text(r.get('kind'))} by {render.text(r.get('actor'))} at "
                f"{_when(r.get('observed_at'))}: broke {render.text(r.get('rule'))}"
                f"{table_rules} — {render.text(r.get('reason'))}"
            )
    afterwards = render.items(found.get("afterwards"))
    if afterwards:
        render.out.print("afterwards:")
        for change in afterwards:
            cause = change.get("cause")
            c = cause if isinstance(cause, dict) else {}
            who = render.text(change.get("operator")) or render.text(c.get("actor"))
            why = f': "{render.text(change.get("why"))}"' if change.get("why") else ""
            render.out.print(
                f"  {render.text(change.get('kind'))}: {render.text(change.get('from_state'))} "
                f"-> {render.text(change.get('to_state'))} by {render.text(c.get('kind'))} "
                f"({who}), recorded {_when(c.get('observed_at'))}, rule "
                f"{render.text(c.get('rule'))}{why}"
            )


def _print_run(found: JSONObject) -> None:
    render.out.print(
        f"run {render.text(found.get('id'))}  definition {render.text(found.get('definition'))}"
        f"  {_as_of(found)}"
    )
    columns = _columns(found)
    table = Table(box=None, show_header=True, header_style="bold")
    table.add_column("")
    for title, _ in columns:
        table.add_column(title, overflow="fold")
    for which in ("execution", "publication"):
        table.add_row(which, *(render.state(c.get(f"{which}_state")) for _, c in columns))
        table.add_row("  reason", *(render.text(c.get(f"{which}_reason")) for _, c in columns))
        made = _cause_rows([c.get(f"{which}_made_by") for _, c in columns])
        table.add_row("  made by", *made[0])
        table.add_row("  recorded (UTC)", *made[2])
    render.out.print(table)
    render.out.print(
        f"now: execution {render.text(found.get('execution_state_now'))}, publication "
        f"{render.text(found.get('publication_state_now'))}"
    )
    _print_details(found)
    instances = render.items(found.get("instances"))
    render.out.print(_instances_table(instances, columns))
    for instance in instances:
        if instance.get("late") or instance.get("refused") or instance.get("afterwards"):
            render.out.print(f"{_task(instance)} ({render.text(instance.get('id'))}):")
            _print_details(instance)


def _task(instance: JSONObject) -> str:
    task = render.text(instance.get("task"))
    index = instance.get("map_index")
    return f"{task}[{index}]" if isinstance(index, int) and index >= 0 else task


def _instances_table(instances: list[JSONObject], columns: list[tuple[str, JSONObject]]) -> Table:
    table = Table(title="Instances", title_justify="left")
    table.add_column("TASK")
    keys = [key for key in ("known_then", "known_now") if any(key in i for i in instances)]
    titles = {"known_then": "KNOWN THEN", "known_now": "KNOWN NOW FOR THEN"}
    shown = [
        key for key in keys if columns and any(isinstance(i.get(key), dict) for i in instances)
    ]
    for key in shown:
        table.add_column(titles[key])
        table.add_column("MADE BY, RULE", overflow="fold")
    table.add_column("NOW")
    for instance in instances:
        cells: list[str | Text] = [_task(instance)]
        for key in shown:
            column = instance.get(key)
            c = column if isinstance(column, dict) else {}
            made = c.get("made_by")
            cause = made if isinstance(made, dict) else {}
            mark = " [late]" if cause.get("late") else ""
            cells.append(render.state(c.get("state")))
            cells.append(
                f"{render.text(cause.get('kind'))}, {render.text(cause.get('rule'))}{mark}"
                if cause
                else ""
            )
        cells.append(render.state(instance.get("state_now")))
        table.add_row(*cells)
    return table

"""``veritask durations``: where a run's time went, or a definition's p50/p95, over the API."""

from __future__ import annotations

import click
from rich.table import Table

from veritask.cli import render
from veritask.cli.client import EXIT_USAGE, CliError
from veritask.cli.verbs import JSON_OPTION, api_client
from veritask.core.jsontypes import JSONObject

PHASES = ("dependency_wait", "queue", "execution", "retry_wait")


@click.command("durations")
@click.argument("run_id", required=False)
@click.option("--definition", "name", default=None, help="p50/p95 over this definition's runs.")
@click.option("--runs", type=click.IntRange(1, 500), default=20, show_default=True)
@JSON_OPTION
def durations_command(run_id: str | None, name: str | None, runs: int, as_json: bool) -> None:
    """Time per phase (dependency wait, queue, execution, retry wait) from transition times:
    of each instance of RUN_ID, or p50/p95 per task over --definition NAME's newest runs."""
    if (run_id is None) == (name is None):
        raise CliError(EXIT_USAGE, "give a RUN_ID or --definition NAME (one of them)")
    with api_client() as api:
        if run_id is not None:
            found = api.get(f"/runs/{run_id}/durations")
        else:
            found = api.get(f"/definitions/{name}/durations", {"runs": runs})
    if as_json:
        render.print_json(found)
        return
    render.out.print(_run_table(found) if run_id is not None else _definition_table(found))


def _seconds(value: object) -> str:
    return f"{value:.1f}s" if isinstance(value, int | float) else ""


def _run_table(found: JSONObject) -> Table:
    table = Table(show_header=True, header_style="bold", box=None)
    for column in ("task", "state", *PHASES):
        table.add_column(column)
    for instance in render.items(found.get("instances")):
        seconds = instance.get("seconds")
        spent = seconds if isinstance(seconds, dict) else {}
        table.add_row(
            render.text(instance.get("task_key")),
            render.state(instance.get("state")),
            *(_seconds(spent.get(phase)) for phase in PHASES),
        )
    return table


def _definition_table(found: JSONObject) -> Table:
    table = Table(show_header=True, header_style="bold", box=None)
    table.add_column("task")
    for phase in PHASES:
        table.add_column(f"{phase} p50/p95")
    tasks = found.get("tasks")
    for task, phases in (tasks if isinstance(tasks, dict) else {}).items():
        cells = []
        for phase in PHASES:
            stats = phases.get(phase) if isinstance(phases, dict) else None
            if isinstance(stats, dict):
                cells.append(f"{_seconds(stats.get('p50'))} / {_seconds(stats.get('p95'))}")
            else:
                cells.append("")
        table.add_row(task, *cells)
    return table

"""``veritask alerts``: list, acknowledge and resolve alerts, over the API like the other
everyday verbs."""

from __future__ import annotations

import click
from rich.table import Table

from veritask.cli import render
from veritask.cli.verbs import JSON_OPTION, api_client
from veritask.core.jsontypes import JSONObject

STATUSES = ("open", "acknowledged", "resolved")
CATEGORIES = (
    "queue_quota",
    "scheduler_executor",
    "retry_timing",
    "reconciliation",
    "engine",
    "platform",
    "dependency",
    "deadline",
    "run_failed",
)


@click.group("alerts", invoke_without_command=True)
@click.pass_context
def alerts_group(context: click.Context) -> None:
    """Alerts: `veritask alerts` lists the unresolved ones; `ack` and `resolve` handle one."""
    if context.invoked_subcommand is None:
        context.invoke(list_command)


@alerts_group.command("list")
@click.option("--status", "statuses", multiple=True, type=click.Choice(STATUSES))
@click.option(
    "--category", "categories", multiple=True, type=click.Choice(CATEGORIES), help="Owner category."
)
@click.option("--owner", default=None, help="Only alerts routed to this owner.")
@click.option("--run", "run_id", default=None, help="Only alerts about this run.")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True)
@JSON_OPTION
def list_command(
    statuses: tuple[str, ...],
    categories: tuple[str, ...],
    owner: str | None,
    run_id: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List alerts, newest first (open and acknowledged unless --status says otherwise)."""
    params: dict[str, str | int | list[str]] = {"limit": limit}
    if statuses:
        params["status"] = list(statuses)
    if categories:
        params["category"] = list(categories)
    if owner:
        params["owner"] = owner
    if run_id:
        params["run_id"] = run_id
    with api_client() as api:
        found = render.items(api.get("/alerts", params).get("items"))
    render.listing(found, as_json=as_json, table=_table)


@alerts_group.command("ack")
@click.argument("alert_id", type=click.IntRange(min=1))
@JSON_OPTION
def ack_command(alert_id: int, as_json: bool) -> None:
    """Acknowledge alert ALERT_ID (you take it; it stays unresolved)."""
    _act(alert_id, "acknowledge", as_json)


@alerts_group.command("resolve")
@click.argument("alert_id", type=click.IntRange(min=1))
@JSON_OPTION
def resolve_command(alert_id: int, as_json: bool) -> None:
    """Resolve alert ALERT_ID."""
    _act(alert_id, "resolve", as_json)


def _act(alert_id: int, verb: str, as_json: bool) -> None:
    with api_client() as api:
        answer = api.post(f"/alerts/{alert_id}/{verb}")
    if as_json:
        render.print_json(answer)
        return
    who = answer.get("resolved_by") if verb == "resolve" else answer.get("acknowledged_by")
    render.out.print(f"alert {alert_id}: {answer.get('status')} by {who}")


def _table(found: list[JSONObject]) -> Table:
    table = Table(show_header=True, header_style="bold", box=None)
    for column in ("id", "status", "category", "owner", "opened", "about", "message"):
        table.add_column(column)
    for alert in found:
        about = alert.get("instance_id") or alert.get("run_id") or alert.get("definition")
        table.add_row(
            render.text(alert.get("id")),
            render.text(alert.get("status")),
            render.text(alert.get("category")),
            render.text(alert.get("owner")),
            render.when(alert.get("opened_at")),
            render.text(about),
            render.text(alert.get("message")),
        )
    return table

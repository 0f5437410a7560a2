"""``veritask backfill``, ``backfills`` and ``backfill-cancel`` (docs/cli.md)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import click

from veritask.cli import render
from veritask.cli.client import EXIT_FAILED, ApiClient, CliError
from veritask.cli.verbs import JSON_OPTION, _parameters, api_client
from veritask.core.jsontypes import JSONObject, JSONValue

_FINISHED = ("done", "cancelled")


@click.command("backfill")
@click.argument("name")
@click.option(
    "--from",
    "start",
    required=True,
    help="First logical time (inclusive), ISO 8601; UTC if no zone.",
)
@click.option(
    "--to", "end", required=True, help="End of the range (exclusive), ISO 8601; UTC if no zone."
)
@click.option("--param", "params", multiple=True, metavar="K=V", help="A run parameter.")
@click.option("--max-active", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--existing",
    type=click.Choice(["skip", "failed", "all"]),
    default="skip",
    show_default=True,
    help="An interval with a run: skip it, clear it if it failed, or rerun it.",
)
@click.option("--reason", default=None, help="Why (recorded with the backfill).")
@click.option("--dry-run", is_flag=True, help="Print every interval and what would happen.")
@click.option("--wait", is_flag=True, help="Wait until every run ended; exit 0 if all succeeded.")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Seconds --wait may take."
)
@JSON_OPTION
def backfill_command(
    name: str,
    start: str,
    end: str,
    params: tuple[str, ...],
    max_active: int,
    existing: str,
    reason: str | None,
    dry_run: bool,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Backfill NAME: one run per fire time of its schedule in [--from, --to)."""
    body: JSONObject = {
        "from": _aware(start),
        "to": _aware(end),
        "parameters": _parameters(params),
        "max_active_runs": max_active,
        "existing": existing,
        "dry_run": dry_run,
    }
    if reason:
        body["reason"] = reason
    with api_client() as api:
        answer = api.post(f"/definitions/{name}/backfills", body)
        backfill = _object(answer.get("backfill"))
        if wait and not dry_run:
            backfill = _wait(api, render.text(backfill.get("id")), timeout)
    if as_json:
        render.print_json({"created": answer.get("created"), "backfill": backfill})
    else:
        _print(backfill)
    if wait and not dry_run:
        progress = _object(backfill.get("progress"))
        if progress.get("failed") or progress.get("cancelled"):
            raise SystemExit(EXIT_FAILED)


@click.command("backfills")
@click.argument("name", required=False)
@JSON_OPTION
def backfills_command(name: str | None, as_json: bool) -> None:
    """List backfills (of NAME), newest first."""
    params: dict[str, str | int | list[str]] = {"definition": name} if name else {}
    with api_client() as api:
        found = render.items(api.get("/backfills", params).get("items"))
    if as_json:
        render.print_json({"items": list(found)})
        return
    for item in found:
        progress = _object(item.get("progress"))
        render.out.print(
            f"{item.get('id')}  {item.get('definition')}  [{item.get('from')}, {item.get('to')})"
            f"  {item.get('state')}  {_counts(progress)}"
        )


@click.command("backfill-cancel")
@click.argument("backfill_id")
@click.option("--reason", default="cancelled on request", help="Why (recorded).")
@JSON_OPTION
def backfill_cancel_command(backfill_id: str, reason: str, as_json: bool) -> None:
    """Cancel a backfill: no more runs, and its queued or running runs are cancelled."""
    with api_client() as api:
        found = api.post(f"/backfills/{backfill_id}/cancel", {"reason": reason})
    if as_json:
        render.print_json(found)
        return
    render.out.print(f"{backfill_id}: {found.get('state')}")


def _aware(value: str) -> str:
    """The time as given; a date, or a time without a zone, is in UTC (as ``runs`` reads its
    times): ``2026-01-01`` is its midnight, UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date or time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.isoformat()


def _wait(api: ApiClient, backfill_id: str, timeout: float | None) -> JSONObject:
    give_up = None if timeout is None else time.monotonic() + timeout
    while True:
        found = api.get(f"/backfills/{backfill_id}")
        if found.get("state") in _FINISHED:
            return found
        if give_up is not None and time.monotonic() > give_up:
            raise CliError(EXIT_FAILED, f"backfill {backfill_id} is still {found.get('state')}")
        time.sleep(0.5)


def _print(backfill: JSONObject) -> None:
    ident = backfill.get("id") or "(dry run)"
    render.out.print(
        f"backfill {ident} of {backfill.get('definition')}: [{backfill.get('from')}, "
        f"{backfill.get('to')}) {backfill.get('state')}"
    )
    for raw in render.items(backfill.get("intervals")):
        render.out.print(f"  {raw.get('logical_time')}  {_what(raw)}")
    render.out.print(_counts(_object(backfill.get("progress"))))


def _what(interval: JSONObject) -> str:
    action = interval.get("action")
    existing, state = interval.get("existing_run_id"), interval.get("existing_state")
    if action == "skip":
        return f"skip: exists as {existing} in state {state}"
    if action in ("clear", "rerun"):
        made = f" -> {interval.get('run_id')}" if interval.get("run_id") else ""
        return f"{action}: {existing} ({state}){made}"
    run = interval.get("run_id")
    return f"create -> {run} ({interval.get('run_state')})" if run else "create"


def _counts(progress: JSONObject) -> str:
    keys = ("intervals", "created", "running", "succeeded", "failed", "cancelled", "skipped")
    return ", ".join(f"{key} {progress.get(key, 0)}" for key in keys)


def _object(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}

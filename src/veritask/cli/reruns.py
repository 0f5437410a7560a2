"""``veritask clear`` and ``veritask rerun``: run a finished run's work again (docs/cli.md).

``--wait`` follows the run as ``trigger --wait`` does, with the same exit codes."""

from __future__ import annotations

import click

from veritask.cli import follow, render
from veritask.cli.verbs import JSON_OPTION, _parameters, api_client
from veritask.core.jsontypes import JSONObject

_WAIT = click.option(
    "--wait", is_flag=True, help="Wait until the run is finished; exit 0 on success."
)
_TIMEOUT = click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Seconds --wait may take."
)


@click.command("clear")
@click.argument("run_id")
@click.option("--failed", is_flag=True, help="Clear every instance that ended without success.")
@click.option("--task", "tasks", multiple=True, metavar="KEY", help="Clear this task.")
@click.option("--no-downstream", is_flag=True, help="Leave what runs after them as it is.")
@click.option("--reason", required=True, help="Why (recorded with your name).")
@_WAIT
@_TIMEOUT
@JSON_OPTION
def clear_command(
    run_id: str,
    failed: bool,
    tasks: tuple[str, ...],
    no_downstream: bool,
    reason: str,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Clear instances of RUN_ID: each opens a new attempt in the same run."""
    if failed == bool(tasks):
        raise click.UsageError("give either --failed or --task KEY (one or more)")
    body: JSONObject = {"downstream": not no_downstream, "reason": reason}
    if failed:
        body["failed"] = True
    else:
        body["tasks"] = list(tasks)
    with api_client() as api:
        cleared = api.post(f"/runs/{run_id}/clear", body)
        items = cleared.get("instances")
        names = (
            [render.text(i.get("task")) for i in items if isinstance(i, dict)]
            if isinstance(items, list)
            else []
        )
        line = f"{run_id}: cleared {', '.join(names) or 'nothing'}"
        follow.answer_or_wait(
            api, run_id, cleared, wait=wait, timeout=timeout, as_json=as_json, line=line
        )


@click.command("rerun")
@click.argument("run_id")
@click.option("--param", "params", multiple=True, metavar="K=V", help="Merged over the old run's.")
@click.option("--latest", is_flag=True, help="Run the definition's current version.")
@click.option("--key", default=None, help="Idempotency key: the same key gives the same run.")
@click.option("--reason", default=None, help="Why (recorded with your name).")
@_WAIT
@_TIMEOUT
@JSON_OPTION
def rerun_command(
    run_id: str,
    params: tuple[str, ...],
    latest: bool,
    key: str | None,
    reason: str | None,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Rerun RUN_ID as a new run; prints the new run's id."""
    body: JSONObject = {
        "parameters": _parameters(params),
        "version": "latest" if latest else "same",
    }
    if key:
        body["key"] = key
    if reason:
        body["reason"] = reason
    with api_client() as api:
        created = api.post(f"/runs/{run_id}/rerun", body)
        new_id = render.text(created.get("run_id"))
        follow.answer_or_wait(
            api, new_id, created, wait=wait, timeout=timeout, as_json=as_json, line=new_id
        )

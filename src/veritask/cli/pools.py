"""``veritask pools``, ``veritask pool set`` and ``veritask pool delete`` (docs/cli.md)."""

from __future__ import annotations

import click

from veritask.cli import render
from veritask.cli.verbs import JSON_OPTION, api_client
from veritask.core.jsontypes import JSONObject


@click.command("pools")
@JSON_OPTION
def pools_command(as_json: bool) -> None:
    """List pools: slots, slots in use, tasks waiting."""
    with api_client() as api:
        found = render.items(api.get("/pools").get("items"))
    if as_json:
        render.print_json({"items": list(found)})
        return
    render.out.print(f"{'NAME':<24} {'SLOTS':>9} {'USED':>6} {'WAITING':>8}")
    for pool in found:
        render.out.print(_line(pool))


@click.group("pool")
def pool_group() -> None:
    """Create, resize or delete a pool (admin)."""


@pool_group.command("set")
@click.argument("name")
@click.option("--slots", type=click.IntRange(min=0), required=True, help="The pool's slots.")
@JSON_OPTION
def pool_set_command(name: str, slots: int, as_json: bool) -> None:
    """Create pool NAME, or resize it; takes effect at once (running attempts finish)."""
    with api_client() as api:
        found = api.put(f"/pools/{name}", {"slots": slots})
    if as_json:
        render.print_json(found)
        return
    render.out.print(_line(found))


@pool_group.command("delete")
@click.argument("name")
@JSON_OPTION
def pool_delete_command(name: str, as_json: bool) -> None:
    """Delete pool NAME: running attempts finish; tasks naming it wait until it is set again."""
    with api_client() as api:
        api.delete(f"/pools/{name}")
    if as_json:
        render.print_json({"name": name, "deleted": True})
        return
    render.out.print(f"{name}: deleted")


def _line(pool: JSONObject) -> str:
    slots = pool.get("slots")
    size = "unlimited" if slots is None else str(slots)
    return f"{pool.get('name')!s:<24} {size:>9} {pool.get('used')!s:>6} {pool.get('waiting')!s:>8}"

"""Definitions written in Python on the command line: ``apply -f FILE.py`` / ``apply -m MODULE``
compile a module's pipelines here, before anything is sent, and ``definition NAME --yaml``
prints a stored definition as YAML (docs/python.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from veritask.cli import render
from veritask.cli.client import EXIT_USAGE, CliError


def compiled_sources(path: Path | None, module: str | None) -> list[str]:
    """The YAML text of every pipeline the file or the module declares, in order; a refusal
    exits 2 listing each problem with its Python file and line, and nothing is applied."""
    from veritask.pipelines import compile as pipelines
    from veritask.pipelines.api import PipelineError

    try:
        if module is not None:
            found = pipelines.load_module(module)
        else:
            assert path is not None
            found = pipelines.load_file(path)
    except PipelineError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    return [compiled.source() for compiled in found]


def is_python(path: Path | None) -> bool:
    return path is not None and path.suffix == ".py"


@click.command("definition")
@click.argument("name")
@click.option("--yaml", "as_yaml", is_flag=True, help="Print the stored definition as YAML.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def definition_command(name: str, as_yaml: bool, as_json: bool) -> None:
    """Show definition NAME: its versions, or (--yaml) the current version's definition."""
    from veritask.cli.verbs import api_client

    if as_yaml and as_json:
        raise CliError(EXIT_USAGE, "give --yaml or --json, not both")
    with api_client() as api:
        found = api.get(f"/definitions/{name}")
    if as_json:
        render.print_json(found)
        return
    source = found.get("source")
    if as_yaml:
        if not isinstance(source, str):
            raise CliError(EXIT_USAGE, f"definition {name!r} has no current version")
        click.echo(yaml_text(source), nl=False)
        return
    render.out.print(
        f"{found.get('name')}: version {found.get('current_version')} ({found.get('lifecycle')})"
    )
    for version in render.items(found.get("versions")):
        render.out.print(
            f"  v{version.get('version')}  {version.get('content_hash')}  "
            f"{render.when(version.get('created_at'))}"
        )


def yaml_text(source: str) -> str:
    """A stored source as YAML: YAML as it was applied (comments kept), JSON rewritten."""
    if not source.lstrip().startswith(("{", "[")):
        return source if source.endswith("\n") else source + "\n"
    return yaml.safe_dump(json.loads(source), sort_keys=False, allow_unicode=True, width=100)

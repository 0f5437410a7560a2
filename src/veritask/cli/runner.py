"""``veritask test FILE.py[::NAME]`` / ``-m MODULE[::NAME]``: one run of a Python pipeline on
this machine, on a temporary ledger, with the real scheduler and the local executor; no server
(``veritask.testing``, docs/python.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from veritask.cli import render
from veritask.cli.client import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError
from veritask.cli.verbs import _moment, _parameters


@click.command("test")
@click.argument("target", required=False, metavar="FILE.py[::NAME]")
@click.option("-m", "--module", "module", metavar="MODULE[::NAME]", help="A module to import.")
@click.option("--param", "params", multiple=True, metavar="K=V", help="A run parameter.")
@click.option("--logical-time", "logical_time", metavar="TIME", help="ISO 8601; default: now.")
@click.option("--keep", is_flag=True, help="Keep the temporary VERITASK_HOME and print it.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Seconds before an unfinished run is cancelled (exit 1).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the finished run as JSON.")
def test_command(
    target: str | None,
    module: str | None,
    params: tuple[str, ...],
    logical_time: str | None,
    keep: bool,
    timeout: float,
    as_json: bool,
) -> None:
    """Run one run of a pipeline locally; exit 0 when it succeeds, 1 when it fails."""
    from datetime import datetime

    from veritask import testing
    from veritask.pipelines import compile as pipelines
    from veritask.pipelines.api import PipelineError
    from veritask.services.errors import ServiceError

    if (target is None) == (module is None):
        raise CliError(EXIT_USAGE, "give FILE.py[::NAME] or -m MODULE[::NAME], one of them")
    where, _, name = (target or module or "").partition("::")
    parameters = _parameters(params)
    moment = (
        datetime.fromisoformat(_moment(logical_time, "--logical-time")) if logical_time else None
    )
    try:
        if module is not None:
            found = pipelines.load_module(where)
        else:
            found = pipelines.load_file(Path(where))
    except PipelineError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    chosen = [
        c.pipeline
        for c in found
        if not name or name in (c.pipeline.name, c.pipeline.function.__name__)
    ]
    if len(chosen) != 1:
        names = ", ".join(c.pipeline.name for c in found)
        wanted = f"no pipeline {name!r}" if name else "more than one pipeline"
        raise CliError(EXIT_USAGE, f"{where}: {wanted}; it declares {names}; pick one with ::NAME")
    echo = None if as_json else _print_line
    try:
        result = testing.run(
            chosen[0],
            params=parameters,
            logical_time=moment,
            echo=echo,
            keep=keep,
            timeout=timeout,
        )
    except PipelineError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    except ServiceError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    except testing.RunTimedOut as exc:
        raise CliError(EXIT_FAILED, str(exc)) from None
    if as_json:
        render.print_json(result.to_json())
    elif result.home is not None:
        _print_line(f"kept {result.home}")
    raise SystemExit(EXIT_OK if result.succeeded else EXIT_FAILED)


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

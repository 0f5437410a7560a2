"""The ``veritask`` command, a contract that scripts call (docs/cli.md).

Exit codes: 0 success, 1 the operation failed, 2 bad usage or input, 3 not found, 4 refused
(a conflict or a permission). The everyday verbs talk to the API over HTTP; ``up``,
``server`` and ``scheduler`` start processes; ``db upgrade`` migrates; ``demo`` tells the
story of a lost task.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from veritask.cli import (
    alerts,
    backfills,
    durations,
    explanations,
    operations,
    pipelines,
    pools,
    processes,
    reruns,
    runner,
    verbs,
)
from veritask.cli.client import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def veritask() -> None:
    """A task scheduler whose state you can trust."""


@veritask.group("db")
def db_group() -> None:
    """Database migrations."""


@db_group.command("upgrade")
@click.option(
    "--url", default=None, help="SQLAlchemy URL; default VERITASK_DATABASE_URL or SQLite."
)
def db_upgrade_command(url: str | None) -> None:
    """Migrate the database to the schema this version needs."""
    from veritask.cli import db as db_cli

    raise SystemExit(db_cli.upgrade_command(url))


@veritask.command("demo")
def demo_command() -> None:
    """Drive the core through a story (a task goes LOST) and print its history."""
    from veritask.demo import walkthrough

    raise SystemExit(walkthrough.main())


for command in (
    processes.up_command,
    processes.server_command,
    processes.scheduler_command,
    verbs.apply_command,
    verbs.definitions_command,
    pipelines.definition_command,
    verbs.disable_command,
    verbs.enable_command,
    verbs.delete_command,
    verbs.trigger_command,
    verbs.runs_command,
    verbs.show_command,
    explanations.explain_command,
    verbs.logs_command,
    verbs.cancel_command,
    verbs.override_command,
    reruns.clear_command,
    reruns.rerun_command,
    verbs.watch_command,
    runner.test_command,
    verbs.token_group,
    backfills.backfill_command,
    backfills.backfills_command,
    backfills.backfill_cancel_command,
    pools.pools_command,
    pools.pool_group,
    alerts.alerts_group,
    durations.durations_command,
    operations.verify_command,
    operations.public_key_command,
    operations.doctor_command,
    operations.export_command,
    operations.verify_export_command,
    operations.replay_command,
    operations.purge_command,
):
    veritask.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return its exit code."""
    try:
        veritask.main(args=list(argv) if argv is not None else None, standalone_mode=False)
    except CliError as exc:
        click.echo(f"veritask: {exc.message}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        exc.show()
        return EXIT_USAGE
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code if exc.exit_code != EXIT_OK else EXIT_FAILED
    except click.Abort:
        click.echo("aborted", err=True)
        return EXIT_FAILED
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else 1)
    except KeyboardInterrupt:
        return 130
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

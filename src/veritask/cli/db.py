"""``veritask db upgrade``: migrate the database to the schema this version of Veritask needs.

The main CLI calls ``upgrade_command``; ``python -m veritask.cli.db upgrade [--url URL]`` does
the same without it. Exit codes as in docs/cli.md: 0 done, 1 failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from veritask.core.errors import VeritaskError
from veritask.ledger import dialects, migrate

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def upgrade_command(url: str | None) -> int:
    """Upgrade the database at ``url`` (default: ``VERITASK_DATABASE_URL`` or SQLite in
    ``VERITASK_HOME``) to the newest schema, enroll VERITASK_HOME's purge permit if none is
    yet (``ledger.permits``); print what happened; return the exit code."""
    target = url or dialects.default_database_url()
    shown = dialects.normalize_url(target).render_as_string(hide_password=True)
    try:
        before = migrate.current(target)
        migrate.upgrade(target, permit_home=dialects.default_home())
        after = migrate.current(target)
    except (VeritaskError, ValueError) as exc:
        print(f"veritask db upgrade: {shown}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if before == after:
        print(f"{shown}: already at revision {after}")
    else:
        print(f"{shown}: upgraded from revision {before or 'none'} to {after}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m veritask.cli.db upgrade [--url URL]``."""
    parser = argparse.ArgumentParser(prog="veritask db", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    upgrade = commands.add_parser("upgrade", help="migrate the database to the newest schema")
    upgrade.add_argument("--url", help="SQLAlchemy database URL (default: VERITASK_DATABASE_URL)")
    try:
        arguments = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_OK if exit_.code == 0 else EXIT_USAGE
    if arguments.command == "upgrade":
        return upgrade_command(arguments.url)
    return EXIT_USAGE  # pragma: no cover - argparse refuses unknown commands


if __name__ == "__main__":
    sys.exit(main())

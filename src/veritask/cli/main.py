"""The ``veritask`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="veritask", description="A scheduler you can trust.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="drive the core through a story and print its history")
    commands.add_parser("up", help="start Veritask (today: the demo; the server comes next)")
    db = commands.add_parser("db", help="database migrations")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_commands.add_parser("upgrade", help="migrate the database to the newest schema")
    upgrade.add_argument("--url", help="SQLAlchemy URL; default VERITASK_DATABASE_URL or SQLite")
    args = parser.parse_args(argv)
    if args.command in ("demo", "up"):
        from veritask.demo import walkthrough

        return walkthrough.main()
    if args.command == "db":
        from veritask.cli import db as db_cli

        return db_cli.upgrade_command(args.url)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

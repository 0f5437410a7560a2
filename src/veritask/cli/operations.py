"""The verbs that work on the database directly, like ``db upgrade``: ``verify``, ``doctor``,
``export``, ``replay``, ``purge``. They must work when the API is down.

The database is ``--database-url``, else ``VERITASK_DATABASE_URL``, else the SQLite file in
``VERITASK_HOME``. Exit codes (docs/cli.md): 0 everything held / done, 1 something did
not hold or the operation failed, 2 bad usage or input, 3 not found, 4 refused.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click

from veritask.cli import client, render
from veritask.cli.client import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE, CliError
from veritask.core.errors import VeritaskError
from veritask.core.jsontypes import JSONObject

if TYPE_CHECKING:
    from veritask.services.platform import Platform

DATABASE_OPTION = click.option(
    "--database-url",
    default=None,
    help="SQLAlchemy URL; default VERITASK_DATABASE_URL, else SQLite in VERITASK_HOME.",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _actor() -> str:
    return f"operator:{os.environ.get('USER', 'cli')}"


@contextmanager
def _platform(database_url: str | None, *, migrated: bool = True) -> Iterator[Platform]:
    """The platform over the database, refusing one that is not at this version's schema."""
    from veritask.ledger import dialects
    from veritask.services import health
    from veritask.services.platform import Platform

    url = database_url or dialects.default_database_url()
    missing = dialects.database_file(url)
    if missing is not None and not missing.is_file():
        # Opening would create an empty file (and its folder): a ledger made by a check.
        raise CliError(
            EXIT_NOT_FOUND,
            f"no Veritask database at {missing}: set VERITASK_HOME (or VERITASK_DATABASE_URL, "
            "or --database-url) to the one `veritask up` uses, or create it with "
            "`veritask db upgrade`",
        )
    platform = Platform.open(url, client.home())
    try:
        if migrated:
            ready = health.readiness(platform)
            if not ready.ready:
                raise CliError(EXIT_FAILED, ready.detail)
        yield platform
    except VeritaskError as exc:
        from veritask.services import errors

        match exc:
            case errors.NotFound():
                raise CliError(EXIT_NOT_FOUND, str(exc)) from None
            case errors.Conflict() | errors.Forbidden():
                raise CliError(EXIT_REFUSED, str(exc)) from None
            case errors.InvalidInput():
                raise CliError(EXIT_USAGE, str(exc)) from None
        raise CliError(EXIT_FAILED, str(exc)) from None
    finally:
        platform.close()


def _shown(platform: Platform) -> str:
    """The database a verb opened, as a person reads it (no password)."""
    from veritask.ledger import dialects

    return dialects.shown_url(platform.engine.url)


@click.command("verify")
@DATABASE_OPTION
@click.option(
    "--repair",
    is_flag=True,
    help="Rebuild snapshots (instances', runs', definitions') that differ from their events; "
    "move a finished run to the state its instances imply. Never rewrites an event.",
)
@click.option(
    "--seal",
    is_flag=True,
    help="First seal the chains' heads in a checkpoint signed with this host's key.",
)
@click.option(
    "--public-key",
    "public_keys",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Also trust checkpoints signed by this Ed25519 public key (PEM); repeatable.",
)
@JSON_OPTION
def verify_command(
    database_url: str | None,
    repair: bool,
    seal: bool,
    public_keys: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Check every event's hash chain and every signed checkpoint (naming each subject's
    first broken link); re-fold every instance's events and compare with the stored
    snapshots; follow every run's events and compare with its stored states; check the
    invariants at rest. Exit 0 if everything held (after --repair: holds now), 1 otherwise."""
    from veritask.ledger import errors, signing
    from veritask.services import operations

    try:
        trusted = [signing.load_public_key(path) for path in public_keys]
    except errors.LedgerError as exc:
        raise CliError(EXIT_USAGE, f"--public-key: {exc}") from None
    with _platform(database_url) as platform:
        try:
            report = operations.verify(
                platform, repair=repair, actor=_actor(), public_keys=trusted, seal=seal
            )
        except errors.LedgerError as exc:
            raise CliError(EXIT_FAILED, str(exc)) from None
        database = _shown(platform)
    chains = report.chains
    if as_json:
        render.print_json(
            {
                "database": database,
                "ok": report.ok,
                "instances": report.instances,
                "runs": report.runs,
                "definitions": report.definitions,
                "mismatches": list(report.mismatches),
                "violations": list(report.violations),
                "repaired": report.repaired,
                "chains": {
                    "ok": chains.ok,
                    "events": chains.events,
                    "subjects": chains.subjects,
                    "checkpoints": chains.checkpoints,
                    "broken_links": [link.as_json() for link in chains.breaks],
                    "checkpoint_problems": list(chains.problems),
                    "keys": [signing.key_id(key) for key in sorted(chains.keys)],
                },
            }
        )
    else:
        render.out.print(f"database: {database}")
        for line in (*map(str, chains.breaks), *chains.problems):
            render.out.print(line)
        for line in (*report.mismatches, *report.violations):
            render.out.print(line)
        verdict = "all held" if report.ok else "NOT all held"
        repaired = f"; {report.repaired} repaired" if repair else ""
        render.out.print(
            f"{chains.events} events in {chains.subjects} chains, {chains.checkpoints} signed "
            f"checkpoints, {report.instances} instances and {report.runs} runs verified: "
            f"{verdict}{repaired}"
        )
    raise SystemExit(0 if report.ok else EXIT_FAILED)


@click.command("public-key")
def public_key_command() -> None:
    """Print this host's signing key's public half (PEM), for an auditor's --public-key.
    The key is VERITASK_SIGNING_KEY_FILE, else signing-key.pem in VERITASK_HOME; exit 3 if
    there is none yet (a scheduler makes it at its first start)."""
    from veritask.ledger import errors, signing

    try:
        signer = signing.load_signer(client.home(), create=False)
    except errors.LedgerError as exc:
        raise CliError(EXIT_FAILED, str(exc)) from None
    if signer is None:
        raise CliError(EXIT_NOT_FOUND, f"no signing key at {signing.key_file(client.home())} yet")
    click.echo(signing.public_pem(signer), nl=False)


@click.command("doctor")
@DATABASE_OPTION
@JSON_OPTION
def doctor_command(database_url: str | None, as_json: bool) -> None:
    """Check the database, the schedulers, the executor, workers' clocks and disk space.
    Exit 0 if nothing failed (warnings do not fail), 1 otherwise."""
    from veritask.services import doctor

    with _platform(database_url, migrated=False) as platform:
        checks = doctor.diagnose(platform)
        database = _shown(platform)
    healthy = doctor.healthy(checks)
    if as_json:
        render.print_json(
            {"database": database, "healthy": healthy, "checks": [c.as_json() for c in checks]}
        )
    else:
        render.out.print(f"database: {database}")
        for check in checks:
            render.out.print(f"{check.status.value.upper():4}  {check.name}: {check.detail}")
    raise SystemExit(0 if healthy else EXIT_FAILED)


@click.command("export")
@click.argument("run_id", required=False)
@click.option("--definition", "name", default=None, help="Export every run of this definition.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write to this file instead of stdout.",
)
@click.option(
    "--signed",
    is_flag=True,
    help="Write a signed bundle: the export, the runs' attestations and a manifest signed "
    "with this host's key; check it with `veritask verify-export`.",
)
@DATABASE_OPTION
def export_command(
    run_id: str | None,
    name: str | None,
    output: Path | None,
    signed: bool,
    database_url: str | None,
) -> None:
    """Write a run's (or a definition's) full history as JSON Lines: rows, then every event;
    with --signed, followed by the runs' attestations and a signed manifest."""
    from veritask.ledger import errors
    from veritask.services import operations

    if (run_id is None) == (name is None):
        raise CliError(EXIT_USAGE, "give a RUN_ID or --definition NAME (one of them)")
    with _platform(database_url) as platform:
        if run_id is not None:
            lines = list(operations.export_run(platform, run_id))
        else:
            lines = list(operations.export_definition(platform, str(name)))
        text = "".join(operations.as_json_lines(lines))
        if signed:
            try:
                text = operations.export_signed(platform, lines)
            except errors.LedgerError as exc:
                raise CliError(EXIT_FAILED, str(exc)) from None
    if output is None:
        _write(sys.stdout, text)
    else:
        with output.open("w", encoding="utf-8") as stream:
            _write(stream, text)


def _write(stream: TextIO, text: str) -> None:
    stream.write(text)
    stream.flush()


@click.command("verify-export")
@click.argument("bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--public-key",
    "public_key",
    required=True,
    help="The exporter's Ed25519 public key: a PEM file (as `veritask public-key` prints "
    "it) or its 64 hex digits.",
)
@JSON_OPTION
def verify_export_command(bundle: Path, public_key: str, as_json: bool) -> None:
    """Check a bundle of `veritask export --signed` offline (no database, no server): the
    manifest's signature with the given key, every part's SHA-256, every event chain
    recomputed, every attestation's signature. Names the first thing that does not match.
    Exit 0 if the bundle holds, 1 if it does not, 2 if the file or the key cannot be read."""
    from veritask.ledger import bundles

    key = _public_key(public_key)
    try:
        text = bundle.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(EXIT_USAGE, f"{bundle}: cannot be read ({exc})") from None
    found = bundles.check(text, key)
    if as_json:
        render.print_json({"bundle": str(bundle), **found.as_json()})
    else:
        for finding in found.findings:
            render.out.print(str(finding))
        verdict = "holds" if found.ok else "does NOT hold"
        render.out.print(
            f"{bundle}: {found.events} events in {found.chains} chains, {found.parts} parts, "
            f"{found.attestations} attestations, key {found.key_id}: the bundle {verdict}"
        )
    raise SystemExit(0 if found.ok else EXIT_FAILED)


def _public_key(given: str) -> str:
    """``--public-key``: a PEM file's key, or 64 hex digits; as hex."""
    from veritask.ledger import errors, signing

    text = given.strip()
    if len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    path = Path(given).expanduser()
    if not path.is_file():
        raise CliError(
            EXIT_USAGE, f"--public-key: {given!r} is neither a PEM file nor 64 hex digits"
        )
    try:
        return signing.load_public_key(path)
    except errors.LedgerError as exc:
        raise CliError(EXIT_USAGE, f"--public-key: {exc}") from None


@click.command("replay")
@click.argument(
    "path",
    required=False,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
)
@click.option(
    "--policy",
    default=None,
    metavar="K=V,...",
    help="What-if: replay finished runs under another policy, e.g. "
    "'lease=30s,retries=5,evidence_window=2m,on_unknown=fail'. Reads only.",
)
@click.option(
    "--since",
    default=None,
    metavar="T",
    help="With --policy: runs created at or after T (ISO 8601, UTC without an offset; "
    "or a duration back from now, e.g. 24h).",
)
@click.option("--until", default=None, metavar="T", help="With --policy: runs created before T.")
@click.option("--definition", "name", default=None, help="With --policy: this definition only.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="With --policy: at most this many runs, oldest first (default 1000).",
)
@DATABASE_OPTION
@JSON_OPTION
def replay_command(
    path: Path | None,
    policy: str | None,
    since: str | None,
    until: str | None,
    name: str | None,
    limit: int | None,
    database_url: str | None,
    as_json: bool,
) -> None:
    """Load an export FILE into an empty, migrated database and rebuild every snapshot from
    the events alone (exit 4 if the database is not empty); or, with --policy, estimate what
    would have differed in finished runs under another policy (reads only)."""
    if policy is not None:
        if path is not None:
            raise CliError(EXIT_USAGE, "give an export FILE or --policy, not both")
        _what_if(policy, since, until, name, limit, database_url, as_json)
        return
    if path is None:
        raise CliError(EXIT_USAGE, "give an export FILE (or - for stdin), or --policy")
    for option, value in (("--since", since), ("--until", until), ("--definition", name)):
        if value is not None:
            raise CliError(EXIT_USAGE, f"{option} goes with --policy")
    _load_export(path, database_url, as_json)


def _load_export(path: Path, database_url: str | None, as_json: bool) -> None:
    from veritask.services import operations

    text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    lines: list[JSONObject] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CliError(EXIT_USAGE, f"{path}:{number}: not JSON: {exc.msg}") from None
        if not isinstance(parsed, dict):
            raise CliError(EXIT_USAGE, f"{path}:{number}: expected a JSON object")
        lines.append(parsed)
    with _platform(database_url) as platform:
        try:
            replayed = operations.replay(platform, lines, actor=_actor())
        except (ValueError, KeyError) as exc:
            raise CliError(EXIT_USAGE, f"{path}: not a Veritask export: {exc}") from None
    if as_json:
        render.print_json({"instances": len(replayed)})
    else:
        render.out.print(f"replayed {len(replayed)} instances from {path}")


def _what_if(
    policy: str,
    since: str | None,
    until: str | None,
    name: str | None,
    limit: int | None,
    database_url: str | None,
    as_json: bool,
) -> None:
    from veritask.cli import what_if_view
    from veritask.services import errors, what_if

    try:
        change = what_if.parse_policy(policy)
    except errors.InvalidInput as exc:
        problem = exc.problems[0] if exc.problems else None
        key = problem.field.removeprefix("policy").lstrip(".") if problem else ""
        message = problem.message if problem else str(exc)
        raise CliError(EXIT_USAGE, f"--policy: {key + ': ' if key else ''}{message}") from None
    if since is None:
        raise CliError(EXIT_USAGE, "--since: required with --policy (a time, or e.g. 24h)")
    now = datetime.now(UTC)
    start = what_if_view.moment(since, "--since", now)
    end = None if until is None else what_if_view.moment(until, "--until", now)
    with _platform(database_url) as platform:
        report = what_if.replay(
            platform,
            change,
            since=start,
            until=end,
            definition=name,
            limit=limit or what_if.DEFAULT_LIMIT,
        )
    if as_json:
        render.print_json(report.to_json())
    else:
        what_if_view.print_report(report)


@click.command("purge")
@click.option(
    "--older-than",
    required=True,
    help="Retention period, e.g. 90d: only what ended (or was last touched) before it.",
)
@click.option("--dry-run", is_flag=True, help="Count what would go; remove nothing.")
@click.option(
    "--only",
    type=click.Choice(["history", "logs"]),
    default=None,
    help="Only the deleted definitions' history, or only attempt logs.",
)
@DATABASE_OPTION
@JSON_OPTION
def purge_command(
    older_than: str, dry_run: bool, only: str | None, database_url: str | None, as_json: bool
) -> None:
    """Remove the history of deleted definitions' runs and old attempt logs past a retention
    period; each part is recorded in the operations table."""
    from veritask.definitions.durations import InvalidDuration, parse_duration
    from veritask.services import operations

    try:
        period = parse_duration(older_than)
    except InvalidDuration as exc:
        raise CliError(EXIT_USAGE, f"--older-than: {exc}") from None
    if period.total_seconds() <= 0:
        raise CliError(EXIT_USAGE, "--older-than: must be more than 0")
    with _platform(database_url) as platform:
        report = operations.purge(
            platform,
            older_than=period,
            dry_run=dry_run,
            actor=_actor(),
            history=only in (None, "history"),
            logs=only in (None, "logs"),
        )
    if as_json:
        render.print_json(report.as_json())
        return
    verb = "would remove" if dry_run else "removed"
    render.out.print(
        f"{verb}: {report.runs} runs with {report.events} events "
        f"({report.rejected_events} rejected), {report.log_files} log files "
        f"({report.log_bytes} bytes); cutoff {report.cutoff.isoformat()}"
    )

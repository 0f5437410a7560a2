"""The everyday verbs: each is an HTTP call (or a few) to the API, printed for a person or,
with ``--json``, for a script."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import click

from veritask.cli import follow, pipelines, render
from veritask.cli.client import EXIT_NOT_FOUND, EXIT_USAGE, ApiClient, CliError
from veritask.core.jsontypes import JSONObject, JSONValue

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@contextmanager
def api_client() -> Iterator[ApiClient]:
    client = ApiClient.from_environment()
    try:
        yield client
    finally:
        client.close()


def kind_of(api: ApiClient, ident: str) -> str:
    """``run`` or ``instance``: which one the id names (exit 3 if neither)."""
    if api.exists(f"/runs/{ident}"):
        return "run"
    if api.exists(f"/instances/{ident}"):
        return "instance"
    raise CliError(EXIT_NOT_FOUND, f"no run or instance {ident!r}")


@click.command("apply")
@click.option(
    "-f",
    "--file",
    "path",
    default=None,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    help="The definition (YAML or JSON), or a Python module of pipelines (.py); - reads stdin.",
)
@click.option(
    "-m",
    "--module",
    default=None,
    metavar="MODULE",
    help="A Python module of pipelines, by import path (package.module).",
)
@JSON_OPTION
def apply_command(path: Path | None, module: str | None, as_json: bool) -> None:
    """Apply a definition: a new version if its content changed."""
    if (path is None) == (module is None):
        raise CliError(EXIT_USAGE, "give -f FILE or -m MODULE (one of them)")
    if module is not None or pipelines.is_python(path):
        sources = pipelines.compiled_sources(path, module)
    else:
        assert path is not None
        sources = [sys.stdin.read() if str(path) == "-" else path.read_text()]
    with api_client() as api:
        answers = [api.post("/definitions", {"source": source}) for source in sources]
    for applied in answers:
        for warning in render.items(applied.get("warnings")):
            render.err.print(
                f"warning: {applied.get('name')}: {warning.get('field')}: {warning.get('message')}"
            )
    if as_json:
        render.print_json(answers[0] if len(answers) == 1 else list[JSONValue](answers))
        return
    for applied in answers:
        what = "created" if applied.get("created") else "unchanged"
        render.out.print(f"{applied.get('name')}: version {applied.get('version')} ({what})")


@click.command("definitions")
@JSON_OPTION
def definitions_command(as_json: bool) -> None:
    """List definitions, their schedules in words and next fire times."""
    with api_client() as api:
        found = render.items(api.get("/definitions").get("items"))
    render.listing(found, as_json=as_json, table=render.definitions_table)


@click.command("disable")
@click.argument("name")
@JSON_OPTION
def disable_command(name: str, as_json: bool) -> None:
    """Disable NAME: no schedule, trigger or backfill starts a run; active runs go on."""
    with api_client() as api:
        shown = api.post(f"/definitions/{name}/disable")
    _print_lifecycle(shown, as_json)


@click.command("enable")
@click.argument("name")
@JSON_OPTION
def enable_command(name: str, as_json: bool) -> None:
    """Enable NAME again: its schedule fires and it may be triggered."""
    with api_client() as api:
        shown = api.post(f"/definitions/{name}/enable")
    _print_lifecycle(shown, as_json)


def _print_lifecycle(shown: JSONObject, as_json: bool) -> None:
    if as_json:
        render.print_json(shown)
        return
    render.out.print(f"{shown.get('name')}: {shown.get('lifecycle')}")


@click.command("delete")
@click.argument("name")
@click.option(
    "--purge-now",
    is_flag=True,
    help="Purge the attempts' folders, logs and results as soon as the runs stopped, not "
    "after the retention window (VERITASK_DELETED_RETENTION).",
)
@JSON_OPTION
def delete_command(name: str, purge_now: bool, as_json: bool) -> None:
    """Delete NAME: disable it, cancel its active runs, then soft-delete it (its history stays
    readable); its attempts are purged after the retention window, or with --purge-now."""
    with api_client() as api:
        deletion = api.delete(f"/definitions/{name}", {"purge": "true" if purge_now else "false"})
    if as_json:
        render.print_json(deletion)
        return
    cancelling = deletion.get("cancelling_runs")
    stopping = ""
    if isinstance(cancelling, list) and cancelling:
        stopping = f"; cancelling {len(cancelling)} run(s)"
    purge = "at once" if deletion.get("purge") else "after the retention window"
    render.out.print(f"{name}: {deletion.get('lifecycle')}{stopping}; purge {purge}")


def _parameters(pairs: tuple[str, ...]) -> JSONObject:
    """``k=v`` pairs; a value that reads as JSON (3, true, [1]) is taken as such."""
    parameters: JSONObject = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint="--param")
        try:
            value: JSONValue = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        parameters[key] = value
    return parameters


def _moment(text: str, option: str) -> str:
    """An ISO 8601 date or time as the API takes it: with an offset (UTC when none is written)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO 8601 time (2024-01-31T02:00:00+08:00)", param_hint=option
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


@click.command("trigger")
@click.argument("name")
@click.option("--param", "params", multiple=True, metavar="K=V", help="A run parameter.")
@click.option("--key", default=None, help="Idempotency key: the same key gives the same run.")
@click.option(
    "--logical-time",
    "logical_time",
    default=None,
    metavar="T",
    help="The run's logical time, ISO 8601 (UTC without an offset); default: now.",
)
@click.option("--wait", is_flag=True, help="Wait until the run is finished; exit 0 on success.")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, help="Seconds --wait may take."
)
@JSON_OPTION
def trigger_command(
    name: str,
    params: tuple[str, ...],
    key: str | None,
    logical_time: str | None,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Trigger a run of NAME; prints the run id."""
    body: JSONObject = {"parameters": _parameters(params), "trigger_kind": "manual"}
    if key:
        body["idempotency_key"] = key
    if logical_time is not None:
        body["logical_time"] = _moment(logical_time, "--logical-time")
    with api_client() as api:
        triggered = api.post(f"/definitions/{name}/runs", body)
        run_id = render.text(triggered.get("run_id"))
        follow.answer_or_wait(
            api, run_id, triggered, wait=wait, timeout=timeout, as_json=as_json, line=run_id
        )


@click.command("runs")
@click.argument("name", required=False)
@click.option(
    "--state",
    "--execution-state",
    "states",
    multiple=True,
    help="Only runs in this execution state (repeat for any of several).",
)
@click.option("--publication-state", "publication_states", multiple=True, metavar="STATE")
@click.option(
    "--trigger-kind",
    "trigger_kinds",
    multiple=True,
    metavar="KIND",
    help="Only runs triggered this way: schedule, manual, api, backfill, rerun or published.",
)
@click.option("--logical-from", metavar="TIME", help="Logical time at or after TIME (ISO 8601).")
@click.option("--logical-to", metavar="TIME", help="Logical time before TIME.")
@click.option("--created-from", metavar="TIME", help="Created at or after TIME.")
@click.option("--created-to", metavar="TIME", help="Created before TIME.")
@click.option(
    "-q", "--search", metavar="TEXT", help="Part of the run id, idempotency key or parameters."
)
@click.option("--cursor", metavar="CURSOR", help="The next page (its cursor is on stderr).")
@click.option("--limit", type=click.IntRange(1, 200), default=50, show_default=True)
@JSON_OPTION
def runs_command(
    name: str | None,
    states: tuple[str, ...],
    publication_states: tuple[str, ...],
    trigger_kinds: tuple[str, ...],
    logical_from: str | None,
    logical_to: str | None,
    created_from: str | None,
    created_to: str | None,
    search: str | None,
    cursor: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List runs, newest first (of definition NAME if given), filtered."""
    params: dict[str, str | int | list[str]] = {"limit": limit}
    if name:
        params["definition"] = name
    for key, values in (
        ("execution_state", [s.upper() for s in states]),
        ("publication_state", [s.upper() for s in publication_states]),
        ("trigger_kind", [k.lower() for k in trigger_kinds]),
    ):
        if values:
            params[key] = values
    for key, value in (
        ("logical_from", logical_from),
        ("logical_to", logical_to),
        ("created_from", created_from),
        ("created_to", created_to),
        ("q", search),
        ("cursor", cursor),
    ):
        if value is not None:
            params[key] = value
    with api_client() as api:
        page = api.get("/runs", params)
    render.listing(render.items(page.get("items")), as_json=as_json, table=render.runs_table)
    following = page.get("next_cursor")
    if isinstance(following, str):
        render.err.print(f"more: --cursor {following}")


@click.command("show")
@click.argument("ident", metavar="RUN_OR_INSTANCE")
@JSON_OPTION
def show_command(ident: str, as_json: bool) -> None:
    """Show a run or an instance: states and reasons, attempts, and the history."""
    with api_client() as api:
        kind = kind_of(api, ident)
        if kind == "run":
            shown = follow.read_run(api, ident)
            events = render.items(api.get(f"/runs/{ident}/events", {"limit": 1000}).get("events"))
            shown = {**shown, "object": "run", "events": list[JSONValue](events)}
        else:
            shown = {**api.get(f"/instances/{ident}"), "object": "instance"}
    if as_json:
        render.print_json(shown)
        return
    if kind == "run":
        for line in render.run_header(shown):
            render.out.print(line)
        instances = render.items(shown.get("instances"))
        render.out.print(render.instances_table(instances))
        for instance in instances:
            attempts = render.items(instance.get("attempts"))
            if attempts:
                index = instance.get("map_index")
                task = render.text(instance.get("task"))
                if isinstance(index, int) and index >= 0:
                    task += f"[{index}]"
                render.out.print(render.attempts_table(task, attempts))
    else:
        render.out.print(
            f"instance {shown.get('id')}  task {shown.get('task')}  run {shown.get('run_id')}  "
            f"definition {shown.get('definition')}"
        )
        render.out.print(f"state: {shown.get('state')} — {shown.get('reason')}")
        if shown.get("output") is not None:
            render.out.print(f"output (what flows downstream): {render.output(shown['output'])}")
        render.out.print(
            render.attempts_table(
                render.text(shown.get("task")), render.items(shown.get("attempts"))
            )
        )
    render.out.print(render.history_table(render.items(shown.get("events"))))


@click.command("logs")
@click.argument("ident", metavar="[RUN_OR_INSTANCE]", required=False)
@click.option("--follow", "follow_", is_flag=True, help="Keep printing until the run ends.")
@click.option("--attempt", type=click.IntRange(min=1), default=None, help="Default: the latest.")
@click.option("--search", default=None, help="Only the lines that contain this text.")
@click.option(
    "--definition",
    default=None,
    help="With --search: search every attempt of this definition's recent runs.",
)
@JSON_OPTION
def logs_command(
    ident: str | None,
    follow_: bool,
    attempt: int | None,
    search: str | None,
    definition: str | None,
    as_json: bool,
) -> None:
    """Print the task output of a run's instances or of one instance, or search the logs of a
    run, an instance or a whole definition (--search, with --json for scripts)."""
    if (ident is None) == (definition is None):
        raise CliError(EXIT_USAGE, "give a RUN_OR_INSTANCE or --definition NAME (not both)")
    searching = search is not None and attempt is None and not follow_
    if (definition is not None or as_json) and not searching:
        raise CliError(
            EXIT_USAGE, "--definition and --json go with --search TEXT (not --attempt, --follow)"
        )
    with api_client() as api:
        if searching:
            assert search is not None
            if ident is None:
                assert definition is not None
                scope, name = "definition", definition
            else:
                scope, name = kind_of(api, ident), ident
            _print_matches(api.get("/logs/search", {"text": search, scope: name}), as_json)
            return
        assert ident is not None
        kind = kind_of(api, ident)
        if kind == "run":
            run_id, only = ident, None
        else:
            instance = api.get(f"/instances/{ident}")
            run_id, only = render.text(instance.get("run_id")), ident
        if follow_:
            if attempt is not None or search is not None:
                raise CliError(EXIT_USAGE, "--follow reads every attempt, without --search")
            follow.follow_logs(api, run_id, only)
            return
        instances = render.items(follow.read_run(api, run_id).get("instances"))
        for instance in instances:
            instance_id = render.text(instance.get("id"))
            if only is not None and instance_id != only:
                continue
            if not render.items(instance.get("attempts")):
                continue
            params: dict[str, str | int | list[str]] = {"tail": 1024 * 1024}
            if attempt is not None:
                params["attempt"] = attempt
            if search:
                params["search"] = search
            chunk = api.get(f"/instances/{instance_id}/logs", params)
            render.err.print(
                f"==> {render.text(instance.get('task'))} attempt {chunk.get('attempt_no')} <=="
            )
            sys.stdout.write(render.text(chunk.get("text")))
            sys.stdout.flush()


def _print_matches(found: JSONObject, as_json: bool) -> None:
    if as_json:
        render.print_json(found)
        return
    for match in render.items(found.get("matches")):
        sys.stdout.write(
            f"{render.text(match.get('run_id'))} {render.text(match.get('task'))}"
            f"#{render.text(match.get('attempt_no'))}:{render.text(match.get('line_no'))}: "
            f"{render.text(match.get('line'))}\n"
        )
    sys.stdout.flush()
    if found.get("truncated"):
        render.err.print("(more lines matched than one answer carries: narrow the search)")


@click.command("cancel")
@click.argument("ident", metavar="RUN_OR_INSTANCE")
@click.option("--reason", default="cancelled from the command line", show_default=True)
@JSON_OPTION
def cancel_command(ident: str, reason: str, as_json: bool) -> None:
    """Cancel a run or an instance; the stop is confirmed in the background."""
    with api_client() as api:
        kind = kind_of(api, ident)
        path = f"/runs/{ident}/cancel" if kind == "run" else f"/instances/{ident}/cancel"
        answer = api.post(path, {"reason": reason})
    if as_json:
        render.print_json(answer)
        return
    render.out.print(f"{kind} {ident}: {answer.get('state')}")


@click.command("override")
@click.argument("instance_id")
@click.option(
    "--state",
    "to_state",
    type=click.Choice(["SUCCESS", "FAILED"]),
    required=True,
    help="The state to set.",
)
@click.option(
    "--scope",
    type=click.Choice(["instance", "downstream", "run"]),
    default="instance",
    show_default=True,
    help="This instance, it and its downstream tasks, or the whole run.",
)
@click.option("--reason", required=True, help="Why: kept in the audit trail.")
@JSON_OPTION
def override_command(
    instance_id: str, to_state: str, scope: str, reason: str, as_json: bool
) -> None:
    """Set SUCCESS or FAILED on an instance by hand (an audited operator event)."""
    with api_client() as api:
        answer = api.post(
            f"/instances/{instance_id}/override",
            {"state": to_state, "scope": scope, "reason": reason},
        )
    if as_json:
        render.print_json(answer)
        return
    instances = answer.get("instances")
    count = len(instances) if isinstance(instances, list) else 0
    render.out.print(
        f"{count} instance(s) set to {to_state}; run {answer.get('run_id')} is "
        f"{answer.get('execution_state')}"
    )


@click.command("watch")
@click.argument("run_id", metavar="RUN")
def watch_command(run_id: str) -> None:
    """Show a run's progress live until it is finished (exit 0 if it succeeded)."""
    with api_client() as api:
        run = follow.watch(api, run_id)
    raise SystemExit(follow.exit_code_of(run))


@click.group("token")
def token_group() -> None:
    """API tokens."""


@token_group.command("create")
@click.option(
    "--role",
    type=click.Choice(["viewer", "operator", "admin"]),
    required=True,
    help="What it may do.",
)
@click.option("--name", default="token", show_default=True, help="Who it is for (shown as actor).")
def token_create_command(role: str, name: str) -> None:
    """Create a token; prints it alone on stdout (it is shown only once)."""
    with api_client() as api:
        created = api.post("/tokens", {"role": role, "name": name})
    sys.stdout.write(render.text(created.get("token")) + "\n")
    sys.stdout.flush()


@token_group.command("list")
@JSON_OPTION
def token_list_command(as_json: bool) -> None:
    """List API tokens: id, name, role, created, revoked (never the tokens themselves)."""
    with api_client() as api:
        found = render.items(api.get("/tokens").get("items"))
    render.listing(found, as_json=as_json, table=render.tokens_table)


@token_group.command("revoke")
@click.argument("token_id", metavar="TOKEN_ID")
@JSON_OPTION
def token_revoke_command(token_id: str, as_json: bool) -> None:
    """Revoke a token (by the id `token list` shows); it authenticates nobody from now on."""
    with api_client() as api:
        revoked = api.post(f"/tokens/{token_id}/revoke")
    if as_json:
        render.print_json(revoked)
        return
    render.out.print(f"token {revoked.get('id')} ({revoked.get('name')}) revoked")

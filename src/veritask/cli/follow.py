"""Waiting on runs over the API: ``trigger --wait``, ``watch`` and ``logs --follow`` poll with a
deadline and never hold a request open on the server."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Final

from rich.console import Group
from rich.live import Live

from veritask.cli import render
from veritask.cli.client import EXIT_FAILED, EXIT_OK, ApiClient, CliError
from veritask.core.jsontypes import JSONObject, JSONValue

POLL_SECONDS: Final = 0.5
FINISHED_EXECUTION: Final = frozenset({"SUCCESS", "FAILED", "CANCELLED"})
FINISHED_PUBLICATION: Final = frozenset(
    {"NOT_REQUIRED", "PUBLISHED", "CHECK_FAILED", "PUBLISH_FAILED"}
)


def finished(run: JSONObject) -> bool:
    """Execution is over and, if it succeeded, so is publication (when there is one)."""
    execution = run.get("execution_state")
    if execution not in FINISHED_EXECUTION:
        return False
    return execution != "SUCCESS" or run.get("publication_state") in FINISHED_PUBLICATION


def succeeded(run: JSONObject) -> bool:
    """``--wait`` exits 0 only on execution SUCCESS and, when required, publication PUBLISHED."""
    return run.get("execution_state") == "SUCCESS" and run.get("publication_state") in (
        "NOT_REQUIRED",
        "PUBLISHED",
    )


def exit_code_of(run: JSONObject) -> int:
    return EXIT_OK if succeeded(run) else EXIT_FAILED


def read_run(api: ApiClient, run_id: str) -> JSONObject:
    """The run with every instance: a large run's ``GET /runs/{id}`` holds the first page of
    its instances, and ``instances_next_cursor`` leads through the rest."""
    run = api.get(f"/runs/{run_id}")
    instances: list[JSONValue] = list(render.items(run.get("instances")))
    cursor = run.get("instances_next_cursor")
    while isinstance(cursor, str) and cursor:
        page = api.get(f"/runs/{run_id}/instances", {"cursor": cursor})
        instances.extend(render.items(page.get("items")))
        cursor = page.get("next_cursor")
    return {**run, "instances": instances, "instances_next_cursor": None}


def wait_for_run(
    api: ApiClient,
    run_id: str,
    *,
    timeout: float | None,
    on_change: Callable[[JSONObject], None] | None = None,
) -> JSONObject:
    """Poll the run until it is finished, then read it whole; ``on_change`` sees each new
    state pair. The polls read the run's summary: a run of thousands of instances costs the
    server one row per poll, not the whole document."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last: tuple[object, object] | None = None
    while True:
        run = api.get(f"/runs/{run_id}/summary")
        pair = (run.get("execution_state"), run.get("publication_state"))
        if pair != last and on_change is not None:
            on_change(run)
        last = pair
        if finished(run):
            return read_run(api, run_id)
        if deadline is not None and time.monotonic() >= deadline:
            raise CliError(
                EXIT_FAILED,
                f"run {run_id} is still {pair[0]} (publication {pair[1]}) after {timeout:g}s",
            )
        time.sleep(POLL_SECONDS)


def answer_or_wait(
    api: ApiClient,
    run_id: str,
    answer: JSONObject,
    *,
    wait: bool,
    timeout: float | None,
    as_json: bool,
    line: str,
) -> None:
    """Print what a verb that starts a run answered (``line``, or ``answer`` as JSON); with
    ``wait``, follow the run to its end first, print it, and exit as ``trigger --wait`` does."""
    if not wait:
        if as_json:
            render.print_json(answer)
        else:
            render.out.print(line)
        return

    def report(run: JSONObject) -> None:
        render.err.print(
            f"run {run_id}: {run.get('execution_state')} "
            f"(publication {run.get('publication_state')}) — {run.get('execution_reason')}"
        )

    run = wait_for_run(api, run_id, timeout=timeout, on_change=report)
    if as_json:
        render.print_json(run)
    else:
        render.out.print(line)
    raise SystemExit(exit_code_of(run))


def watch(api: ApiClient, run_id: str) -> JSONObject:
    """Show the run's instances and progress live until it is finished."""

    def view(run: JSONObject) -> Group:
        return Group(
            *render.run_header(run), render.instances_table(render.items(run.get("instances")))
        )

    run = read_run(api, run_id)
    with Live(view(run), console=render.out, refresh_per_second=4, transient=False) as live:
        while not finished(run):
            time.sleep(POLL_SECONDS)
            run = read_run(api, run_id)
            live.update(view(run))
    return run


def follow_logs(api: ApiClient, run_id: str, only_instance: str | None) -> None:
    """Print the logs of the run's instances as they grow, until the run is finished."""
    offsets: dict[tuple[str, int], int] = {}
    current: tuple[str, int] | None = None
    while True:
        run = read_run(api, run_id)
        done = finished(run)
        for instance in render.items(run.get("instances")):
            instance_id = render.text(instance.get("id"))
            if only_instance is not None and instance_id != only_instance:
                continue
            for attempt in render.items(instance.get("attempts")):
                number = attempt.get("attempt_no")
                if not isinstance(number, int):
                    continue
                key = (instance_id, number)
                while True:  # a log larger than one answer takes several
                    chunk = api.get(
                        f"/instances/{instance_id}/logs",
                        {"attempt": number, "offset": offsets.get(key, 0)},
                    )
                    piece = render.text(chunk.get("text"))
                    if piece and key != current:
                        task = render.text(instance.get("task"))
                        render.err.print(f"==> {task} attempt {number} <==")
                        current = key
                    sys.stdout.write(piece)
                    sys.stdout.flush()
                    next_offset = chunk.get("next_offset")
                    if isinstance(next_offset, int):
                        offsets[key] = next_offset
                    if not piece or chunk.get("truncated") is not True:
                        break
        if done:
            return
        time.sleep(POLL_SECONDS)

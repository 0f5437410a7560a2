"""An attempt's last error and its resource use, from real task processes to the API.

A real scheduler and local executor (tests/scheduling/harness.py) run the tasks against the
same database the API server reads, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from rich.console import Console

from tests.integration.conftest import HELLO, Api, completed, open_attempt, report, started
from tests.scheduling.harness import Harness
from veritask.cli import render
from veritask.core.states import RunExecutionState
from veritask.ledger import audit, schema

pytestmark = pytest.mark.slow

FAILING_CALL = """\
def main(table):
    return _load(table)


def _load(table):
    raise ValueError(f"no table named {table}")
"""


@pytest.fixture
def harness(api: Api, database_url: str, tmp_path: Path) -> Iterator[Harness]:
    made = Harness(database_url, tmp_path / "executor")
    try:
        yield made
    finally:
        made.close()


def _attempts(api: Api, run_id: str, task: str) -> list[dict[str, Any]]:
    instance = next(i for i in api.run(run_id)["instances"] if i["task"] == task)
    attempts: list[dict[str, Any]] = instance["attempts"]
    return attempts


def test_a_failing_shell_tasks_stderr_tail_is_its_error_message(api: Api, harness: Harness) -> None:
    harness.apply(
        "name: noisy\ntasks:\n  load:\n"
        "    run: 'for n in $(seq 1 40); do echo \"line $n\" >&2; done; exit 3'\n"
    )
    run_id = harness.trigger("noisy")

    assert harness.finish(run_id)[0] is RunExecutionState.FAILED
    (attempt,) = _attempts(api, run_id, "load")
    assert attempt["exit_code"] == 3
    # The last 20 lines, no more: the end of the output is where a failure says why.
    assert attempt["error_message"] == "\n".join(f"line {n}" for n in range(21, 41))
    assert attempt["cpu_user_seconds"] >= 0 and attempt["cpu_system_seconds"] >= 0
    assert attempt["peak_rss_bytes"] > 0
    instance_id = next(i["id"] for i in api.run(run_id)["instances"] if i["task"] == "load")
    detail = api.http.get(f"/api/v2/instances/{instance_id}").json()
    assert detail["attempts"][0]["error_message"].endswith("line 40")
    # /api/v1 keeps its shape and gains the field.
    v1 = api.http.get(f"/api/v1/runs/{run_id}").json()
    (v1_attempt,) = next(i for i in v1["instances"] if i["task"] == "load")["attempts"]
    assert v1_attempt["error_message"].endswith("line 40")
    assert v1_attempt["exit_code"] == 3


def test_a_succeeding_shell_task_has_no_error_but_its_resource_use(
    api: Api, harness: Harness
) -> None:
    harness.apply("name: quiet\ntasks:\n  load: {run: 'echo fine >&2'}\n")
    run_id = harness.trigger("quiet")

    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    (attempt,) = _attempts(api, run_id, "load")
    assert attempt["error_message"] is None
    assert attempt["cpu_user_seconds"] >= 0
    assert attempt["peak_rss_bytes"] > 0


def test_a_failing_call_tasks_exception_and_frames_are_its_error_message(
    api: Api, harness: Harness, tmp_path: Path
) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "failing_job.py").write_text(FAILING_CALL)
    harness.apply(
        "name: pythonic\ntasks:\n  load:\n    call: failing_job:main\n"
        f"    with: {{table: users}}\n    env: {{PYTHONPATH: '{modules}'}}\n"
    )
    run_id = harness.trigger("pythonic")

    assert harness.finish(run_id)[0] is RunExecutionState.FAILED
    (attempt,) = _attempts(api, run_id, "load")
    message = attempt["error_message"]
    assert message.startswith("Traceback (most recent call last):"), message
    assert 'failing_job.py", line 2, in main' in message
    assert 'failing_job.py", line 6, in _load' in message
    assert message.endswith("ValueError: no table named users")
    assert attempt["peak_rss_bytes"] > 0


def test_a_reported_error_is_bounded_and_the_first_report_keeps_it(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    first = completed(instance_id, attempt_no, token, seq=2, exit_code=1)
    assert isinstance(first["evidence"], dict)
    first["evidence"]["error_message"] = "x" * 10_000 + "the end"
    assert report(api, first, token).status_code == 200
    second = completed(instance_id, attempt_no, token, seq=3, exit_code=1)
    assert isinstance(second["evidence"], dict)
    second["evidence"]["error_message"] = "a different story"
    report(api, second, token)

    (attempt,) = api.http.get(f"/api/v2/instances/{instance_id}").json()["attempts"]
    assert attempt["error_message"] == ("x" * 10_000 + "the end")[-4096:]
    assert attempt["cpu_user_seconds"] is None  # this worker reported none


def test_show_prints_the_cost_and_the_last_error_of_each_attempt(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    event = completed(instance_id, attempt_no, token, seq=2, exit_code=2)
    assert isinstance(event["evidence"], dict)
    event["evidence"].update(
        error_message="psql: error: connection refused",
        cpu_user_seconds=0.004,
        cpu_system_seconds=0.002,
        peak_rss_bytes=3 * 2**20,
    )
    assert report(api, event, token).status_code == 200
    shown = api.http.get(f"/api/v2/instances/{instance_id}").json()

    console = Console(width=200, record=True)
    console.print(render.attempts_table("greet", shown["attempts"]))

    printed = console.export_text()
    assert "cpu 0.00s user 0.00s sys, rss 3.0 MiB" in printed
    assert "Last error of attempt 1:\npsql: error: connection refused" in printed


def test_a_repair_that_rebuilds_the_attempt_rows_keeps_their_reports(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    event = completed(instance_id, attempt_no, token, seq=2, exit_code=1)
    assert isinstance(event["evidence"], dict)
    event["evidence"].update(error_message="it broke", peak_rss_bytes=4096)
    assert report(api, event, token).status_code == 200
    ledger = api.platform.ledger
    with ledger.engine.begin() as connection:
        connection.execute(
            sa.update(schema.task_instances)
            .where(schema.task_instances.c.id == instance_id)
            .values(state="SUCCESS")
        )
    assert not audit.verify(ledger).ok

    assert audit.verify(ledger, repair=True).repaired == 1
    assert audit.verify(ledger).ok

    (attempt,) = api.http.get(f"/api/v2/instances/{instance_id}").json()["attempts"]
    assert (attempt["error_message"], attempt["peak_rss_bytes"]) == ("it broke", 4096)

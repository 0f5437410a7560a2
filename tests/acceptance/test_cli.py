"""The scripting contract of docs/cli.md, with the real CLI and a real ``veritask up``."""

from __future__ import annotations

import json
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import DEFINITIONS, Veritask, eventually

RUN_FIELDS = {"id", "definition", "execution_state", "publication_state"}


def _run(veritask: Veritask, run_id: str) -> Any:
    return veritask.cli_json("show", run_id)


def test_up_loaded_the_examples_and_keeps_url_and_token_in_home(veritask: Veritask) -> None:
    names = {d["name"] for d in veritask.cli_json("definitions")}
    assert {"greeting", "failing", "sleepy"} <= names
    assert veritask.url.startswith("http://127.0.0.1:")
    token_file = veritask.home / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    output = veritask.output()
    assert f"Veritask is up at {veritask.url}" in output
    assert token_file.read_text().strip() in output
    # Whatever does not parse is reported and skipped.
    assert "example broken.yaml skipped: the definition was refused" in output
    assert "broken" not in names


def test_apply_refuses_an_executor_no_engine_has_naming_field_and_line(
    veritask: Veritask, tmp_path: Path
) -> None:
    source = tmp_path / "pods.yaml"
    source.write_text("name: pods\ntasks:\n  x:\n    run: 'true'\n    executor: kubernetes\n")
    refused = veritask.cli("apply", "-f", str(source))
    assert refused.returncode == 2, refused.stderr
    assert "line 5: tasks.x.executor: unknown executor 'kubernetes'" in refused.stderr
    assert veritask.cli("definition", "pods").returncode == 3


def test_apply_then_trigger_wait_succeeds_with_exit_0(veritask: Veritask, tmp_path: Path) -> None:
    source = tmp_path / "echo.yaml"
    source.write_text("name: echoing\ntasks:\n  say:\n    run: echo applied and ran\n")
    applied = veritask.cli("apply", "-f", str(source))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "echoing: version 1 (created)"
    assert (
        veritask.cli("apply", "-f", str(source)).stdout.strip() == "echoing: version 1 (unchanged)"
    )
    done = veritask.cli("trigger", "echoing", "--wait")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    run = _run(veritask, run_id)
    assert run["execution_state"] == "SUCCESS"
    assert run["publication_state"] == "NOT_REQUIRED"


def test_a_failing_run_makes_trigger_wait_exit_1(veritask: Veritask) -> None:
    done = veritask.cli("trigger", "failing", "--wait")
    assert done.returncode == 1, done.stderr
    run = _run(veritask, done.stdout.strip())
    assert run["execution_state"] == "FAILED"
    [instance] = run["instances"]
    assert instance["state"] == "FAILED"
    assert instance["attempts"][0]["exit_code"] == 3


def test_runs_and_show_json_carry_the_fields_of_section_3(veritask: Veritask) -> None:
    done = veritask.cli("trigger", "greeting", "--wait", "--key", "fields")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    listed = veritask.cli_json("runs", "greeting")
    assert run_id in [r["id"] for r in listed]
    assert all(set(r) >= RUN_FIELDS for r in listed)
    run = _run(veritask, run_id)
    assert set(run) >= RUN_FIELDS
    assert run["definition"] == "greeting"
    [instance] = run["instances"]
    assert {"task", "state", "attempts"} <= set(instance)
    assert (instance["task"], instance["state"]) == ("greet", "SUCCESS")
    [attempt] = instance["attempts"]
    assert attempt["state"] == "SUCCESS"
    assert attempt["exit_code"] == 0
    events = run["events"]
    assert [e["kind"] for e in events][:2] == ["run_created", "instance_created"]
    for event in events:
        assert {"actor", "event_time", "observed_at", "evidence", "outcome"} <= set(event)
    shown = veritask.cli_json("show", instance["id"])
    assert shown["object"] == "instance"
    assert shown["state"] == "SUCCESS"
    assert "completed" in [e["kind"] for e in shown["events"]]
    # The same key: the same run.
    again = veritask.cli("trigger", "greeting", "--key", "fields")
    assert again.stdout.strip() == run_id
    # watch ends with the run, and exits as trigger --wait does.
    watched = veritask.cli("watch", run_id)
    assert watched.returncode == 0, watched.stderr
    assert "greet" in watched.stdout
    # A person's view prints the history too.
    table = veritask.cli("show", run_id)
    assert table.returncode == 0
    assert "History" in table.stdout and "run_created" in table.stdout


def test_logs_show_the_task_output(veritask: Veritask) -> None:
    done = veritask.cli("trigger", "greeting", "--wait", "--key", "logs")
    run_id = done.stdout.strip()
    logs = veritask.cli("logs", run_id)
    assert logs.returncode == 0, logs.stderr
    assert "hello from the acceptance test" in logs.stdout
    instance_id = _run(veritask, run_id)["instances"][0]["id"]
    followed = veritask.cli("logs", instance_id, "--follow")
    assert "hello from the acceptance test" in followed.stdout


def test_cancel_a_long_task_shows_cancelling_then_cancelled(veritask: Veritask) -> None:
    triggered = veritask.cli("trigger", "sleepy")
    assert triggered.returncode == 0, triggered.stderr
    run_id = triggered.stdout.strip()

    def running() -> bool:
        [instance] = _run(veritask, run_id)["instances"]
        return bool(instance["state"] == "RUNNING")

    eventually(running, what="the sleep to start")
    cancelled = veritask.cli("cancel", run_id, "--reason", "too slow")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"run {run_id}: CANCELLING"

    def stopped() -> Any:
        run = _run(veritask, run_id)
        return run if run["execution_state"] == "CANCELLED" else None

    run = eventually(stopped, what="the engine to confirm the stop")
    [instance] = run["instances"]
    assert instance["state"] == "CANCELLED"
    assert instance["attempts"][0]["state"] == "CANCELLED"
    kinds = [e["kind"] for e in run["events"]]
    assert kinds.index("cancel_requested") < kinds.index("completed")
    states = [e["to_state"] for e in run["events"] if e["kind"] == "run_state_changed"]
    assert states == ["CANCELLING", "CANCELLED"]
    # Cancelling a finished run is refused: exit 4.
    assert veritask.cli("cancel", run_id).returncode == 4


def test_token_create_prints_the_token_alone_and_roles_hold(veritask: Veritask) -> None:
    created = veritask.cli("token", "create", "--role", "viewer", "--name", "reader")
    assert created.returncode == 0, created.stderr
    assert re.fullmatch(r"vt_[A-Za-z0-9_-]+\n", created.stdout)
    token = created.stdout.strip()
    assert veritask.cli("runs", VERITASK_TOKEN=token).returncode == 0
    run_id = veritask.cli("trigger", "greeting", "--key", "roles").stdout.strip()
    refused = veritask.cli("cancel", run_id, VERITASK_TOKEN=token)
    assert refused.returncode == 4
    assert "viewer" in refused.stderr


def test_token_list_and_revoke(veritask: Veritask) -> None:
    token = veritask.cli("token", "create", "--role", "viewer", "--name", "leaving").stdout.strip()
    listed = veritask.cli("token", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [mine] = [t for t in json.loads(listed.stdout) if t["name"] == "leaving"]
    assert mine["revoked_at"] is None
    assert "leaving" in veritask.cli("token", "list").stdout
    revoked = veritask.cli("token", "revoke", mine["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert veritask.cli("runs", VERITASK_TOKEN=token).returncode == 4
    assert veritask.cli("token", "revoke", "no-such-token").returncode == 3


def test_logs_search_across_a_definition(veritask: Veritask) -> None:
    done = veritask.cli("trigger", "greeting", "--wait", "--key", "searched")
    assert done.returncode == 0, done.stderr
    found = veritask.cli("logs", "--definition", "greeting", "--search", "ACCEPTANCE", "--json")
    assert found.returncode == 0, found.stderr
    matches = json.loads(found.stdout)["matches"]
    assert matches
    assert all("hello from the acceptance test" in m["line"] for m in matches)
    assert done.stdout.strip() in {m["run_id"] for m in matches}
    plain = veritask.cli("logs", "--definition", "greeting", "--search", "acceptance")
    assert "hello from the acceptance test" in plain.stdout
    assert veritask.cli("logs", "--definition", "greeting").returncode == 2


def test_a_wrong_token_exits_4(veritask: Veritask) -> None:
    done = veritask.cli("runs", VERITASK_TOKEN="vt_not-a-real-token")
    assert done.returncode == 4
    assert "unknown or revoked" in done.stderr


def test_unknown_objects_exit_3(veritask: Veritask) -> None:
    for args in (
        ("show", "no-such-run"),
        ("cancel", "no-such-run"),
        ("logs", "no-such-run"),
        ("runs", "no-such-definition"),
        ("trigger", "no-such-definition"),
    ):
        done = veritask.cli(*args)
        assert done.returncode == 3, (args, done.stderr)


def test_bad_input_exits_2(veritask: Veritask, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(DEFINITIONS["broken.yaml"])
    done = veritask.cli("apply", "-f", str(broken))
    assert done.returncode == 2
    assert "line 3" in done.stderr and "invalid YAML" in done.stderr
    assert veritask.cli("apply", "-f", str(tmp_path / "missing.yaml")).returncode == 2
    assert veritask.cli("no-such-verb").returncode == 2
    assert veritask.cli("trigger", "greeting", "--param", "no-equals-sign").returncode == 2
    # A name no task's environment could hold is refused at trigger (422), never queued.
    bad_name = veritask.cli("trigger", "greeting", "--param", "a b=1")
    assert bad_name.returncode == 2, bad_name.stderr
    assert "parameters.a b" in bad_name.stderr and "not a parameter name" in bad_name.stderr


def test_an_override_from_the_cli_is_audited(veritask: Veritask) -> None:
    failed = veritask.cli("trigger", "failing", "--wait", "--key", "override")
    run_id = failed.stdout.strip()
    instance_id = _run(veritask, run_id)["instances"][0]["id"]
    done = veritask.cli(
        "override", instance_id, "--state", "SUCCESS", "--reason", "fixed upstream by hand"
    )
    assert done.returncode == 0, done.stderr
    run = _run(veritask, run_id)
    assert run["execution_state"] == "SUCCESS"
    [override] = [e for e in run["events"] if e["kind"] == "override"]
    assert override["actor"] == "operator:admin"
    assert override["evidence"]["reason"] == "fixed upstream by hand"
    assert run["instances"][0]["attempts"][0]["state"] == "FAILED"  # the fact stays


def test_a_second_scheduler_on_sqlite_refuses_to_start(veritask: Veritask) -> None:
    done = veritask.cli("scheduler", timeout=20)
    assert done.returncode == 4
    assert "another scheduler is running" in done.stderr
    assert "SQLite supports one scheduler" in done.stderr


QUOTING = """\
name: quoting
parameters:
  table: {type: string, default: users}
  rows: {type: integer, default: 10}
tasks:
  say: {run: "printf '<%s>\\\\n' {{ params.table }} {{ params.rows }}"}
"""


def test_a_parameter_reaches_the_real_shell_as_one_word(veritask: Veritask, tmp_path: Path) -> None:
    source = tmp_path / "quoting.yaml"
    source.write_text(QUOTING)
    assert veritask.cli("apply", "-f", str(source)).returncode == 0
    payload = "users; touch pwned; echo"
    done = veritask.cli("trigger", "quoting", "--param", f"table={payload}", "--wait")
    assert done.returncode == 0, done.stderr
    logs = veritask.cli("logs", done.stdout.strip())
    assert f"<{payload}>" in logs.stdout and "<10>" in logs.stdout
    assert not list(veritask.home.rglob("pwned"))


def test_a_parameter_of_the_wrong_type_exits_2_naming_it(
    veritask: Veritask, tmp_path: Path
) -> None:
    source = tmp_path / "quoting.yaml"
    source.write_text(QUOTING)
    assert veritask.cli("apply", "-f", str(source)).returncode == 0
    done = veritask.cli("trigger", "quoting", "--param", "rows=many")
    assert done.returncode == 2
    assert "parameters.rows" in done.stderr and "whole number" in done.stderr


DATED = """\
name: dated
parameters: {table: users}
tasks:
  say: {run: "echo date={{ logical_date }} at={{ logical_time }} table={{ params.table }}"}
"""


def test_a_manual_run_renders_every_template_variable(veritask: Veritask, tmp_path: Path) -> None:
    source = tmp_path / "dated.yaml"
    source.write_text(DATED)
    assert veritask.cli("apply", "-f", str(source)).returncode == 0
    today = datetime.now(UTC).date().isoformat()
    done = veritask.cli("trigger", "dated", "--wait")
    assert done.returncode == 0, done.stderr
    logs = veritask.cli("logs", done.stdout.strip()).stdout
    assert "{{" not in logs
    assert f"date={today}" in logs or f"date={datetime.now(UTC).date().isoformat()}" in logs
    assert "table=users" in logs
    assert _run(veritask, done.stdout.strip())["parameters"] == {"table": "users"}
    given = veritask.cli(
        "trigger", "dated", "--logical-time", "2024-01-31T02:00:00Z", "--param", "table=t", "--wait"
    )
    assert given.returncode == 0, given.stderr
    logs = veritask.cli("logs", given.stdout.strip()).stdout
    assert "date=2024-01-31 at=2024-01-31T02:00:00+00:00 table=t" in logs


def test_a_key_reused_with_other_parameters_exits_4_naming_them(
    veritask: Veritask, tmp_path: Path
) -> None:
    source = tmp_path / "dated.yaml"
    source.write_text(DATED)
    assert veritask.cli("apply", "-f", str(source)).returncode == 0
    first = veritask.cli("trigger", "dated", "--key", "once", "--param", "table=a")
    assert first.returncode == 0, first.stderr
    again = veritask.cli("trigger", "dated", "--key", "once", "--param", "table=a")
    assert again.stdout.strip() == first.stdout.strip()
    other = veritask.cli("trigger", "dated", "--key", "once", "--param", "table=b")
    assert other.returncode == 4
    assert "'once'" in other.stderr and "table differ" in other.stderr

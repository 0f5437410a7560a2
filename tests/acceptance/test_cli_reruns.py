"""``veritask clear`` and ``veritask rerun`` against a real ``veritask up`` (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.conftest import Veritask


def test_clear_wait_reruns_the_fixed_task_in_the_same_run(
    veritask: Veritask, tmp_path: Path
) -> None:
    marker = tmp_path / "fixed"
    source = tmp_path / "fixable.yaml"
    source.write_text(
        "name: fixable\ndefaults: {retry: {max_retries: 0}}\ntasks:\n"
        f"  work:\n    run: test -e {marker}\n"
    )
    assert veritask.cli("apply", "-f", str(source)).returncode == 0
    failed = veritask.cli("trigger", "fixable", "--wait")
    assert failed.returncode == 1, failed.stderr
    run_id = failed.stdout.strip()
    assert veritask.cli("clear", run_id, "--failed").returncode == 2  # --reason is required
    assert veritask.cli("clear", "no-such-run", "--failed", "--reason", "x").returncode == 3
    marker.touch()
    done = veritask.cli("clear", run_id, "--failed", "--reason", "made the file", "--wait")
    assert done.returncode == 0, done.stderr
    run = veritask.cli_json("show", run_id)
    assert run["execution_state"] == "SUCCESS"
    [instance] = run["instances"]
    assert [a["state"] for a in instance["attempts"]] == ["FAILED", "SUCCESS"]


def test_rerun_wait_creates_a_new_linked_run(veritask: Veritask) -> None:
    first = veritask.cli("trigger", "greeting", "--wait")
    assert first.returncode == 0, first.stderr
    old = first.stdout.strip()
    again = veritask.cli("rerun", old, "--reason", "once more", "--wait", "--json")
    assert again.returncode == 0, again.stderr
    new = veritask.cli_json(
        "show", veritask.cli_json("rerun", old, "--reason", "once more")["run_id"]
    )
    assert new["rerun_of"] == old and new["trigger_kind"] == "rerun"
    failing = veritask.cli("trigger", "failing", "--wait").stdout.strip()
    assert veritask.cli("rerun", failing, "--wait").returncode == 1

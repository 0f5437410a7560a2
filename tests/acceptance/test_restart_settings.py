"""A restarted ``up`` with other settings replaces the supervisor an earlier ``up`` left, says
so, and its attempts get the new settings."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.conftest import Veritask, shut_down, start_up, write_definitions


def _color_of_a_new_run(veritask: Veritask) -> str:
    done = veritask.cli("trigger", "color", "--wait")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[0]
    return veritask.cli("logs", run_id).stdout


def test_a_restarted_up_with_other_settings_gives_tasks_the_new_ones(tmp_path: Path) -> None:
    home = tmp_path / "home"
    definitions = write_definitions(tmp_path / "definitions")
    (definitions / "color.yaml").write_text(
        'name: color\ntasks:\n  show:\n    run: echo "color=$DEPLOY_COLOR"\n'
    )
    passthrough = {"VERITASK_TASK_ENV_PASSTHROUGH": "DEPLOY_COLOR"}
    first = start_up(home, definitions, tmp_path / "up1.log", DEPLOY_COLOR="blue", **passthrough)
    try:
        assert "color=blue" in _color_of_a_new_run(first)
        assert first.stop() == 0
    finally:
        if first.process.poll() is None:
            shut_down(first)
    # The supervisor the first `up` started outlives it, with DEPLOY_COLOR=blue.
    second = start_up(home, definitions, tmp_path / "up2.log", DEPLOY_COLOR="green", **passthrough)
    try:
        assert "color=green" in _color_of_a_new_run(second)
        assert "was started with other settings (DEPLOY_COLOR)" in second.output()
    finally:
        shut_down(second)

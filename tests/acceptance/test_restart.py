"""Ctrl-C stops ``veritask up`` cleanly; the next ``up`` recovers the attempt that was running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import (
    Veritask,
    environment,
    eventually,
    shut_down,
    start_up,
    write_definitions,
)


def test_ctrl_c_stops_up_and_the_next_up_recovers_the_running_attempt(tmp_path: Path) -> None:
    home = tmp_path / "home"
    definitions = write_definitions(tmp_path / "definitions")
    (definitions / "slow.yaml").write_text(
        "name: slow\ntasks:\n  wait:\n    run: sleep 3 && echo done waiting\n"
    )
    first = start_up(home, definitions, tmp_path / "up1.log")
    second: Veritask | None = None
    try:
        run_id = first.cli("trigger", "slow").stdout.strip()

        def state(veritask: Veritask) -> Any:
            return veritask.cli_json("show", run_id)["instances"][0]

        eventually(lambda: state(first)["state"] == "RUNNING", what="the task to start")
        assert first.stop() == 0
        assert "Veritask stopped" in first.output()
        # While nobody watches, the attempt goes on under the local executor's supervisor.
        second = start_up(home, definitions, tmp_path / "up2.log")

        def finished() -> Any:
            run = second.cli_json("show", run_id) if second else None
            return run if run and run["execution_state"] == "SUCCESS" else None

        run = eventually(finished, what="the recovered run to succeed")
        [instance] = run["instances"]
        # One attempt, submitted once: recovery did not start the task again.
        assert [a["state"] for a in instance["attempts"]] == ["SUCCESS"]
        logs = second.cli("logs", run_id)
        assert logs.stdout.count("done waiting") == 1
        assert environment(home)["VERITASK_HOME"] == str(home)
    finally:
        if second is not None:
            shut_down(second)
        else:
            shut_down(first)


@pytest.mark.parametrize("signal_name", ["SIGTERM"])
def test_sigterm_stops_up_cleanly_too(tmp_path: Path, signal_name: str) -> None:
    import signal

    veritask = start_up(tmp_path / "home", write_definitions(tmp_path / "d"), tmp_path / "up.log")
    try:
        veritask.process.send_signal(getattr(signal, signal_name))
        assert veritask.process.wait(30) == 0
        assert "Veritask stopped" in veritask.output()
    finally:
        shut_down(veritask)

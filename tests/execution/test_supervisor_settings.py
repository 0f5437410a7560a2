"""A supervisor started with other settings (an earlier ``up`` with another PYTHONPATH, other
secrets) is replaced, with a warning; the attempts it runs carry on and keep their slots."""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution.conftest import Engine, FakePlatform, engine_on, kill_leftovers
from veritask.execution import local, port


def _reporting(engine: Engine, out: Path, *, gate: Path | None = None) -> port.AttemptSpec:
    """A task that writes the pass-through setting and the secret it was given to ``out``."""
    wait = f"while [ ! -e {gate} ]; do sleep 0.02; done; " if gate else ""
    spec = engine.spec(f'{wait}echo "$DEPLOY_COLOR $API_KEY" > {out}')
    return dataclasses.replace(spec, secret_env={"API_KEY": "api_key"})


def test_a_start_with_other_settings_replaces_the_supervisor_and_hands_over_its_attempts(
    tmp_path: Path,
    platform: FakePlatform,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("VERITASK_TASK_ENV_PASSTHROUGH", "DEPLOY_COLOR")
    monkeypatch.setenv("DEPLOY_COLOR", "blue")
    monkeypatch.setenv("VERITASK_SECRET_API_KEY", "old-secret")
    with engine_on(tmp_path, platform, slots=1) as first:
        before = first.workspace / "before"
        assert first.run(_reporting(first, before)).error_category is port.ErrorCategory.NONE
        assert before.read_text() == "blue old-secret\n"
        gate = first.workspace / "gate"
        running = _reporting(first, first.workspace / "running", gate=gate)
        running_id = first.executor.submit(spec=running).external_id
        first.wait_state(running_id, port.EngineState.RUNNING)
        old_pid = first.executor.supervisor_pid()

        # The next start, with a new pass-through value and a rotated secret.
        monkeypatch.setenv("DEPLOY_COLOR", "green")
        monkeypatch.setenv("VERITASK_SECRET_API_KEY", "new-secret")
        second = local.LocalExecutor(
            home=tmp_path / "home", slots=1, idle_exit_after=timedelta(seconds=60)
        )
        try:
            with caplog.at_level(logging.WARNING, logger=local.__name__):
                notice = second.replace_stale_supervisor()

            assert notice is not None
            assert "DEPLOY_COLOR" in notice and "VERITASK_SECRET_API_KEY" in notice
            assert "new-secret" not in notice and "old-secret" not in notice
            assert notice in caplog.text
            new_pid = second.supervisor_pid()
            assert new_pid is not None and new_pid != old_pid
            # Started with these settings, it is not replaced again.
            assert second.replace_stale_supervisor() is None

            # The attempt the old one started runs on and holds the only slot: the next one
            # waits (the status is asked after the submit was handled, queue and all).
            assert (second.supervisor_status() or {}).get("running") == 1
            after = first.workspace / "after"
            queued_id = second.submit(spec=_reporting(first, after)).external_id
            status = second.supervisor_status() or {}
            assert (status.get("queued"), status.get("running")) == (1, 1)
            assert second.describe(external_id=running_id).engine_state is port.EngineState.RUNNING
            assert second.describe(external_id=queued_id).engine_state is port.EngineState.PENDING

            gate.touch()
            engine = Engine(second, platform, first.workspace)
            assert engine.wait_ended(running_id).error_category is port.ErrorCategory.NONE
            assert engine.wait_ended(queued_id).error_category is port.ErrorCategory.NONE
            # The attempt started before keeps what it started with; the new one has the new.
            assert (first.workspace / "running").read_text() == "blue old-secret\n"
            assert after.read_text() == "green new-secret\n"
        finally:
            second.shutdown_supervisor()
            kill_leftovers(second.home)

"""The local executor and its supervisor: idempotence, slots, detachment, recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution.conftest import REPO_ROOT, Engine, FakePlatform, engine_on, wait_until
from veritask.execution import errors, layout, local, port, procfs, records


@pytest.fixture
def two_slots(tmp_path: Path, platform: FakePlatform) -> Iterator[Engine]:
    with engine_on(tmp_path, platform, slots=2) as engine:
        yield engine


def test_slots_bound_how_many_attempts_run_at_once(two_slots: Engine) -> None:
    workspace = two_slots.workspace
    gate = workspace / "gate"
    # Each task counts the tasks running beside it when it starts, then waits for the gate.
    command = (
        f"touch {workspace}/running.$VERITASK_INSTANCE_ID; "
        f"ls {workspace} | grep -c '^running' >> {workspace}/counts; "
        f"while [ ! -e {gate} ]; do sleep 0.02; done; "
        f"rm {workspace}/running.$VERITASK_INSTANCE_ID"
    )
    ids = [two_slots.executor.submit(spec=two_slots.spec(command)).external_id for _ in range(6)]

    def states() -> list[port.EngineState]:
        return [two_slots.executor.describe(external_id=i).engine_state for i in ids]

    wait_until(lambda: states().count(port.EngineState.RUNNING) == 2, what="two running")
    waiting = [two_slots.executor.describe(external_id=i) for i in ids]
    gate.touch()
    ended = [two_slots.wait_ended(i) for i in ids]

    assert [o.engine_state for o in waiting].count(port.EngineState.PENDING) == 4
    positions = {
        o.details["queue_position"] for o in waiting if o.engine_state is port.EngineState.PENDING
    }
    assert positions == {0, 1, 2, 3}
    assert all(o.error_category is port.ErrorCategory.NONE for o in ended)
    counts = [int(line) for line in (workspace / "counts").read_text().split()]
    assert len(counts) == 6 and max(counts) <= 2


def test_attempts_survive_the_death_of_the_process_that_submitted_them(
    tmp_path: Path, platform: FakePlatform
) -> None:
    gate = tmp_path / "gate"
    done = tmp_path / "done"
    home = tmp_path / "home"
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from veritask.execution import local, port
        executor = local.LocalExecutor(home=Path({str(home)!r}), slots=2)
        spec = port.AttemptSpec(
            instance_id="survivor", attempt_no=1, attempt_token="t",
            task=port.ShellCommand("while [ ! -e {gate} ]; do sleep 0.02; done; touch {done}"),
            callback=port.HttpCallback({platform.url!r}),
        )
        print(executor.submit(spec=spec).external_id, flush=True)
        time.sleep(600)
        """
    )
    scheduler = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    executor = local.LocalExecutor(home=home, slots=2)
    try:
        assert scheduler.stdout is not None
        external_id = scheduler.stdout.readline().strip()
        scheduler.stdout.close()
        engine = Engine(executor, platform, tmp_path)
        engine.wait_state(external_id, port.EngineState.RUNNING)

        scheduler.send_signal(signal.SIGKILL)
        scheduler.wait(timeout=10)
        gate.touch()
        ended = engine.wait_ended(external_id)

        assert ended.engine_state is port.EngineState.SUCCEEDED
        assert ended.source is local.Source.EXIT_RECORD
        assert done.exists()
        assert executor.supervisor_pid() is not None  # the supervisor outlived its starter too
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
            scheduler.wait(timeout=10)
        executor.shutdown_supervisor()


def test_a_dead_supervisor_is_replaced_and_finds_what_was_waiting(engine: Engine) -> None:
    first_pid = engine.executor.ensure_supervisor()
    ticks = procfs.start_ticks(first_pid)
    assert ticks is not None
    os.kill(first_pid, signal.SIGKILL)
    wait_until(lambda: not procfs.is_running(first_pid, ticks), what="the supervisor to die")
    assert engine.executor.home.socket.exists()  # stale: nobody listens on it

    observation = engine.run(engine.spec("true"))

    assert observation.error_category is port.ErrorCategory.NONE
    second_pid = engine.executor.supervisor_pid()
    assert second_pid is not None and second_pid != first_pid


def test_an_attempt_left_on_disk_without_a_supervisor_is_found_and_run(engine: Engine) -> None:
    # As if a submitter died between creating the attempt and telling the supervisor.
    engine.executor.ensure_supervisor()
    engine.executor.shutdown_supervisor()
    wait_until(lambda: engine.executor.supervisor_pid() is None, what="the supervisor to leave")
    spec = engine.spec("true")
    attempt = engine.attempt(spec)
    attempt.path.mkdir(parents=True)
    layout.write_json_atomically(attempt.spec, records.encode_spec(spec), durable=False)
    external_id = local.external_id(spec.instance_id, 1)

    waiting = engine.executor.describe(external_id=external_id)
    ended = engine.wait_ended(external_id)

    assert waiting.engine_state is port.EngineState.PENDING
    assert waiting.details["supervisor_running"] is False
    assert waiting.details["supervisor_restarted"] is True
    assert ended.error_category is port.ErrorCategory.NONE


def test_concurrent_starters_start_one_supervisor(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = (
        "import sys; from pathlib import Path; from veritask.execution import local; "
        f"print(local.LocalExecutor(home=Path({str(home)!r}), slots=2).ensure_supervisor())"
    )
    starters = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    pids = {starter.communicate(timeout=30)[0].strip() for starter in starters}
    executor = local.LocalExecutor(home=home, slots=2)
    try:
        assert len(pids) == 1
        assert str(executor.supervisor_pid()) in pids
    finally:
        executor.shutdown_supervisor()


def test_a_cancel_of_an_unknown_attempt_is_refused(engine: Engine) -> None:
    # Describing one is the contract's (tests/execution/contract).
    with pytest.raises(errors.AttemptNotFound):
        engine.executor.cancel(external_id=local.external_id("nobody", 1))


def test_cleanup_forgets_an_ended_attempt_and_refuses_a_running_one(engine: Engine) -> None:
    gate = engine.workspace / "gate"
    running = engine.executor.submit(
        spec=engine.spec(f"while [ ! -e {gate} ]; do sleep 0.02; done")
    )
    ended_spec = engine.spec("true")
    ended = engine.executor.submit(spec=ended_spec)
    engine.wait_ended(ended.external_id)
    engine.wait_state(running.external_id, port.EngineState.RUNNING)

    engine.executor.cleanup(external_id=ended.external_id)
    engine.executor.cleanup(external_id=ended.external_id)  # idempotent
    with pytest.raises(errors.ExecutorError) as refused:
        engine.executor.cleanup(external_id=running.external_id)
    gate.touch()

    gone = engine.executor.describe(external_id=ended.external_id)
    assert gone.engine_state is port.EngineState.NOT_FOUND
    assert not engine.attempt(ended_spec).path.parent.exists()
    assert refused.value.retryable is True
    engine.wait_ended(running.external_id)


def test_external_ids_of_other_engines_are_refused(engine: Engine) -> None:
    with pytest.raises(errors.ExecutorError):
        engine.executor.describe(external_id="k8s:job-1")


def test_attempt_specs_are_checked_when_made() -> None:
    callback = port.HttpCallback("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="instance_id"):
        port.AttemptSpec("../etc", 1, "t", port.ShellCommand("true"), callback)
    with pytest.raises(ValueError, match="attempt_no"):
        port.AttemptSpec("i", 0, "t", port.ShellCommand("true"), callback)
    with pytest.raises(ValueError, match="module:function"):
        port.PythonCallable("no_colon")
    with pytest.raises(ValueError, match="timeout"):
        port.AttemptSpec("i", 1, "t", port.ShellCommand("true"), callback, timeout=timedelta(0))


def test_a_home_too_deep_for_a_socket_address_still_works(
    tmp_path: Path, platform: FakePlatform
) -> None:
    deep = tmp_path / ("d" * 90)  # the socket path exceeds the 108 bytes of sockaddr_un
    deep.mkdir()
    with engine_on(deep, platform, slots=1) as engine:
        assert len(str(engine.executor.home.socket)) > 108
        assert engine.run(engine.spec("true")).error_category is port.ErrorCategory.NONE

"""The container executor against a real Podman: what the contract suite does not cover."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.execution.container import helpers
from tests.scheduling.harness import wait_for
from veritask.execution import engines, errors, port
from veritask.execution.container import engine


def _ended(executor: engine.ContainerExecutor, external_id: str) -> port.Observation:
    def ended() -> port.Observation | None:
        observation = executor.describe(external_id=external_id)
        return observation if observation.ended else None

    return wait_for(ended, what=f"{external_id} to end", timeout=20, interval=0.05)


def test_a_second_submit_adopts_the_one_container_of_the_attempt(
    container_executor: engine.ContainerExecutor, container_host: str
) -> None:
    spec = helpers.spec("echo started; sleep 5")

    first = container_executor.submit(spec=spec)
    again = container_executor.submit(spec=spec)
    containers = helpers.containers_of(container_host, spec.instance_id)
    container_executor.cancel(external_id=first.external_id)
    _ended(container_executor, first.external_id)

    assert (first.created, again.created) == (True, False)
    assert again.external_id == first.external_id
    assert len(containers) == 1
    labels = containers[0]["Labels"]
    assert isinstance(labels, dict)
    assert labels[engine.LABEL_INSTANCE] == spec.instance_id
    assert labels[engine.LABEL_ATTEMPT] == "1"
    assert labels[engine.LABEL_TOKEN] == engine.token_hash(spec.attempt_token)
    assert spec.attempt_token not in str(labels)


def test_the_exit_code_and_the_engines_times_are_the_evidence(
    container_executor: engine.ContainerExecutor,
) -> None:
    spec = helpers.spec("echo out; echo err >&2; sleep 0.3; exit 3")
    before = datetime.now(UTC) - timedelta(seconds=1)

    external_id = container_executor.submit(spec=spec).external_id
    ended = _ended(container_executor, external_id)
    log = container_executor.read_log(instance_id=spec.instance_id, attempt_no=1)

    assert ended.engine_state is port.EngineState.FAILED
    assert ended.error_category is port.ErrorCategory.TASK_ERROR
    assert ended.exit_code == 3 and ended.details["exit_code"] == 3
    assert ended.started_at is not None and ended.ended_at is not None
    assert before <= ended.started_at < ended.ended_at <= datetime.now(UTC) + timedelta(seconds=1)
    assert ended.ended_at - ended.started_at >= timedelta(seconds=0.25)
    assert ended.engine_id  # the engine's container id
    assert log is not None and b"out\n" in log and b"err\n" in log


def test_a_task_that_ignores_sigterm_is_killed_after_the_grace_period(
    container_executor: engine.ContainerExecutor, container_host: str
) -> None:
    spec = helpers.spec("trap '' TERM; echo started; sleep 60", grace=1.0)
    external_id = container_executor.submit(spec=spec).external_id
    wait_for(
        lambda: (
            b"started"
            in (container_executor.read_log(instance_id=spec.instance_id, attempt_no=1) or b"")
        ),
        what="the task to start",
        timeout=20,
        interval=0.05,
    )

    asked = time.monotonic()
    container_executor.cancel(external_id=external_id)
    stopped = _ended(container_executor, external_id)
    took = time.monotonic() - asked
    inspected = helpers.inspect(container_host, spec)

    assert stopped.engine_state is port.EngineState.FAILED
    assert stopped.error_category is port.ErrorCategory.CANCELLED
    assert stopped.details["signal"] == 9  # SIGTERM was ignored: SIGKILL ended it
    assert 0.9 <= took < 10
    assert inspected is not None
    state = inspected["State"]
    assert isinstance(state, dict) and state["Running"] is False


def test_secrets_reach_the_task_as_environment_and_nowhere_else(
    container_host: str, tmp_path: Path
) -> None:
    class Vault:
        def lookup(self, *, name: str) -> str | None:
            return "s3cr3t-value" if name == "db-password" else None

        def describe(self) -> str:
            return "a test vault"

    executor = engine.ContainerExecutor(host=container_host, secret_providers=[Vault()])
    base = helpers.spec('echo "password=$DB_PASSWORD"')
    spec = port.AttemptSpec(
        instance_id=base.instance_id,
        attempt_no=1,
        attempt_token=base.attempt_token,
        task=base.task,
        callback=base.callback,
        secret_env={"DB_PASSWORD": "db-password"},
    )
    try:
        external_id = executor.submit(spec=spec).external_id
        _ended(executor, external_id)
        log = executor.read_log(instance_id=spec.instance_id, attempt_no=1)
        labels = helpers.containers_of(container_host, spec.instance_id)[0]["Labels"]
    finally:
        executor.close()

    assert log == b"password=s3cr3t-value\n"
    assert "s3cr3t-value" not in str(labels)


def test_the_log_is_kept_when_cleanup_removes_the_container(
    container_executor: engine.ContainerExecutor,
) -> None:
    spec = helpers.spec("echo kept")
    external_id = container_executor.submit(spec=spec).external_id
    _ended(container_executor, external_id)

    container_executor.cleanup(external_id=external_id)

    gone = container_executor.describe(external_id=external_id)
    assert gone.engine_state is port.EngineState.NOT_FOUND
    assert container_executor.read_log(instance_id=spec.instance_id, attempt_no=1) == b"kept\n"


def test_an_image_absent_with_pull_never_is_refused_for_good(
    container_executor: engine.ContainerExecutor,
) -> None:
    base = helpers.spec("true")
    spec = port.AttemptSpec(
        instance_id=base.instance_id,
        attempt_no=1,
        attempt_token=base.attempt_token,
        task=port.ContainerRun(
            image="veritask-no-such-image", command=("true",), pull=port.Pull.NEVER
        ),
        callback=base.callback,
    )

    with pytest.raises(errors.ExecutorError) as refused:
        container_executor.submit(spec=spec)

    assert "pull: never" in str(refused.value)
    assert refused.value.retryable is False


def test_the_platform_reads_a_containers_log_through_the_engine_registry(
    container_executor: engine.ContainerExecutor, container_host: str
) -> None:
    spec = helpers.spec("echo from the box")
    _ended(container_executor, container_executor.submit(spec=spec).external_id)
    environ = {"VERITASK_CONTAINER_HOST": container_host}

    found = engines.read_log("container", environ, instance_id=spec.instance_id, attempt_no=1)
    absent = engines.read_log("container", environ, instance_id="never-ran", attempt_no=1)

    assert (found, absent) == (b"from the box\n", None)


def test_a_restarted_scheduler_finds_the_container_by_its_name_and_stops_it(
    container_executor: engine.ContainerExecutor, container_host: str
) -> None:
    spec = helpers.spec("echo started; sleep 60")
    first = container_executor.submit(spec=spec)
    restarted = engine.ContainerExecutor(host=container_host)
    try:
        again = restarted.submit(spec=spec)
        running = restarted.describe(external_id=first.external_id)
        restarted.cancel(external_id=first.external_id)
        stopped = _ended(restarted, first.external_id)
    finally:
        restarted.close()

    assert (first.created, again) == (True, port.Submission(first.external_id, created=False))
    assert running.engine_state in (port.EngineState.PENDING, port.EngineState.RUNNING)
    assert stopped.error_category is port.ErrorCategory.CANCELLED
    assert len(helpers.containers_of(container_host, spec.instance_id)) == 1


def test_a_container_made_and_never_started_is_started_by_the_next_submit(
    container_host: str,
) -> None:
    spec = helpers.spec("echo started")
    name = engine.container_name(spec.instance_id, spec.attempt_no)
    skew = [timedelta(0)]
    executor = engine.ContainerExecutor(
        host=container_host,
        unstarted_after=timedelta(seconds=10),
        clock=lambda: datetime.now(UTC) + skew[0],
    )
    try:
        # What a scheduler killed between making the container and starting it leaves.
        assert isinstance(spec.task, port.ContainerRun)
        made = executor.client.call(
            "POST",
            "/containers/create",
            params={"name": name},
            body=executor._body(spec, spec.task),
        )
        assert made.status == 201
        too_soon = executor.submit(spec=spec)
        unstarted = executor.describe(external_id=too_soon.external_id)
        skew[0] = timedelta(seconds=11)  # past unstarted_after: the maker is taken for dead
        later = executor.submit(spec=spec)
        ended = _ended(executor, later.external_id)
        log = executor.read_log(instance_id=spec.instance_id, attempt_no=1)
    finally:
        executor.close()

    assert (too_soon.created, later.created) == (False, False)
    assert unstarted.engine_state is port.EngineState.PENDING
    assert ended.engine_state is port.EngineState.SUCCEEDED
    assert log == b"started\n"


_HOG = 'x=$(head -c 100000000 /dev/zero | tr "\\0" x); echo survived'


def test_a_container_past_its_memory_limit_ends_out_of_memory(
    container_executor: engine.ContainerExecutor,
) -> None:
    spec = helpers.spec(_HOG, memory=16 * 1024 * 1024)

    external_id = container_executor.submit(spec=spec).external_id
    observation = _ended(container_executor, external_id)

    assert observation.engine_state is port.EngineState.FAILED
    assert observation.error_category is port.ErrorCategory.OUT_OF_MEMORY
    assert observation.details["signal"] == 9
    # Docker says OOMKilled; Podman 4 only shows the SIGKILL, and its event log shows that
    # nobody asked for it: either is the evidence.
    assert observation.details["oom_killed"] is True or "oom_inferred" in observation.details


def test_a_kill_asked_of_the_engine_under_a_memory_limit_is_no_oom(
    container_executor: engine.ContainerExecutor,
) -> None:
    spec = helpers.spec("sleep 30", memory=16 * 1024 * 1024)
    external_id = container_executor.submit(spec=spec).external_id
    name = engine.container_name(spec.instance_id, 1)
    wait_for(
        lambda: container_executor.describe(external_id=external_id).started_at,
        what="the container to start",
    )

    subprocess.run(["podman", "kill", "--signal", "KILL", name], check=True, timeout=30)
    observation = _ended(container_executor, external_id)

    assert observation.error_category is port.ErrorCategory.KILLED
    assert observation.details["killed_by"] == "a kill or stop asked of the engine"


def test_the_output_reaches_the_kept_log_while_the_container_runs(
    container_executor: engine.ContainerExecutor, tmp_path: Path
) -> None:
    spec = helpers.spec("echo first; sleep 30")
    external_id = container_executor.submit(spec=spec).external_id
    kept = tmp_path / "container-logs" / f"{engine.container_name(spec.instance_id, 1)}.log"

    wait_for(
        lambda: kept.exists() and kept.read_bytes() == b"first\n",
        what="the output to be followed into the kept log",
    )
    container_executor.cancel(external_id=external_id)
    _ended(container_executor, external_id)


def test_a_container_gets_no_platform_setting_and_nothing_of_the_host(
    container_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = {
        "VERITASK_DATABASE_URL": "postgresql://veritask:db-pass-81f0@db/veritask",
        "VERITASK_SECRET": "signing-key-03aa",
        "VERITASK_TOKEN": "admin-token-5d5e",
        "VERITASK_SECRET_UNDECLARED": "undeclared-value-77c1",
    }
    for name, value in platform.items():
        monkeypatch.setenv(name, value)
    executor = engine.ContainerExecutor(host=container_host)
    spec = helpers.spec("env", env={"DECLARED": "yes", "VERITASK_RUN_ID": "run-1"})
    try:
        external_id = executor.submit(spec=spec).external_id
        assert _ended(executor, external_id).engine_state is port.EngineState.SUCCEEDED
        log = executor.read_log(instance_id=spec.instance_id, attempt_no=1) or b""
        inspected = helpers.inspect(container_host, spec)
    finally:
        executor.close()

    assert b"DECLARED=yes" in log and b"VERITASK_RUN_ID=run-1" in log
    for value in (*platform, *platform.values(), spec.attempt_token):
        assert value.encode() not in log, value
    assert inspected is not None
    assert not inspected.get("Mounts"), inspected.get("Mounts")
    host_config = inspected.get("HostConfig")
    assert isinstance(host_config, dict) and not host_config.get("Binds")

"""What a container mounts, against a real Podman: secret files on a tmpfs of the scheduler's
host (the value nowhere in the engine's inspection), and volumes under the allow-list only."""

from __future__ import annotations

import functools
import logging
import subprocess
from pathlib import Path

import pytest

from tests.execution.container import helpers
from tests.scheduling.harness import wait_for
from veritask.definitions import parse
from veritask.definitions.errors import DefinitionError
from veritask.execution import engines, errors, port
from veritask.execution.container import engine, registration

SECRET = "s3cr3t-value"


class _Vault:
    def lookup(self, *, name: str) -> str | None:
        return SECRET if name == "db_password" else None

    def describe(self) -> str:
        return "a test vault"


def _with(
    base: port.AttemptSpec,
    *,
    volumes: tuple[port.Mount, ...] = (),
    secret_files: dict[str, str] | None = None,
) -> port.AttemptSpec:
    assert isinstance(base.task, port.ContainerRun)
    task = port.ContainerRun(
        image=base.task.image,
        command=base.task.command,
        pull=port.Pull.NEVER,
        volumes=volumes,
        secret_files=secret_files or {},
    )
    return port.AttemptSpec(
        instance_id=base.instance_id,
        attempt_no=1,
        attempt_token=base.attempt_token,
        task=task,
        callback=base.callback,
    )


def _ended(executor: engine.ContainerExecutor, external_id: str) -> port.Observation:
    def ended() -> port.Observation | None:
        observation = executor.describe(external_id=external_id)
        return observation if observation.ended else None

    return wait_for(ended, what=f"{external_id} to end", timeout=20, interval=0.05)


def test_a_secret_file_is_read_by_the_task_and_shown_nowhere(
    container_host: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret_dir = tmp_path / "secrets"
    executor = engine.ContainerExecutor(
        host=container_host, secret_providers=[_Vault()], secret_dir=secret_dir
    )
    # The task shows the value changed (upper case), so that the log proves it read it.
    spec = _with(
        helpers.spec("tr a-z A-Z < /run/secrets/password; echo; ls -ln /run/secrets"),
        secret_files={"password": "db_password"},
    )
    name = engine.container_name(spec.instance_id, 1)
    try:
        external_id = executor.submit(spec=spec).external_id
        ended = _ended(executor, external_id)
        executor.wait_for_watchers(10)
        log = executor.read_log(instance_id=spec.instance_id, attempt_no=1) or b""
        inspected = subprocess.run(
            ["podman", "inspect", name], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        listed = helpers.containers_of(container_host, spec.instance_id)
    finally:
        executor.close()

    assert ended.engine_state is port.EngineState.SUCCEEDED
    assert log.startswith(SECRET.upper().encode() + b"\n")
    assert b"-r--r--r--" in log  # readable by whichever user the image runs as
    assert "/run/secrets" in inspected  # the mount is shown, what it holds is not
    assert SECRET not in inspected
    assert SECRET not in str(listed)
    assert all(SECRET not in record.getMessage() for record in caplog.records)
    assert not (secret_dir / name).exists(), "the files are removed once the container ended"
    assert (secret_dir.stat().st_mode & 0o777) == 0o700


def test_an_unknown_secret_file_refuses_the_attempt_for_good(
    container_executor: engine.ContainerExecutor,
) -> None:
    spec = _with(helpers.spec("true"), secret_files={"password": "nobody_holds_it"})

    with pytest.raises(errors.ExecutorError) as refused:
        container_executor.submit(spec=spec)

    assert "nobody_holds_it" in str(refused.value) and refused.value.retryable is False
    assert helpers.containers_of(container_executor.client.host, spec.instance_id) == []


def test_a_volume_under_the_allow_list_is_mounted_and_one_outside_is_refused(
    container_host: str, tmp_path: Path
) -> None:
    allowed = tmp_path / "shared"
    (allowed / "in").mkdir(parents=True)
    (allowed / "in" / "data.txt").write_text("from the host\n")
    (tmp_path / "elsewhere").mkdir()
    escape = allowed / "escape"
    escape.symlink_to(tmp_path / "elsewhere")
    executor = engine.ContainerExecutor(host=container_host, allowed_volumes=[str(allowed)])
    mounted = _with(
        helpers.spec("cat /data/data.txt; echo x > /data/new || echo read-only"),
        volumes=(port.Mount(str(allowed / "in"), "/data", read_only=True),),
    )
    outside = _with(helpers.spec("true"), volumes=(port.Mount(str(tmp_path), "/data"),))
    through_a_link = _with(helpers.spec("true"), volumes=(port.Mount(str(escape), "/data"),))
    try:
        _ended(executor, executor.submit(spec=mounted).external_id)
        log = executor.read_log(instance_id=mounted.instance_id, attempt_no=1) or b""
        refusals = []
        for spec in (outside, through_a_link):
            with pytest.raises(errors.ExecutorError) as refused:
                executor.submit(spec=spec)
            refusals.append(refused.value)
    finally:
        executor.close()

    assert log.startswith(b"from the host\n") and b"read-only" in log
    assert not (allowed / "in" / "new").exists()
    assert [r.retryable for r in refusals] == [False, False]
    assert registration.VOLUMES_ENV in str(refusals[0]) and str(tmp_path) in str(refusals[0])


_DEFINITION = """
name: mounts
tasks:
  load:
    image: busybox
    run: cat /data/x
    volumes:
      - /srv/data:/data:ro
      - /etc:/host-etc
"""


def test_a_volume_outside_the_allow_list_is_refused_at_apply_naming_field_and_line() -> None:
    allowed = {registration.VOLUMES_ENV: "/srv/data, /var/share"}
    check = functools.partial(engines.volume_problem, environ=allowed)

    with pytest.raises(DefinitionError) as refused:
        parse.parse_definition(_DEFINITION, volumes=check)
    with pytest.raises(DefinitionError) as none_allowed:
        parse.parse_definition(
            _DEFINITION, volumes=functools.partial(engines.volume_problem, environ={})
        )
    parsed = parse.parse_definition(_DEFINITION.replace("/etc:", "/var/share/etc:"), volumes=check)

    [problem] = refused.value.problems
    assert (problem.field, problem.line) == ("tasks.load.volumes[1]", 9)
    assert "'/etc'" in problem.message and registration.VOLUMES_ENV in problem.message
    assert [p.field for p in none_allowed.value.problems] == [
        "tasks.load.volumes[0]",
        "tasks.load.volumes[1]",
    ]
    container = parsed.tasks["load"].container
    assert container is not None
    assert [str(v) for v in container.volumes] == ["/srv/data:/data:ro", "/var/share/etc:/host-etc"]


@pytest.mark.parametrize(
    ("written", "field"),
    [
        ("volumes: [data:/data]", "tasks.t.volumes[0]"),
        ("volumes: ['/a/../etc:/data']", "tasks.t.volumes[0]"),
        ("volumes: ['/a:/b:rx']", "tasks.t.volumes[0]"),
        ("secret_files: {../x: pw}", "tasks.t.secret_files.../x"),
        ("secret_files: {x: 'not a name'}", "tasks.t.secret_files.x"),
    ],
)
def test_bad_volumes_and_secret_files_name_their_field(written: str, field: str) -> None:
    text = f"name: bad\ntasks:\n  t:\n    image: busybox\n    run: 'true'\n    {written}\n"

    with pytest.raises(DefinitionError) as refused:
        parse.parse_definition(text)

    assert [(p.field, p.line) for p in refused.value.problems] == [(field, 6)]

"""A local task cannot reach the platform: run as another user, it reads no secret of the
platform (not the supervisor's environment, not the platform's, not the admin token, the key
tokens are minted from or the database) and writes nowhere but in its own attempt, while it
still runs, writes its working directory, reports progress and output and succeeds.

These run as root (the only user that can start tasks as another): they are skipped otherwise.
Every other test runs tasks as the user who runs the tests (``tests/conftest.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution.conftest import REPO_ROOT, Engine, FakePlatform, kill_leftovers
from veritask.core import jsontypes
from veritask.execution import local, port, task_process, task_user

#: Values the platform's process holds that no task may see.
DATABASE_PASSWORD = "db-password-5f2c"
SIGNING_KEY = "signing-key-9b1e"
ADMIN_TOKEN = "admin-token-77aa"
API_KEY = "task-api-key-3c4d"
PLATFORM_ENV = {
    "VERITASK_DATABASE_URL": f"postgresql://veritask:{DATABASE_PASSWORD}@db/veritask",
    "VERITASK_SECRET": SIGNING_KEY,
    "VERITASK_TOKEN": ADMIN_TOKEN,
    "VERITASK_SECRET_API_KEY": API_KEY,
    task_user.SETTING: "nobody",
}


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or _nobody() is None,
    reason="only root can start tasks as another user (and this machine needs 'nobody')",
)


@dataclasses.dataclass
class Isolated:
    engine: Engine
    home: Path
    #: An attempt that ran before: no other task may write in it.
    other: Path


@pytest.fixture(scope="module")
def isolated() -> Iterator[Isolated]:
    if os.geteuid() != 0 or _nobody() is None:
        pytest.skip("only root can start tasks as another user")
    # Below /tmp, not pytest's tmp_path: a root's tmp_path is private to root all the way up.
    top = Path(tempfile.mkdtemp(prefix="veritask-isolation-"))
    top.chmod(0o711)
    home = top / "home"
    platform = FakePlatform()
    platform.start()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in PLATFORM_ENV.items():
            patch.setenv(name, value)
        task_user.secure_home(home, os.environ)
        # What `veritask up` keeps there: the admin token, the signing key, the database.
        for name, text in (("token", ADMIN_TOKEN), ("secret", SIGNING_KEY), ("veritask.db", "")):
            (home / name).write_text(text)
            (home / name).chmod(0o600)
        executor = local.LocalExecutor(home=home, slots=2, idle_exit_after=timedelta(seconds=60))
        engine = Engine(executor, platform, top)
        try:
            first = dataclasses.replace(engine.spec("true"), workdir=None)
            assert engine.run(first).engine_state is port.EngineState.SUCCEEDED
            yield Isolated(engine, home, engine.attempt(first).path)
        finally:
            executor.shutdown_supervisor()
            kill_leftovers(executor.home)
            platform.stop()
            shutil.rmtree(top, ignore_errors=True)


def _as_task_user(entry: pwd.struct_passwd) -> task_user.TaskUser:
    return task_user.TaskUser(
        name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, groups=(), home=entry.pw_dir
    )


def _forbidden(isolated: Isolated) -> tuple[list[str], list[str]]:
    """What a task tries to read, then to write, and must not."""
    supervisor_pid = isolated.engine.executor.supervisor_pid()
    home = isolated.home
    reads = [
        f"/proc/{supervisor_pid}/environ",
        f"/proc/{os.getpid()}/environ",  # the platform's own process (here: the tests')
        str(home / "token"),
        str(home / "secret"),
        str(home / "veritask.db"),
        str(isolated.other / "spec.json"),
    ]
    writes = [
        str(home / "planted"),
        str(home / "executor" / "planted"),
        str(isolated.other / "planted"),
        str(isolated.other / "work" / "planted"),
    ]
    return reads, writes


@needs_root
def test_a_shell_task_runs_as_the_task_user_and_reaches_nothing_of_the_platform(
    isolated: Isolated,
) -> None:
    engine = isolated.engine
    reads, writes = _forbidden(isolated)
    checks = [f'cat "{path}" >/dev/null 2>&1 && echo "REACHED {path}"' for path in reads]
    checks += [f'echo x 2>/dev/null > "{path}" && echo "REACHED {path}"' for path in writes]
    # What task_api.report_progress writes (a Python the task user can run is not a given).
    report = (
        'printf \'{"kind":"progress","phase":"probing","done":1,"total":1}\\n\''
        ' > "$VERITASK_CHANNEL"'
    )
    script = "; ".join(
        [
            *checks,
            "echo hello > mine.txt",
            report,
            'printf \'{"uid": %s, "home": "%s", "key": %s}\' "$(id -u)" "$HOME" "${#API_KEY}"'
            ' > "$VERITASK_OUTPUT"',
        ]
    )
    spec = dataclasses.replace(engine.spec(script), workdir=None, secret_env={"API_KEY": "api_key"})

    observation = engine.run(spec)

    attempt = engine.attempt(spec)
    log = attempt.log.read_text() if attempt.log.exists() else ""
    assert "REACHED" not in log, log
    assert observation.engine_state is port.EngineState.SUCCEEDED, log
    nobody = _nobody()
    assert nobody is not None
    output = engine.wait_delivered(spec)["evidence"]
    assert isinstance(output, dict)
    assert output["output"] == {"uid": nobody.pw_uid, "home": nobody.pw_dir, "key": len(API_KEY)}
    assert (attempt.work / "mine.txt").read_text() == "hello\n"
    assert "progress" in engine.platform.kinds_of(spec.instance_id), log
    for path in writes:
        assert not Path(path).exists(), path
    # Handed back at the end: no other task of its user may change what it left.
    assert attempt.work.stat().st_uid == os.geteuid()


@needs_root
def test_a_callable_runs_as_the_task_user_in_a_fresh_interpreter(isolated: Isolated) -> None:
    nobody = _nobody()
    assert nobody is not None
    problem = task_user.python_problem(Path(sys.executable), _as_task_user(nobody))
    if problem is not None:
        pytest.skip(problem)
    engine = isolated.engine
    reads, writes = _forbidden(isolated)
    params: dict[str, jsontypes.JSONValue] = {"reads": [*reads], "writes": [*writes]}
    task = port.PythonCallable("tests.execution.sample_tasks:probe", params=params)
    spec = dataclasses.replace(engine.spec(task=task), workdir=None)

    observation = engine.run(spec)

    attempt = engine.attempt(spec)
    log = attempt.log.read_text() if attempt.log.exists() else ""
    assert observation.engine_state is port.EngineState.SUCCEEDED, log
    result = engine.wait_delivered(spec)["evidence"]
    assert isinstance(result, dict)
    output = result["output"]
    assert isinstance(output, dict)
    assert output["reached"] == []
    assert output["uid"] == nobody.pw_uid
    # Not a fork of the worker: its environment block is the task's own, not the supervisor's.
    names = output["environ_names"]
    assert isinstance(names, list)
    assert "VERITASK_SECRET_API_KEY" not in names and "VERITASK_ATTEMPT_TOKEN" in names
    assert (attempt.work / "mine.txt").exists()
    assert engine.platform.commits and "progress" in engine.platform.kinds_of(spec.instance_id)


@needs_root
def test_the_supervisors_environment_block_holds_no_platform_setting(
    isolated: Isolated,
) -> None:
    pid = isolated.engine.executor.supervisor_pid()
    block = Path(f"/proc/{pid}/environ").read_bytes()
    names = {entry.split(b"=")[0].decode() for entry in block.split(b"\0") if entry}

    assert not {name for name in names if name.startswith("VERITASK_")}, names
    for value in (DATABASE_PASSWORD, SIGNING_KEY, ADMIN_TOKEN, API_KEY):
        assert value.encode() not in block


@needs_root
def test_the_data_folder_is_the_platforms_and_lets_the_task_group_pass_only(
    isolated: Isolated,
) -> None:
    nobody = _nobody()
    assert nobody is not None
    home = isolated.home.stat()
    assert (stat.S_IMODE(home.st_mode), home.st_gid) == (0o710, nobody.pw_gid)
    for name in ("token", "secret", "veritask.db", "executor/supervisor.log"):
        assert stat.S_IMODE((isolated.home / name).stat().st_mode) == 0o600, name
    assert stat.S_IMODE((isolated.home / "executor" / "supervisor.sock").stat().st_mode) == 0o600


def test_an_open_data_folder_is_closed_at_start_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    (home / "token").write_text("t")
    (home / "token").chmod(0o644)

    task_user.secure_home(home, {task_user.SETTING: pwd.getpwuid(os.geteuid()).pw_name})

    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "token").stat().st_mode) == 0o600
    assert f"{home} was mode 0755" in caplog.text and "token was mode 0644" in caplog.text


def test_who_runs_tasks_follows_the_platforms_user_and_the_setting() -> None:
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert task_user.resolve({}, euid=1000) is None
    assert task_user.resolve({task_user.SETTING: me}) is None
    with pytest.raises(task_user.TaskUserError, match="only a platform running as root"):
        task_user.resolve({task_user.SETTING: "0"}, euid=12345)
    if _nobody() is not None:
        by_default = task_user.resolve({}, euid=0)
        by_uid = task_user.resolve({task_user.SETTING: "65534"}, euid=0)
        assert by_default is not None and by_default.name == "nobody"
        assert by_uid is not None and by_uid.uid == 65534


def test_a_task_user_that_names_no_user_is_refused_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(task_user.SETTING, "no-such-user-x")
    said = "VERITASK_TASK_USER: 'no-such-user-x' names no user of this machine"
    with pytest.raises(task_user.TaskUserError, match=said):
        local.LocalExecutor(home=tmp_path / "home")

    env = {**os.environ, "VERITASK_HOME": str(tmp_path / "home")}
    cli = Path(sys.executable).parent / "veritask"
    done = subprocess.run(
        [str(cli), "scheduler"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert not (tmp_path / "home" / "veritask.db").exists()


def test_a_callable_for_another_user_runs_in_a_fresh_interpreter_and_fills_its_output(
    tmp_path: Path,
) -> None:
    """The way a callable of another user starts, run as this user (any machine can)."""
    me = pwd.getpwuid(os.geteuid())
    user = task_user.TaskUser(
        name=me.pw_name, uid=me.pw_uid, gid=me.pw_gid, groups=(), home=me.pw_dir
    )
    output = tmp_path / "output.json"
    output.write_bytes(b"")  # what the worker hands over: the task fills it in place
    task = port.PythonCallable("tests.execution.sample_tasks:add", params={"a": 2, "b": 3})
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), "VERITASK_INSTANCE_ID": "i"}

    process = task_process.start(task, env=env, workdir=tmp_path, output_path=output, user=user)
    try:
        assert process.popen is not None  # an exec, not a fork of this process
        assert process.popen.wait(timeout=30) == 0
        assert process.confirmation_fd is not None
        assert os.read(process.confirmation_fd, 1) == b"S"
        assert json.loads(output.read_bytes()) == {"sum": 5, "instance_id": "i"}
        assert os.read(process.output_fd, 1000) == b"adding 2 and 3\n"
    finally:
        for fd in (process.pidfd, process.output_fd, process.confirmation_fd):
            if fd is not None:
                os.close(fd)


@needs_root
def test_up_runs_tasks_as_root_only_where_the_task_user_cannot_run_its_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pytest's own folders are private to root: the task user could reach nothing there.
    with tempfile.TemporaryDirectory() as folder:
        _check_embedded_problem(Path(folder), monkeypatch)


def _check_embedded_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    python = hidden / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    tmp_path.chmod(0o755)
    reachable = tmp_path / "shared"
    reachable.mkdir(mode=0o755)
    public_python = reachable / "python3"
    public_python.write_text("#!/bin/sh\n")
    public_python.chmod(0o755)
    monkeypatch.delenv(task_user.SETTING, raising=False)

    problem = task_user.embedded_problem(home, python, os.environ)

    assert problem is not None
    assert str(hidden) in problem and "'nobody'" in problem
    assert task_user.embedded_problem(home, public_python, os.environ) is None
    monkeypatch.setenv(task_user.SETTING, "nobody")
    assert task_user.embedded_problem(home, python, os.environ) is None

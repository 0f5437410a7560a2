"""``veritask test``: one run of a Python pipeline through the real CLI in a fresh process, on
a temporary ledger with the real scheduler and the local executor; no server is started."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance.conftest import environment

pytestmark = pytest.mark.slow

FLOWS = """\
from veritask import Retry, pipeline, shell, task


@task
def shout(word: str) -> None:
    print(word.upper(), flush=True)


@pipeline(name="greeting")
def greeting(word: str = "hello") -> None:
    said = shout(word)
    shell("echo day={{ logical_date }}", name="stamp", after=[said])


@pipeline(name="falling")
def falling() -> None:
    shell("echo about to fail; exit 3", name="boom", retry=Retry(max_retries=1, delay="1s"))
"""

BROKEN = """\
from veritask import pipeline, task


@task
def load(day: object) -> None: ...


@pipeline()
def broken_flow() -> None:
    load({1, 2})
"""


@pytest.fixture
def pipes(tmp_path: Path) -> Path:
    folder = tmp_path / "pipes"
    (folder / "verbflows").mkdir(parents=True)
    (folder / "verbflows" / "__init__.py").write_text("")
    (folder / "verbflows" / "daily.py").write_text(FLOWS)
    (folder / "broken_verb.py").write_text(BROKEN)
    return folder


def veritask_test(
    tmp_path: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The user's home is left alone: the run's ledger lives in a temporary one."""
    return subprocess.run(
        [sys.executable, "-m", "veritask.cli.main", "test", *args],
        env=environment(tmp_path / "home"),
        cwd=cwd or tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_succeeding_run_streams_states_and_log_lines_and_exits_0(
    pipes: Path, tmp_path: Path
) -> None:
    done = veritask_test(
        tmp_path,
        f"{pipes / 'verbflows' / 'daily.py'}::greeting",
        "--param",
        "word=hi there",
        "--logical-time",
        "2024-03-05T02:00:00+00:00",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[shout] | HI THERE" in lines
    assert "[stamp] | day=2024-03-05" in lines
    # Printed as it happens: shout prints, then succeeds, and only then stamp runs.
    order = [
        lines.index("[shout] | HI THERE"),
        lines.index("[shout] SUCCESS: attempt 1: the worker reported exit 0"),
        lines.index("[stamp] | day=2024-03-05"),
    ]
    assert order == sorted(order)
    assert lines[-1].endswith("SUCCESS: every leaf succeeded or was skipped")
    assert not (tmp_path / "home").exists()


def test_a_failing_task_exits_1_and_json_shows_its_attempts(pipes: Path, tmp_path: Path) -> None:
    # -m imports from the current folder, as ``python -m`` does.
    done = veritask_test(tmp_path, "-m", "verbflows.daily::falling", "--json", "--keep", cwd=pipes)
    assert done.returncode == 1, done.stdout + done.stderr
    run = json.loads(done.stdout)
    assert run["state"] == "FAILED"
    boom = run["instances"]["boom"]
    assert (boom["state"], boom["attempts"], boom["exit_code"]) == ("FAILED", 2, 3)
    assert boom["log"].count("about to fail") == 2
    kept = Path(run["home"])
    try:
        assert (kept / "veritask.db").is_file()
    finally:
        shutil.rmtree(kept)


def test_a_refused_pipeline_exits_2_naming_its_file_and_line(pipes: Path, tmp_path: Path) -> None:
    broken = pipes / "broken_verb.py"
    done = veritask_test(tmp_path, str(broken))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{broken}:10: tasks.load.with.day" in done.stderr
    assert done.stdout == ""


def test_a_module_of_two_pipelines_needs_a_name(pipes: Path, tmp_path: Path) -> None:
    done = veritask_test(tmp_path, str(pipes / "verbflows" / "daily.py"))
    assert done.returncode == 2
    assert "greeting, falling; pick one with ::NAME" in done.stderr


GATED = """\
from veritask import pipeline, wait


@pipeline(name="gated")
def gated() -> None:
    wait(name="gate", path={path!r}, every="1s")
"""


def test_an_unmet_wait_prints_each_check_and_gives_up_at_the_timeout(tmp_path: Path) -> None:
    source = tmp_path / "gated.py"
    source.write_text(GATED.format(path=str(tmp_path / "never-there")))
    started = time.monotonic()
    done = veritask_test(tmp_path, str(source), "--timeout", "4")
    elapsed = time.monotonic() - started

    assert done.returncode == 1, done.stdout + done.stderr
    assert "still active after 4s" in done.stderr
    checks = [line for line in done.stdout.splitlines() if line.startswith("[gate] check ")]
    assert checks[:2] == [
        f"[gate] check 1: no such file or directory {tmp_path / 'never-there'}",
        f"[gate] check 2: no such file or directory {tmp_path / 'never-there'}",
    ]
    assert elapsed < 20, "given up at the timeout, not after the default 600 s"


BARRIER = """\
from veritask import pipeline, shell

# Each task arrives, then waits until all have: it succeeds only if all run at once.
ARRIVE = (
    "touch {folder}/$VERITASK_INSTANCE_ID; "
    "for i in $(seq 200); do [ $(ls {folder} | wc -l) -ge {count} ] && exit 0; sleep 0.05; done; "
    "exit 1"
)


@pipeline(name="barrier")
def barrier() -> None:
    for n in range({count}):
        shell(ARRIVE, name=f"arrive_{{n}}")
"""


def test_every_task_of_a_pipeline_runs_at_once_whatever_the_processors(tmp_path: Path) -> None:
    count = (os.cpu_count() or 1) + 2
    folder = tmp_path / "arrived"
    folder.mkdir()
    source = tmp_path / "barrier.py"
    source.write_text(BARRIER.format(folder=folder, count=count))
    done = veritask_test(tmp_path, str(source), "--timeout", "40")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list(folder.iterdir())) == count

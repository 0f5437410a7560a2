"""The example definitions in examples/ are accepted, and what they run exists and works."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import reduce
from pathlib import Path

import pytest

from veritask.core.run_state import TaskRole
from veritask.core.trigger_rules import TriggerRule
from veritask.definitions.model import Definition
from veritask.definitions.parse import parse_definition

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))


def load(name: str) -> Definition:
    return parse_definition((EXAMPLES_DIR / name).read_text())


def test_the_expected_examples_exist() -> None:
    names = {path.name for path in EXAMPLES}
    assert names >= {"hello.yaml", "progress.yaml", "flaky.yaml", "branching.yaml", "publish.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_accepted(path: Path) -> None:
    definition = parse_definition(path.read_text())
    assert definition.name
    assert definition.tasks


@pytest.fixture
def examples_on_path() -> Iterator[None]:
    sys.path.insert(0, str(EXAMPLES_DIR))
    try:
        yield
    finally:
        sys.path.remove(str(EXAMPLES_DIR))
        for name in [m for m in sys.modules if m == "jobs" or m.startswith("jobs.")]:
            del sys.modules[name]


@pytest.mark.usefixtures("examples_on_path")
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_callable_an_example_names_can_be_imported(path: Path) -> None:
    definition = parse_definition(path.read_text())
    targets = [task.call for task in definition.tasks.values() if task.call]
    if definition.publish is not None:
        targets += [check.call for check in definition.publish.checks if check.call]
        if definition.publish.commit.call:
            targets.append(definition.publish.commit.call)
    for target in targets:
        module, _, attribute = target.partition(":")
        function = reduce(getattr, attribute.split("."), importlib.import_module(module))
        assert callable(function), target


@pytest.mark.usefixtures("examples_on_path")
def test_the_progress_example_reports_progress_and_returns_its_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VERITASK_CHANNEL", raising=False)  # outside a worker: best effort, silent
    task = load("progress.yaml").tasks["count_rows"]
    assert task.call is not None
    module, _, name = task.call.partition(":")
    function = getattr(importlib.import_module(module), name)
    assert function(total=3, pause_seconds=0) == {"rows": 3}
    assert set(task.with_) == {"total", "pause_seconds"}


def test_the_flaky_example_retries_with_backoff() -> None:
    retry = load("flaky.yaml").tasks["sometimes_fails"].policy.retry
    assert retry.max_retries >= 1
    assert retry.backoff.value == "exponential"


def test_the_branching_example_joins_after_the_branch() -> None:
    tasks = load("branching.yaml").tasks
    assert tasks["join"].trigger_rule is TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS
    assert set(tasks["weekday"].after) == set(tasks["weekend"].after) == {"choose"}


def test_the_publish_example_has_checks_a_commit_and_a_teardown() -> None:
    definition = load("publish.yaml")
    assert definition.publish is not None
    assert len(definition.publish.checks) >= 1
    assert definition.tasks["remove_workspace"].role is TaskRole.TEARDOWN
    assert definition.run_graph().leaves() == ("build",)


def run_shell(command: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    output = tmp_path / "output.json"
    env = {**os.environ, "VERITASK_OUTPUT": str(output), "VERITASK_ATTEMPT_NO": "2"}
    return subprocess.run(
        ["/bin/sh", "-c", command],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_shell_command_of_the_examples_runs_on_this_machine(
    path: Path, tmp_path: Path
) -> None:
    definition = parse_definition(path.read_text())
    # A container task's line runs in its image, not on this machine.
    steps = [(key, task.run) for key, task in definition.tasks.items() if task.container is None]
    if definition.publish is not None:
        steps += [(c.name, c.run) for c in definition.publish.checks]
        steps.append(("commit", definition.publish.commit.run))
    for key, command in steps:
        if command is None:
            continue
        done = run_shell(command, tmp_path)
        assert done.returncode == 0, f"{path.name} {key}: {done.stderr}"


@pytest.mark.slow
def test_the_branch_task_writes_its_choice_to_veritask_output(tmp_path: Path) -> None:
    choose = load("branching.yaml").tasks["choose"]
    assert choose.run is not None
    assert run_shell(choose.run, tmp_path).returncode == 0
    written = json.loads((tmp_path / "output.json").read_text())
    assert written["branch"] in (["weekday"], ["weekend"])

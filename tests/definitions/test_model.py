"""The model's own checks, for definitions built in code rather than parsed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from veritask import docgen
from veritask.core.run_state import TaskRole
from veritask.definitions.durations import InvalidDuration, format_duration, parse_duration
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.model import (
    Catchup,
    ConcurrencyPolicy,
    Definition,
    PublishCheck,
    Schedule,
    Step,
    TaskSpec,
    WaitFor,
)


def test_a_task_needs_exactly_one_of_run_and_call() -> None:
    with pytest.raises(DefinitionError, match="needs exactly one of run or call"):
        TaskSpec("a")
    with pytest.raises(DefinitionError, match="needs exactly one of run or call"):
        TaskSpec("a", run="true", call="m:f")
    with pytest.raises(DefinitionError, match="is not module:function"):
        TaskSpec("a", call="m.f")
    with pytest.raises(DefinitionError, match="is not module:function"):
        Step(call="nope")
    with pytest.raises(DefinitionError, match="needs exactly one"):
        PublishCheck("rows")


def test_only_a_teardown_decides_the_run() -> None:
    with pytest.raises(DefinitionError) as caught:
        TaskSpec("a", run="true", decides_run=True)
    assert caught.value.problems == [
        Problem("tasks.a.decides_run", None, "only a teardown task may set decides_run")
    ]
    assert TaskSpec("a", run="true", role=TaskRole.TEARDOWN, decides_run=True).decides_run


def test_a_schedule_checks_its_cron_and_zone() -> None:
    with pytest.raises(DefinitionError, match="minute field '99'"):
        Schedule("99 * * * *")
    with pytest.raises(DefinitionError, match="unknown time zone"):
        Schedule("0 2 * * *", "Mars/Olympus")
    with pytest.raises(DefinitionError, match="must be 1 or more"):
        Catchup(enabled=True, max_runs=0)


def test_a_dependency_waits_for_publication_only() -> None:
    with pytest.raises(DefinitionError, match="must be true"):
        WaitFor("users_raw", published=False)


def test_a_definition_checks_its_name_and_task_keys() -> None:
    task = TaskSpec("a", run="true")
    with pytest.raises(DefinitionError, match="not a valid name"):
        Definition("Bad Name", {"a": task})
    with pytest.raises(DefinitionError, match="holds the task 'a'"):
        Definition("ok", {"b": task})
    definition = Definition("ok", {"a": task})
    assert not definition.publication_required
    assert definition.run_graph().leaves() == ("a",)


def test_every_concurrency_policy_has_a_meaning() -> None:
    docs = docgen.member_docs(ConcurrencyPolicy)
    assert set(docs) == {policy.name for policy in ConcurrencyPolicy}
    assert all(docs.values())


@pytest.mark.parametrize(
    ("seconds", "written"),
    [(0, "0s"), (30, "30s"), (600, "10m"), (5400, "1h30m"), (90061, "1d1h1m1s"), (1.5, "1.5s")],
)
def test_durations_are_written_in_the_largest_units(seconds: float, written: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == written
    assert parse_duration(written) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["", "m", "10x", "1m1h", "1h 30", "-5s", True, None, [1], 1e300])
def test_bad_durations_are_refused(bad: object) -> None:
    with pytest.raises(InvalidDuration):
        parse_duration(bad)

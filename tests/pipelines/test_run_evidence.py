"""Every run-level event carries its evidence, on every path a run takes (docs/definitions.md,
"Publish" and "wait_for"; docs/scheduling.md, concurrency): the publication's checks and
commit, a queue's release, a ``wait_for``'s wait and release, a failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tests.pipelines.harness import Platform, platform_fixture
from veritask.core.jsontypes import JSONValue
from veritask.core.states import PublicationState as P
from veritask.core.states import RunExecutionState as R
from veritask.core.states import TriggerKind
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import triggers
from veritask.services import platform as services_platform
from veritask.services import runs, views


@pytest.fixture
def platform(engine: Engine, tmp_path: Path) -> Iterator[Platform]:
    yield from platform_fixture(engine, tmp_path)


DEFINITIONS = [
    """
name: users_raw
tasks:
  extract: {run: "true"}
publish:
  checks: [{name: row_count, run: "true"}]
  commit: {run: "true"}
""",
    """
name: sales
tasks:
  load: {run: "true"}
publish:
  checks: [{name: no_negative_amounts, run: "exit 1"}]
  commit: {run: "true"}
""",
    """
name: report
wait_for:
  - {definition: users_raw, published: true}
tasks:
  report: {run: "true"}
""",
    """
name: queued
concurrency: queue
tasks:
  work: {run: "sleep 0.3"}
""",
    """
name: broken
defaults: {retry: {max_retries: 0}}
tasks:
  work: {run: "exit 1"}
  after_it: {run: "true", after: [work]}
""",
]


def _run(platform: Platform, name: str) -> str:
    return triggers.trigger(
        platform.ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id


def _history(platform: Platform, run_id: str) -> list[views.HistoryEvent]:
    """The run's own events as the API and ``veritask show`` list them."""
    service = services_platform.Platform(platform.ledger, Path("."))
    found = runs.history(service, SubjectType.RUN, run_id, limit=1000)
    return [e for e in found.events if e.subject_type == SubjectType.RUN.value]


def _at(value: JSONValue, *path: str) -> JSONValue:
    """The value at ``path`` inside nested evidence objects."""
    for key in path:
        assert isinstance(value, dict), f"{key}: not an object in {value!r}"
        value = value[key]
    return value


def _one(events: list[views.HistoryEvent], kind: str, to_state: str) -> views.HistoryEvent:
    [event] = [e for e in events if e.kind == kind and e.to_state == to_state]
    return event


def test_no_run_level_event_has_empty_evidence(platform: Platform) -> None:
    for text in DEFINITIONS:
        triggers.apply_definition(platform.ledger, text)
    report = _run(platform, "report")
    platform.until(lambda: "users_raw" in platform.run(report).execution_reason)
    waiting = platform.run(report).execution_reason
    assert waiting == "waiting for users_raw (latest run): no run yet"
    users = _run(platform, "users_raw")
    sales = _run(platform, "sales")
    first, second = _run(platform, "queued"), _run(platform, "queued")
    broken = _run(platform, "broken")
    assert platform.run(second).execution_state is R.QUEUED

    assert platform.settle(users).publication_state is P.PUBLISHED
    assert platform.settle(report).execution_state is R.SUCCESS
    assert platform.settle(sales).publication_state is P.CHECK_FAILED
    assert platform.settle(first).execution_state is R.SUCCESS
    assert platform.settle(second).execution_state is R.SUCCESS
    assert platform.settle(broken).execution_state is R.FAILED

    every = {
        run_id: _history(platform, run_id)
        for run_id in (users, sales, report, first, second, broken)
    }
    empty = [
        (e.run_id, e.kind, e.to_state)
        for events in every.values()
        for e in events
        if not e.evidence
    ]
    assert empty == []

    # The publication: the check instance and its attempt; the commit that published.
    failed = _one(every[sales], "publication_changed", P.CHECK_FAILED.value).evidence
    check = _at(failed, "steps", "publish.check.no_negative_amounts")
    assert _at(check, "attempt_no") == 1 and _at(check, "state") == "FAILED"
    assert _at(check, "instance_id")
    published = _one(every[users], "publication_changed", P.PUBLISHED.value)
    commit = _at(published.evidence, "steps", "publish.commit")
    assert _at(commit, "attempt_no") == 1 and _at(commit, "state") == "SUCCESS"

    # The queue's release names the run it waited behind, and how that one ended.
    released = _one(every[second], "run_state_changed", R.RUNNING.value).evidence
    assert released["waited_behind"] == {first: "SUCCESS"}

    # The wait: its reason names what it waits for; its release the upstream run and the
    # event that published it.
    kinds = [e.kind for e in every[report]]
    assert kinds.index("dependencies_awaited") < kinds.index("dependencies_released")
    awaited = [e for e in every[report] if e.kind == "dependencies_awaited"]
    assert awaited[0].reason == waiting  # then again each time the upstream moved
    assert all(e.evidence["dependencies"] for e in awaited)
    [release] = [e for e in every[report] if e.kind == "dependencies_released"]
    upstreams = _at(release.evidence, "upstreams")
    assert isinstance(upstreams, list) and len(upstreams) == 1
    assert _at(upstreams[0], "definition") == "users_raw"
    assert _at(upstreams[0], "run_id") == users
    assert _at(upstreams[0], "published_event_id") == published.event_id

    # The failure names the instances' states.
    ended = _one(every[broken], "run_state_changed", R.FAILED.value).evidence
    assert ended["instances"] == {"work": "FAILED", "after_it": "UPSTREAM_FAILED"}

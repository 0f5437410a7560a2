"""Pipelines end to end with the real scheduler and local processes (docs/definitions.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.pipelines.harness import Platform, platform_fixture
from veritask.core.states import InstanceState as I
from veritask.core.states import PublicationState as P
from veritask.core.states import RunExecutionState as R
from veritask.core.states import TriggerKind
from veritask.ledger import dialects, schema
from veritask.scheduling import triggers
from veritask.services import platform as services_platform
from veritask.services import reruns

T = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


@pytest.fixture
def platform(engine: Engine, tmp_path: Path) -> Iterator[Platform]:
    yield from platform_fixture(engine, tmp_path)


def apply(platform: Platform, text: str) -> None:
    triggers.apply_definition(platform.ledger, text)


def run_of(platform: Platform, name: str, logical_time: datetime | None = None) -> str:
    kind = TriggerKind.BACKFILL if logical_time else TriggerKind.MANUAL
    return triggers.trigger(
        platform.ledger, name=name, kind=kind, actor="operator:test", logical_time=logical_time
    ).run_id


PUBLISHED_USERS = """
name: users_raw
schedule: {cron: "0 2 * * *", timezone: UTC}
tasks:
  extract: {run: "true"}
publish:
  checks:
    - {name: row_count, run: "true"}
  commit: {run: "true"}
"""


def test_a_publishing_run_ends_published(platform: Platform) -> None:
    apply(platform, PUBLISHED_USERS)
    view = platform.settle(run_of(platform, "users_raw"))
    assert (view.execution_state, view.publication_state) == (R.SUCCESS, P.PUBLISHED)
    assert view.instances["publish.commit"] is I.SUCCESS


def test_a_failing_check_leaves_execution_success_and_publication_check_failed(
    platform: Platform,
) -> None:
    apply(
        platform,
        """
name: sales
tasks:
  load: {run: "true"}
publish:
  checks:
    - {name: no_negative_amounts, run: "exit 1"}
  commit: {run: "true"}
""",
    )
    view = platform.settle(run_of(platform, "sales"))
    assert view.execution_state is R.SUCCESS
    assert view.publication_state is P.CHECK_FAILED
    assert "no_negative_amounts" in view.publication_reason
    assert view.instances["publish.commit"] is I.CREATED  # nothing was committed


def test_a_downstream_pipeline_waits_until_the_upstream_is_published(platform: Platform) -> None:
    apply(platform, PUBLISHED_USERS)
    apply(
        platform,
        """
name: user_report
schedule: {cron: "0 2 * * *", timezone: UTC}
wait_for:
  - {definition: users_raw, published: true}
tasks:
  report: {run: "true"}
""",
    )
    downstream = run_of(platform, "user_report", T)
    for _ in range(30):
        platform.scheduler.tick()
    assert platform.run(downstream).instances["report"] is I.CREATED
    upstream = run_of(platform, "users_raw", T)
    assert platform.settle(upstream).publication_state is P.PUBLISHED
    assert platform.settle(downstream).execution_state is R.SUCCESS


def test_execution_success_alone_never_releases_a_dependency(platform: Platform) -> None:
    apply(
        platform,
        """
name: orders_raw
tasks:
  extract: {run: "true"}
publish:
  checks: [{name: fails, run: "exit 3"}]
  commit: {run: "true"}
""",
    )
    apply(
        platform,
        """
name: order_report
wait_for:
  - {definition: orders_raw, published: true, timeout: 2s}
tasks:
  report: {run: "true"}
""",
    )
    upstream = platform.settle(run_of(platform, "orders_raw"))
    assert (upstream.execution_state, upstream.publication_state) == (R.SUCCESS, P.CHECK_FAILED)
    downstream = run_of(platform, "order_report")
    view = platform.settle(downstream, seconds=20)
    assert view.instances["report"] is I.UPSTREAM_FAILED
    assert view.execution_state is R.FAILED
    a = schema.alerts.c
    with dialects.read_transaction(platform.ledger.engine) as connection:
        categories = connection.execute(sa.select(a.category)).scalars().all()
        [evidence] = connection.execute(
            sa.select(a.evidence).where(a.category == "dependency")
        ).scalars()
    assert "dependency" in categories
    # The alert names the upstream run it saw and that run's publication.
    [seen] = evidence["dependencies"]
    assert (seen["definition"], seen["publication_state"]) == ("orders_raw", "CHECK_FAILED")


def test_a_teardown_runs_after_failed_work_and_does_not_decide(platform: Platform) -> None:
    apply(
        platform,
        """
name: with_cleanup
tasks:
  setup_cluster: {run: "true", role: setup}
  work: {run: "exit 2", after: [setup_cluster]}
  finish: {run: "true", after: [work]}
  teardown_cluster: {run: "true", role: teardown, after: [setup_cluster, work]}
""",
    )
    view = platform.settle(run_of(platform, "with_cleanup"))
    assert view.instances["teardown_cluster"] is I.SUCCESS
    assert view.instances["finish"] is I.UPSTREAM_FAILED
    assert view.execution_state is R.FAILED


def test_a_backfill_creates_one_run_per_interval_once_and_queues_them(platform: Platform) -> None:
    apply(platform, PUBLISHED_USERS)
    start, end = T, T + timedelta(days=2)
    first = triggers.backfill(
        platform.ledger, name="users_raw", start=start, end=end, actor="operator:test"
    )
    again = triggers.backfill(
        platform.ledger, name="users_raw", start=start, end=end, actor="operator:test"
    )
    assert len(first) == 3
    assert [r.run_id for r in first] == [r.run_id for r in again]
    assert not any(r.created for r in again)
    assert [r.execution_state for r in first] == [R.RUNNING, R.QUEUED, R.QUEUED]
    for result in first:
        assert platform.settle(result.run_id).publication_state is P.PUBLISHED


def test_a_lag_maps_the_logical_time_to_the_upstream_run_it_waits_for(platform: Platform) -> None:
    apply(platform, PUBLISHED_USERS)
    apply(
        platform,
        """
name: weekly_rollup
schedule: {cron: "0 2 * * *", timezone: UTC}
wait_for:
  - {definition: users_raw, published: true, lag: 1d}
tasks:
  rollup: {run: "true"}
""",
    )
    downstream = run_of(platform, "weekly_rollup", T)
    assert platform.settle(run_of(platform, "users_raw", T)).publication_state is P.PUBLISHED
    for _ in range(30):
        platform.scheduler.tick()
    assert platform.run(downstream).instances["rollup"] is I.CREATED  # today's is not enough
    yesterday = run_of(platform, "users_raw", T - timedelta(days=1))
    assert platform.settle(yesterday).publication_state is P.PUBLISHED
    assert platform.settle(downstream).execution_state is R.SUCCESS


def test_a_manual_run_given_a_logical_time_waits_for_that_time_not_the_latest(
    platform: Platform,
) -> None:
    apply(platform, PUBLISHED_USERS)
    apply(
        platform,
        """
name: november_report
schedule: {cron: "0 2 * * *", timezone: UTC}
wait_for:
  - {definition: users_raw, published: true}
tasks:
  report: {run: "true"}
""",
    )
    december = T + timedelta(days=30)
    assert platform.settle(run_of(platform, "users_raw", december)).publication_state is (
        P.PUBLISHED
    )
    downstream = triggers.trigger(
        platform.ledger,
        name="november_report",
        kind=TriggerKind.MANUAL,
        actor="operator:test",
        logical_time=T,
    ).run_id
    for _ in range(30):
        platform.scheduler.tick()

    view = platform.run(downstream)
    assert view.instances["report"] is I.CREATED  # December's publication is not November's
    assert view.execution_reason == f"waiting for users_raw at {T.isoformat()}: no run yet"
    november = run_of(platform, "users_raw", T)
    assert platform.settle(november).publication_state is P.PUBLISHED
    assert platform.settle(downstream).execution_state is R.SUCCESS
    # Without a logical time of its own, a run by hand still takes the latest publication.
    latest = run_of(platform, "november_report")
    assert platform.settle(latest).execution_state is R.SUCCESS


def test_a_rerun_of_a_run_by_hand_waits_as_the_run_it_reruns(platform: Platform) -> None:
    apply(platform, PUBLISHED_USERS)
    apply(
        platform,
        """
name: ad_hoc_report
wait_for:
  - {definition: users_raw, published: true}
tasks:
  report: {run: "true"}
""",
    )
    assert platform.settle(run_of(platform, "users_raw")).publication_state is P.PUBLISHED
    first = run_of(platform, "ad_hoc_report")  # no logical time given: the latest publication
    assert platform.settle(first).execution_state is R.SUCCESS
    service = services_platform.Platform(platform.ledger, Path("."))
    again = reruns.rerun(service, first, reason="again", actor="operator:test")

    # Its logical time is the first run's trigger moment, which no upstream run has.
    assert platform.settle(again.run_id).execution_state is R.SUCCESS

"""RabbitMQ stopped and started again in the middle of a run: everything converges.

A private RabbitMQ node (``rabbit.py``; the shared one is never stopped) carries the run. While
it is down, the scheduler's submits fail (a retryable ``ExecutorError``: the attempt is
submitted again later), its ``inspect`` calls fail (no decision is taken on no evidence), and
the workers lose their connection; the tasks they run go on, their reports go to the outbox,
their results to Redis. When it is back, the workers reconnect, messages not acknowledged
before the outage come back and are refused by their claim, and the rest of the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import (
    Cluster,
    assert_no_overlap,
    count_states,
    elapsed_since,
    marked_fanout,
    read_markers,
    successes_per_instance,
    wait_for_run,
)
from tests.cluster.rabbit import PrivateRabbit, require_private_rabbit
from tests.scheduling.harness import wait_for
from veritask.core.states import RunExecutionState, TriggerKind
from veritask.scheduling import triggers

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TASKS = 40
#: Four chains of ten: attempts are opened and submitted all through the run, outage included.
CHAINS = 4
OUTAGE_SECONDS = 6.0


@pytest.fixture
def rabbit(cluster_services: None, tmp_path: Path) -> Iterator[PrivateRabbit]:
    require_private_rabbit()
    node = PrivateRabbit(tmp_path / "rabbit")
    node.start()
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
def outage_cluster(rabbit: PrivateRabbit, database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(database_url, tmp_path, broker_url=rabbit.url)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_the_broker_stopped_and_started_mid_run_loses_nothing_and_runs_nothing_twice(
    outage_cluster: Cluster, rabbit: PrivateRabbit, tmp_path: Path
) -> None:
    cluster = outage_cluster
    markers = tmp_path / "markers"
    markers.mkdir()
    triggers.apply_definition(
        cluster.db.ledger, marked_fanout("outage", TASKS, markers, sleep=0.5, chains=CHAINS)
    )
    cluster.start_scheduler("scheduler", api_url=None)  # workers on this machine: the outbox
    wait_for(lambda: cluster.schedulers_registered() == 1, what="the scheduler", timeout=60)
    cluster.start_host("host-a", api_url=None, concurrency=2)
    cluster.start_host("host-b", api_url=None, concurrency=2)

    started = time.monotonic()
    run_id = triggers.trigger(
        cluster.db.ledger, name="outage", kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id
    wait_for(
        lambda: count_states(cluster.db, run_id)["SUCCESS"] >= 8,
        what="the run to be under way",
        timeout=60,
        interval=0.05,
    )
    rabbit.stop()
    print(f"broker stopped at {elapsed_since(started)}: {count_states(cluster.db, run_id)}")
    time.sleep(OUTAGE_SECONDS)  # the outage itself: nothing to wait for, time has to pass
    during = count_states(cluster.db, run_id)
    rabbit.start()
    print(f"broker back at {elapsed_since(started)}: {during}")

    final = wait_for_run(cluster.db, run_id, timeout=90)
    print(f"run finished at {elapsed_since(started)}: {count_states(cluster.db, run_id)}")
    cluster.assert_alive()  # the scheduler and both workers outlived the outage
    assert final is RunExecutionState.SUCCESS
    instances = cluster.db.instances(run_id)
    assert count_states(cluster.db, run_id) == {"SUCCESS": TASKS}
    successes = successes_per_instance(cluster.db)
    twice = [row.id for row in instances.values() if successes[row.id] != 1]
    assert not twice, "\n".join(str(event) for event in cluster.db.history(twice[0]))
    found = read_markers(markers)
    assert len(found) == TASKS
    assert_no_overlap(found, killed_at=None)  # nothing was killed: every attempt stopped
    log = (tmp_path / "scheduler.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    # The outage was felt where it matters: submits failed and were made again.
    assert "will submit it again" in log

"""Beyond one machine: two API servers, two schedulers, two Celery hosts; one host dies.

Everything is a real process on loopback: ``veritask server`` x2, ``python -m
veritask.scheduling`` x2 on one PostgreSQL database, ``veritask-celery-worker`` x2 (one per
"host", each reporting over HTTP to its own API server), RabbitMQ and Redis. Mid-run the
first host's whole session is SIGKILLed: the Celery worker, its pool, the Veritask workers and
the tasks. What must follow is the reconciler's table (docs/scheduling.md, 4): its attempts go
LOST, the reconciler finds them ``unknown`` in Redis (a claim whose lease lapsed), fences them
and opens new attempts, which the surviving host runs; nothing runs twice at once, nothing is
stuck, and every instance succeeds exactly once.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import (
    Cluster,
    assert_no_overlap,
    count_states,
    elapsed_since,
    lost_attempts,
    marked_fanout,
    read_markers,
    successes_per_instance,
    wait_for_run,
)
from tests.execution.celery.conftest import kill_session
from tests.scheduling.harness import wait_for
from veritask.core.states import RunExecutionState, TriggerKind
from veritask.scheduling import triggers

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TASKS = int(os.environ.get("VERITASK_CLUSTER_TASKS", "500"))
#: Pool processes per host: each runs one attempt at a time.
CONCURRENCY = 4
#: From the trigger until every instance is SUCCESS, host death included.
DEADLINE = float(os.environ.get("VERITASK_CLUSTER_DEADLINE", "150"))


def attempts_on(host_home: Path) -> set[tuple[str, int]]:
    """The attempts a host took (its attempt directories): (instance, attempt number)."""
    return {
        (path.parent.name, int(path.name))
        for path in (host_home / "executor" / "attempts").glob("*/*")
        if path.name.isdigit()
    }


@pytest.mark.timeout(240)
@pytest.mark.parametrize("database_kind", ["postgres"], indirect=True)
def test_a_host_killed_mid_run_loses_its_attempts_and_the_other_host_finishes_them(
    cluster: Cluster, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    triggers.apply_definition(cluster.db.ledger, marked_fanout("wide", TASKS, markers, sleep=0.2))
    api_a = cluster.start_server("api-a")
    api_b = cluster.start_server("api-b")
    cluster.start_scheduler("scheduler-a", api_url=api_a)
    cluster.start_scheduler("scheduler-b", api_url=api_b)
    wait_for(lambda: cluster.schedulers_registered() == 2, what="both schedulers", timeout=60)
    doomed_host = cluster.start_host("host-a", api_url=api_a, concurrency=CONCURRENCY)
    cluster.start_host("host-b", api_url=api_b, concurrency=CONCURRENCY)
    host_a_home = tmp_path / "host-a"
    host_b_home = tmp_path / "host-b"

    started = time.monotonic()
    run_id = triggers.trigger(
        cluster.db.ledger, name="wide", kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id

    def host_a_is_mid_task() -> bool:
        if count_states(cluster.db, run_id)["SUCCESS"] < TASKS // 5:
            return False
        return any(
            (markers / f"{instance}.{number}.start").exists()
            and not (markers / f"{instance}.{number}.stop").exists()
            for instance, number in attempts_on(host_a_home)
        )

    wait_for(host_a_is_mid_task, what="host-a to be mid-run", timeout=DEADLINE, interval=0.05)
    kill_session(cluster.hosts.started[doomed_host].pid)
    killed_at = time.time_ns()
    cluster.hosts.started[doomed_host].wait(timeout=10)
    print(f"killed host-a at {elapsed_since(started)}: {count_states(cluster.db, run_id)}")
    final = wait_for_run(cluster.db, run_id, timeout=DEADLINE)
    print(f"run finished at {elapsed_since(started)}: {count_states(cluster.db, run_id)}")
    cluster.assert_alive()  # the servers, the schedulers: the dead host was the only casualty

    assert final is RunExecutionState.SUCCESS
    instances = cluster.db.instances(run_id)
    assert len(instances) == TASKS
    assert count_states(cluster.db, run_id) == {"SUCCESS": TASKS}
    successes = successes_per_instance(cluster.db)
    assert {row.id: successes[row.id] for row in instances.values()} == {
        row.id: 1 for row in instances.values()
    }, "an instance succeeded more than once (or never)"

    found = read_markers(markers)
    assert_no_overlap(found, killed_at=killed_at)
    assert len(found) == TASKS  # every instance ran, on some host

    # What the dead host had taken: the claims in Redis name the worker that took each attempt.
    claims = cluster.hosts.claims()
    taken_by_a = {
        (row.id, number)
        for row in instances.values()
        for number, _, _, _ in cluster.db.attempts(row.id)
        if (holder := claims.holder(f"{row.id}/{number}")) and holder.worker.startswith(doomed_host)
    }
    # Its unfinished ones were fenced (after going LOST, or straight from QUEUED when the worker
    # died before its first report) and retried as new attempts, which host-b ran after the death.
    attempt_states = {row.id: cluster.db.attempts(row.id) for row in instances.values()}
    unfinished = {
        (instance, number)
        for instance, number in taken_by_a
        if {n: state for n, state, _, _ in attempt_states[instance]}[number] != "SUCCESS"
    }
    print(f"host-a took {len(taken_by_a)} attempts, {len(unfinished)} unfinished at its death")
    assert unfinished, "host-a held no attempt when it died: the test proved nothing"
    ran_on_b = attempts_on(host_b_home)
    for instance, number in unfinished:
        states = {n: state for n, state, _, _ in attempt_states[instance]}
        assert states[number] == "ABANDONED", (instance, number, states)
        successor = next(n for n, state in states.items() if state == "SUCCESS")
        assert successor > number and (instance, successor) in ran_on_b
        assert found[instance][successor].starts[0] > killed_at
    lost = lost_attempts(cluster.db)
    assert lost & unfinished, "no attempt of the dead host went through LOST"
    # Only the dead host's attempts were LOST: the living host's reports all arrived in time.
    assert lost <= taken_by_a, f"LOST but not on the dead host: {sorted(lost - taken_by_a)[:5]}"

    # Each host reported to its own API server (the worker rewrites the callback).
    for home, api in ((host_a_home, api_a), (host_b_home, api_b)):
        spec_path = next((home / "executor" / "attempts").glob("*/*/spec.json"))
        callback = json.loads(spec_path.read_text())["callback"]
        assert callback["base_url"] == api, (home.name, callback)

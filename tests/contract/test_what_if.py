"""What-if replay over histories recorded in a real ledger, on SQLite and PostgreSQL.

Each history is recorded as the platform records it: the decisions taken by the core's own
functions (``decide``) on the ledger's snapshot at the recorder's clock, the facts sent as the
executor and the worker send them, all through ``Ledger.apply``. The replay must tell what a
different lease, retry count or evidence window would have changed, and write nothing.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.acceptance.test_operations import veritask
from veritask.core import decide, judge
from veritask.core.events import Event, EventKind
from veritask.core.fold import InstanceSnapshot
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import RetryPolicy, TaskPolicy
from veritask.core.states import (
    EngineState,
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.ledger import definitions, dialects, runs, schema
from veritask.ledger.ledger import Ledger
from veritask.services import what_if
from veritask.services.platform import Platform

T0 = datetime(2026, 4, 1, 3, 0, tzinfo=UTC)
_ids = itertools.count(1)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


class Recorder:
    """One instance of a finished run, its events applied to the ledger at a chosen time."""

    def __init__(
        self,
        engine: Engine,
        policy: TaskPolicy,
        *,
        definition: str,
        run_state: RunExecutionState = RunExecutionState.SUCCESS,
    ) -> None:
        self.now = T0
        self.policy = policy
        self.ledger = Ledger(engine, clock=lambda: self.now)
        with engine.begin() as connection:
            definition_id, version, _ = definitions.save_definition_version(
                connection,
                name=definition,
                spec={"name": definition, "tasks": {"extract": {"run": "true"}}},
                source=f"name: {definition}\n",
                content_hash=f"hash-{definition}",
                now=T0,
            )
            self.run_id, _ = runs.create_run(
                connection,
                idempotency_key=f"{definition}/1",
                definition_id=definition_id,
                definition_version=version,
                trigger_kind=TriggerKind.MANUAL,
                execution_state=run_state,
                publication_state=PublicationState.NOT_REQUIRED,
                created_at=T0,
            )
        self.instance_id, _ = self.ledger.create_instance(
            run_id=self.run_id, task_key="extract", policy=policy, event_id=self.next_id()
        )
        self.seq: dict[int, int] = {}

    def next_id(self) -> str:
        return f"rec-{next(_ids):06d}"

    def at(self, seconds: float) -> Recorder:
        self.now = T0 + timedelta(seconds=seconds)
        return self

    @property
    def snapshot(self) -> InstanceSnapshot:
        loaded = self.ledger.snapshot(self.instance_id)
        assert loaded is not None
        return loaded[0]

    def token(self, attempt_no: int) -> str:
        return f"token-{self.instance_id}-{attempt_no}"

    def open(self) -> int:
        attempt_no = judge.next_attempt_no(self.snapshot)
        event = decide.open_attempt(
            self.snapshot,
            token_hash=judge.hash_token(self.token(attempt_no)),
            now=self.now,
            event_id=self.next_id(),
        )
        assert event is not None, f"no attempt may open from {self.snapshot.state}"
        self.ledger.apply(event)
        evidence: JSONObject = {"external_id": f"local:{attempt_no}", "executor": "local"}
        self.fact(EventKind.SUBMIT_ACKNOWLEDGED, "executor", evidence)
        return attempt_no

    def fact(self, kind: EventKind, actor: str, evidence: JSONObject | None = None) -> None:
        n = self.snapshot.epoch
        event = Event(self.next_id(), self.instance_id, n, kind, actor, self.now, evidence or {})
        assert self.ledger.apply(event).outcome is judge.Outcome.APPLIED

    def worker(self, kind: EventKind, evidence: JSONObject | None = None) -> None:
        n = self.snapshot.epoch
        self.seq[n] = self.seq.get(n, 0) + 1
        event = Event(
            self.next_id(),
            self.instance_id,
            n,
            kind,
            "worker",
            self.now,
            evidence or {},
            seq=self.seq[n],
            attempt_token=self.token(n),
        )
        assert self.ledger.apply(event).outcome is judge.Outcome.APPLIED

    def started(self) -> None:
        self.worker(EventKind.STARTED, {"worker": "host-a:1"})

    def completed(self, exit_code: int) -> None:
        category = "none" if exit_code == 0 else "task_error"
        self.worker(EventKind.COMPLETED, {"exit_code": exit_code, "error_category": category})

    def monitor(self) -> list[EventKind]:
        decided = decide.monitor(self.snapshot, self.policy, now=self.now, next_id=self.next_id)
        for event in decided:
            self.ledger.apply(event)
        return [e.kind for e in decided]

    def reconcile(self, engine_state: EngineState | None = None) -> list[EventKind]:
        observation = None
        if engine_state is not None:
            observation = decide.Observation(engine_state, "supervisor", self.now)
        decided = decide.reconcile(
            self.snapshot, self.policy, observation, now=self.now, next_id=self.next_id
        ).events
        for event in decided:
            self.ledger.apply(event)
        return [e.kind for e in decided]


def _gap_of_45s(recorder: Recorder) -> None:
    """Started, a heartbeat, 45 seconds of silence, a heartbeat, success; the monitor looks
    every ten seconds."""
    recorder.at(0).open()
    recorder.at(2).started()
    recorder.at(10).worker(EventKind.HEARTBEAT)
    for second in range(20, 55, 10):
        recorder.at(second).monitor()
    recorder.at(55).worker(EventKind.HEARTBEAT)
    recorder.at(60).completed(0)


def _replay(engine: Engine, policy: str, definition: str | None = None) -> what_if.Report:
    platform = Platform(Ledger(engine), Path("."))
    change = what_if.parse_policy(policy)
    return what_if.replay(platform, change, since=T0, definition=definition)


def _only(report: what_if.Report) -> what_if.InstanceReplay:
    (run,) = report.runs
    (instance,) = run.instances
    assert instance.reproduces_recording
    return instance


def _differences(instance: what_if.InstanceReplay) -> dict[str, Any]:
    return {d.aspect.value: d.to_json() for d in instance.comparison.differences}


def test_a_45s_heartbeat_gap_is_lost_under_a_30s_lease_and_not_under_60s(engine: Engine) -> None:
    sixty = Recorder(engine, TaskPolicy(lease=timedelta(seconds=60)), definition="lease60")
    _gap_of_45s(sixty)
    thirty = Recorder(engine, TaskPolicy(lease=timedelta(seconds=30)), definition="lease30")
    _gap_of_45s(thirty)
    assert [r.kind for r in thirty.ledger.recorded_events(thirty.instance_id)].count(
        EventKind.LEASE_EXPIRED
    ) == 1, "the 30s lease was called LOST when it was recorded"

    shorter = _only(_replay(engine, "lease=30s", definition="lease60"))
    found = _differences(shorter)
    assert found["lost"]["recorded"] == []
    assert found["lost"]["what_if"] == [{"attempt_no": 1, "at": at(40)}]
    assert "outcome" not in found, "the heartbeat at 55s came back within the window"

    longer = _only(_replay(engine, "lease=60s", definition="lease30"))
    found = _differences(longer)
    assert found["lost"]["recorded"] == [{"attempt_no": 1, "at": at(40)}]
    assert found["lost"]["what_if"] == []
    totals = _replay(engine, "lease=60s", definition="lease30").totals()
    assert totals["lost"] == {"recorded": 1, "what_if": 0}


def test_no_retries_fail_the_run_at_the_first_failure(engine: Engine) -> None:
    policy = TaskPolicy(retry=RetryPolicy(max_retries=2, delay=timedelta(seconds=10)))
    recorder = Recorder(engine, policy, definition="flaky")
    recorder.at(0).open()
    recorder.at(2).started()
    recorder.at(20).completed(1)
    retry_at = recorder.snapshot.retry_at
    assert retry_at is not None and recorder.snapshot.state is InstanceState.UP_FOR_RETRY
    recorder.now = retry_at
    assert recorder.open() == 2
    recorder.at(50).started()
    recorder.at(70).completed(0)
    ended = recorder.snapshot
    assert ended.state is InstanceState.SUCCESS

    report = _replay(engine, "retries=0")
    found = _differences(_only(report))
    assert [a["attempt_no"] for a in found["attempts"]["what_if"]] == [1]
    assert found["outcome"]["recorded"]["state"] == "SUCCESS"
    assert found["outcome"]["what_if"] == {
        "state": "FAILED",
        "at": at(20),
        "duration_seconds": 20.0,
        "lower_bound": False,
    }
    data: Any = report.to_json()
    (run,) = data["runs"]
    assert run["what_if"]["failed_at"] == at(20) and run["recorded"]["failed_at"] is None
    assert report.totals()["failed"] == {"recorded": 0, "what_if": 1}

    more = _differences(_only(_replay(engine, "retries=5")))
    assert more == {}, "a success is not retried, whatever the retry count"


def test_a_shorter_evidence_window_fences_the_unknown_attempt_sooner(engine: Engine) -> None:
    policy = TaskPolicy(
        retry=RetryPolicy(max_retries=1),
        lease=timedelta(seconds=30),
        evidence_window=timedelta(minutes=5),
    )
    recorder = Recorder(engine, policy, definition="silent")
    recorder.at(0).open()
    recorder.at(2).started()
    recorder.at(10).worker(EventKind.HEARTBEAT)
    assert recorder.at(40).monitor() == [EventKind.LEASE_EXPIRED]
    assert recorder.at(60).reconcile(EngineState.NOT_FOUND) == []  # the window is open
    assert recorder.at(340).reconcile(EngineState.NOT_FOUND) == [EventKind.FENCED]
    assert recorder.at(341).open() == 2
    recorder.at(343).started()
    recorder.at(400).completed(0)

    found = _differences(_only(_replay(engine, "evidence_window=2m")))
    assert found["fenced"] == {
        "what": "fenced",
        "recorded": [{"attempt_no": 1, "at": at(340)}],
        "what_if": [{"attempt_no": 1, "at": at(160)}],
    }
    # The retry opens as long after the fencing as it did (1s) and runs as long (59s).
    assert found["outcome"]["what_if"]["at"] == at(220)
    assert found["outcome"]["recorded"]["at"] == at(400)

    waiting = _differences(_only(_replay(engine, "on_unknown=wait")))
    assert waiting["fenced"]["what_if"] == []
    assert waiting["outcome"]["what_if"]["state"] == "LOST"


def _counts(engine: Engine) -> dict[str, int]:
    tables = ("events", "task_instances", "attempts", "runs", "operations", "rejected_events")
    with dialects.read_transaction(engine) as connection:
        return {
            name: connection.execute(
                sa.select(sa.func.count()).select_from(schema.metadata.tables[name])
            ).scalar_one()
            for name in tables
        }


def test_the_json_of_the_cli_and_a_ledger_left_as_it_was(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    _gap_of_45s(Recorder(engine, TaskPolicy(), definition="nightly"))
    before = _counts(engine)
    found = veritask(
        "replay",
        "--policy",
        "lease=30s, retries=1",
        "--since",
        T0.isoformat(),
        "--database-url",
        database_url,
        "--json",
        home=tmp_path,
    )
    assert found.returncode == 0, found.stderr
    assert _counts(engine) == before, "a what-if replay writes nothing"
    data = json.loads(found.stdout)
    assert data["policy"] == {"lease": 30.0, "retries": 1}
    assert data["since"] == T0.isoformat() and data["until"] is None
    assert data["truncated"] is False
    assert data["totals"]["runs"] == 1 and data["totals"]["lost"] == {"recorded": 0, "what_if": 1}
    (run,) = data["runs"]
    assert set(run) == {"id", "definition", "execution_state", "recorded", "what_if", "instances"}
    assert run["definition"] == "nightly" and run["execution_state"] == "SUCCESS"
    (instance,) = run["instances"]
    assert instance["task"] == "extract" and instance["state"] == "SUCCESS"
    assert instance["reproduces_recording"] is True
    assert [d["what"] for d in instance["differences"]] == ["lost"]
    assert set(instance["what_if"]) == {"attempts", "lost", "fenced", "outcome"}

"""A builder that tells an instance's story one event at a time through ``judge``.

The demo, the generated docs and the tests use it to drive the core as the loops would,
with a clock that only moves when told to.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from veritask.core import decide, judge
from veritask.core.events import Event, EventKind, fingerprint
from veritask.core.fold import InstanceSnapshot, derive, empty
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import TaskPolicy
from veritask.core.states import EngineState, InstanceState

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Story:
    """An instance whose events are judged and recorded as the ledger would."""

    def __init__(self, policy: TaskPolicy | None = None, instance_id: str = "inst") -> None:
        self.policy = policy or TaskPolicy()
        self.instance_id = instance_id
        self.snapshot: InstanceSnapshot = derive(empty(instance_id), self.policy)
        self.clock = T0
        self.count = 0
        self.seq: dict[int, int] = {}
        self.verdicts: list[judge.Verdict] = []
        self.send(EventKind.INSTANCE_CREATED, 0, "scheduler", {"task_key": "extract"})

    # -- plumbing -------------------------------------------------------------------------

    def tick(self, seconds: float = 1) -> datetime:
        self.clock += timedelta(seconds=seconds)
        return self.clock

    def next_id(self) -> str:
        self.count += 1
        return f"ev-{self.count:04d}"

    def token(self, attempt_no: int) -> str:
        return f"secret-{self.instance_id}-{attempt_no}"

    def make(
        self,
        kind: EventKind,
        attempt_no: int,
        actor: str,
        evidence: JSONObject | None = None,
        *,
        token: str | None = None,
    ) -> Event:
        seq = None
        if actor == "worker":
            self.seq[attempt_no] = self.seq.get(attempt_no, 0) + 1
            seq = self.seq[attempt_no]
            token = token or self.token(attempt_no)
        return Event(
            self.next_id(),
            self.instance_id,
            attempt_no,
            kind,
            actor,
            self.tick(),
            evidence or {},
            seq,
            self.clock,
            token,
        )

    def record(self, event: Event, known: Event | None = None) -> judge.Verdict:
        if event.observed_at is None:
            # The ledger stamps the time it learned of an event; the story's clock stands in.
            event = replace(event, observed_at=self.clock)
        digest = None if known is None else fingerprint(known)
        verdict = judge.judge(self.snapshot, event, self.policy, known_fingerprint=digest)
        self.verdicts.append(verdict)
        if verdict.recorded:
            self.snapshot = verdict.after
        return verdict

    def send(
        self,
        kind: EventKind,
        attempt_no: int,
        actor: str,
        evidence: JSONObject | None = None,
        *,
        token: str | None = None,
    ) -> judge.Verdict:
        return self.record(self.make(kind, attempt_no, actor, evidence, token=token))

    @property
    def state(self) -> InstanceState:
        return self.snapshot.state

    @property
    def epoch(self) -> int:
        return self.snapshot.epoch

    # -- the actors' moves ----------------------------------------------------------------

    def open(self) -> judge.Verdict:
        self.tick()
        event = decide.open_attempt(
            self.snapshot,
            token_hash=judge.hash_token(self.token(judge.next_attempt_no(self.snapshot))),
            now=max(self.clock, self.snapshot.retry_at or self.clock),
            event_id=self.next_id(),
        )
        if event is None:
            raise ValueError(f"no attempt may open from {self.state}")
        return self.record(event)

    def ack(self, attempt_no: int | None = None) -> judge.Verdict:
        n = attempt_no or self.epoch
        evidence: JSONObject = {"external_id": f"local:{n}", "executor": "local"}
        return self.send(EventKind.SUBMIT_ACKNOWLEDGED, n, "executor", evidence)

    def submit_failed(self, *, retryable: bool = True) -> judge.Verdict:
        evidence: JSONObject = {"error": "no such image", "retryable": retryable}
        return self.send(EventKind.SUBMIT_FAILED, self.epoch, "executor", evidence)

    def start(self, attempt_no: int | None = None) -> judge.Verdict:
        n = attempt_no or self.epoch
        return self.send(EventKind.STARTED, n, "worker", {"worker": "host-a:41"})

    def heartbeat(self, attempt_no: int | None = None) -> judge.Verdict:
        return self.send(EventKind.HEARTBEAT, attempt_no or self.epoch, "worker")

    def complete(
        self, exit_code: int | None = 0, category: str = "none", attempt_no: int | None = None
    ) -> judge.Verdict:
        evidence: JSONObject = {"exit_code": exit_code, "error_category": category}
        return self.send(EventKind.COMPLETED, attempt_no or self.epoch, "worker", evidence)

    def engine(self, state: EngineState, **extra: str | int | None) -> judge.Verdict:
        evidence: JSONObject = {"engine_state": state.value, "source": "exit_record", **extra}
        return self.send(EventKind.ENGINE_OBSERVED, self.epoch, "reconciler", evidence)

    def run_until_lost(self) -> judge.Verdict:
        self.open()
        self.ack()
        self.start()
        current = self.snapshot.current
        seen = current.max_report_seq if current else 0
        evidence: JSONObject = {
            "last_report_seq": seen,
            "lease_expires_at": self.clock.isoformat(),
        }
        return self.send(EventKind.LEASE_EXPIRED, self.epoch, "monitor", evidence)

    def cancel(self, actor: str = "operator:alice") -> judge.Verdict:
        event = decide.request_stop(
            self.snapshot,
            actor=actor,
            reason="wrong input",
            now=self.tick(),
            event_id=self.next_id(),
        )
        if event is None:
            raise ValueError(f"nothing to cancel in {self.state}")
        return self.record(event)

    def timeout(self) -> judge.Verdict:
        evidence: JSONObject = {"timeout_seconds": 60}
        return self.send(EventKind.TIMEOUT_REQUESTED, self.epoch, "monitor", evidence)

    def confirm_stop(self) -> judge.Verdict:
        evidence: JSONObject = {"engine_state": "not_found", "source": "process_table"}
        return self.send(EventKind.CANCEL_CONFIRMED, self.epoch, "reconciler", evidence)

    def unconfirm_stop(self) -> judge.Verdict:
        evidence: JSONObject = {"engine_state": "running", "window_seconds": 120}
        return self.send(EventKind.CANCEL_UNCONFIRMED, self.epoch, "reconciler", evidence)

    def never_received(self) -> judge.Verdict:
        evidence: JSONObject = {"engine_state": "not_found", "source": "supervisor"}
        return self.send(EventKind.NEVER_RECEIVED, self.epoch, "reconciler", evidence)

    def fence(self, on_unknown: str = "retry") -> judge.Verdict:
        evidence: JSONObject = {"reason": "window closed", "on_unknown": on_unknown, "gathered": {}}
        return self.send(EventKind.FENCED, self.epoch, "reconciler", evidence)

    def override(self, to_state: str = "SUCCESS", reason: str = "checked by hand") -> judge.Verdict:
        evidence: JSONObject = {"to_state": to_state, "reason": reason, "scope": "instance"}
        return self.send(EventKind.OVERRIDE, self.epoch, "operator:alice", evidence)

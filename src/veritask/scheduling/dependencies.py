"""Dependencies between pipelines: wait until another definition's run is PUBLISHED (4.4).

A run whose definition has ``wait_for`` starts none of its root tasks until, for every
dependency, the other definition's run of the same logical time (or, with ``lag``, of this
run's logical time minus the lag) is PUBLISHED. Execution
success alone never releases it (invariant 11). A run by hand without a logical time of its
caller's choosing waits for the other definition's most recent run; one given a logical time
waits for that time's run, like a scheduled run. Past the dependency's timeout, counted from
the run's creation, the roots become UPSTREAM_FAILED with the reason, and an alert with the
``dependency`` owner category is raised.

While a run waits its reason says for what (recorded with a ``dependencies_awaited`` event);
its release is a ``dependencies_released`` event naming the upstream runs and the events that
published them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from veritask.core import reasons
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import PublicationState, TriggerKind
from veritask.definitions.model import Definition
from veritask.ledger import run_store
from veritask.ledger.database import Connection

#: The run-level events of a wait: the run keeps its state, its reason says why.
AWAITED_KIND = "dependencies_awaited"
RELEASED_KIND = "dependencies_released"

_BY_HAND = (TriggerKind.MANUAL, TriggerKind.API)


@dataclass(frozen=True)
class Looked:
    """One dependency as it was looked at: the definition, the logical time it needs (None:
    the latest run) and the upstream run found, if any."""

    definition: str
    logical_time: datetime | None
    run: run_store.UpstreamRun | None

    def evidence(self) -> JSONObject:
        found = self.run
        return {
            "definition": self.definition,
            "logical_time": self.logical_time.isoformat() if self.logical_time else None,
            "run_id": found.id if found else None,
            "run_logical_time": (
                found.logical_time.isoformat() if found and found.logical_time else None
            ),
            "publication_state": found.publication_state.value if found else None,
        }


@dataclass(frozen=True)
class Verdict:
    """Whether the run's roots may start, must keep waiting, or waited too long."""

    released: bool
    timed_out: bool
    reason: str
    looked: tuple[Looked, ...] = ()

    def evidence(self) -> JSONObject:
        """What the verdict saw, for the event that records it (never empty)."""
        listed: list[JSONValue] = [item.evidence() for item in self.looked]
        return {"released": self.released, "timed_out": self.timed_out, "dependencies": listed}


def waited_time(
    connection: Connection,
    *,
    run_id: str,
    trigger_kind: TriggerKind,
    logical_time: datetime | None,
) -> datetime | None:
    """The logical time the run's dependencies are matched on; None: the latest run.

    A run by hand has the trigger time as its logical time, which no upstream run has: it
    waits for the upstream's latest publication, unless its caller chose the logical time
    (its creation says so), which it then waits for like a scheduled run. A rerun keeps the
    logical time of the run it reruns, and waits as that run (the first of the chain) did.
    """
    if trigger_kind is TriggerKind.RERUN:
        run_id, trigger_kind = run_store.rerun_origin(connection, run_id)
    if trigger_kind not in _BY_HAND:
        return logical_time
    given = run_store.creation_evidence(connection, run_id).get("logical_time_given") is True
    return logical_time if given else None


def check(
    connection: Connection,
    definition: Definition,
    *,
    logical_time: datetime | None,
    created_at: datetime,
    now: datetime,
) -> Verdict:
    """Look at every dependency of the definition for the run of this logical time."""
    waiting: list[str] = []
    looked: list[Looked] = []
    for dependency in definition.wait_for:
        wanted = None if logical_time is None else logical_time - dependency.lag
        found = run_store.latest_upstream(connection, dependency.definition, wanted)
        looked.append(Looked(dependency.definition, wanted, found))
        state = None if found is None else found.publication_state
        if state is PublicationState.PUBLISHED:
            continue
        name = dependency.definition
        what = (
            reasons.DEPENDENCY_AT.format(definition=name, at=wanted.isoformat())
            if wanted
            else reasons.DEPENDENCY_LATEST.format(definition=name)
        )
        seen = (
            reasons.NO_RUN_YET.format()
            if state is None
            else reasons.PUBLICATION_IS.format(state=state)
        )
        if dependency.timeout is not None and now >= created_at + dependency.timeout:
            return Verdict(
                False,
                True,
                reasons.DEPENDENCY_TIMED_OUT.format(
                    what=what, timeout=dependency.timeout, seen=seen
                ),
                tuple(looked),
            )
        waiting.append(
            reasons.PENDING_NO_RUN.format(what=what)
            if state is None
            else reasons.PENDING_PUBLICATION.format(what=what, state=state)
        )
    if waiting:
        return Verdict(
            False, False, reasons.WAITING_FOR.format(what="; ".join(waiting)), tuple(looked)
        )
    return Verdict(True, False, reasons.EVERY_DEPENDENCY_PUBLISHED.format(), tuple(looked))


def release_evidence(connection: Connection, verdict: Verdict) -> JSONObject:
    """The evidence of a release: each upstream run, its logical time and the event that
    published it."""
    upstreams: list[JSONValue] = []
    for item in verdict.looked:
        entry = item.evidence()
        entry["published_event_id"] = (
            run_store.published_event_id(connection, item.run.id) if item.run else None
        )
        upstreams.append(entry)
    return {"released": True, "upstreams": upstreams}

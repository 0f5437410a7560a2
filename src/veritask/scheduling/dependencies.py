"""Dependencies between pipelines: wait until another definition's run is PUBLISHED (4.4).

A run whose definition has ``wait_for`` starts none of its root tasks until, for every
dependency, the other definition's run of the same logical time (or, with ``lag``, of this
run's logical time minus the lag) is PUBLISHED. Execution
success alone never releases it (invariant 11). A run with no logical time (a manual run)
waits for the other definition's most recent run. Past the dependency's timeout, counted from
the run's creation, the roots become UPSTREAM_FAILED with the reason, and an alert with the
``dependency`` owner category is raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from veritask.core import reasons
from veritask.core.states import PublicationState
from veritask.definitions.model import Definition
from veritask.ledger import run_store
from veritask.ledger.database import Connection


@dataclass(frozen=True)
class Verdict:
    """Whether the run's roots may start, must keep waiting, or waited too long."""

    released: bool
    timed_out: bool
    reason: str


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
    for dependency in definition.wait_for:
        wanted = None if logical_time is None else logical_time - dependency.lag
        state = run_store.latest_publication(connection, dependency.definition, wanted)
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
            )
        waiting.append(
            reasons.PENDING_NO_RUN.format(what=what)
            if state is None
            else reasons.PENDING_PUBLICATION.format(what=what, state=state)
        )
    if waiting:
        return Verdict(False, False, reasons.WAITING_FOR.format(what="; ".join(waiting)))
    return Verdict(True, False, reasons.EVERY_DEPENDENCY_PUBLISHED.format())

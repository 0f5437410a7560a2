"""The coarse vocabulary of ``/api/v1``: four values, always with ``raw_state``.

The table is shown in docs/state-machine.md, 'The `/api/v1` vocabulary'.

Older clients and reports know only these four. The mapping is this one table; the API and
the docs read it, and a test checks that every instance state has exactly one coarse value.
"""

from __future__ import annotations

from enum import StrEnum

from veritask.core.states import AttemptState, InstanceState


class CoarseState(StrEnum):
    """What ``/api/v1`` shows."""

    WAITING = "WAITING"
    """Not running yet: waiting for dependencies, the executor or a retry."""
    RUNNING = "RUNNING"
    """Running, or its fate is being established (lost, stopping)."""
    SUCCESS = "SUCCESS"
    """Succeeded or was skipped."""
    FAILED = "FAILED"
    """Ended without success for any reason."""


V1_STATE: dict[InstanceState, CoarseState] = {
    InstanceState.CREATED: CoarseState.WAITING,
    InstanceState.SCHEDULED: CoarseState.WAITING,
    InstanceState.QUEUED: CoarseState.WAITING,
    InstanceState.UP_FOR_RETRY: CoarseState.WAITING,
    InstanceState.RUNNING: CoarseState.RUNNING,
    InstanceState.LOST: CoarseState.RUNNING,
    InstanceState.CANCELLING: CoarseState.RUNNING,
    InstanceState.CANCEL_FAILED: CoarseState.RUNNING,
    InstanceState.SUCCESS: CoarseState.SUCCESS,
    InstanceState.SKIPPED: CoarseState.SUCCESS,
    InstanceState.FAILED: CoarseState.FAILED,
    InstanceState.START_FAILED: CoarseState.FAILED,
    InstanceState.TIMEOUT: CoarseState.FAILED,
    InstanceState.CANCELLED: CoarseState.FAILED,
    InstanceState.UPSTREAM_FAILED: CoarseState.FAILED,
    InstanceState.REMOVED: CoarseState.FAILED,
}


def to_v1(state: InstanceState) -> dict[str, str]:
    """The v1 view of a state: the coarse value and the raw one, so nothing is lost."""
    return {"state": V1_STATE[state].value, "raw_state": state.value}


#: States of attempts and runs that no instance state shares; everything else maps by name.
V1_OTHER_STATE: dict[str, CoarseState] = {
    AttemptState.NOT_RECEIVED.value: CoarseState.FAILED,
    AttemptState.ABANDONED.value: CoarseState.FAILED,
}


def coarse(raw: str) -> CoarseState | None:
    """The v1 value of any state name (instance, attempt or run), None outside them all.

    Attempt and run states that share an instance state's name mean the same and map the
    same; the two attempt-only states map as the instance would end.
    """
    if raw in V1_OTHER_STATE:
        return V1_OTHER_STATE[raw]
    try:
        return V1_STATE[InstanceState(raw)]
    except ValueError:
        return None

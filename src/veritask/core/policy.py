"""Per-task policies: retries, timeouts, leases and what to do when evidence stays unknown.

Policies are frozen and validated when built, so a bad value is refused where it is written,
not when the first retry needs it. Jitter is a pure function of the instance and the retry
number, so every fold computes the same ``retry_at``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from veritask.core import problems
from veritask.core.errors import InvalidPolicy
from veritask.core.jsontypes import JSONObject
from veritask.core.states import AttemptState


class Backoff(StrEnum):
    """How the delay grows between retries."""

    FIXED = "fixed"
    """Every retry waits ``delay``."""
    EXPONENTIAL = "exponential"
    """Retry k waits ``delay * 2**(k-1)``, capped at ``max_delay``."""


class OnUnknown(StrEnum):
    """What the reconciler does when the evidence window closes with the fate still unknown."""

    RETRY = "retry"
    """Fence the old attempt and open the next one (counts as a retry)."""
    FAIL = "fail"
    """Fence the old attempt and fail the instance."""
    WAIT = "wait"
    """Stay LOST and keep the alert open until evidence or an operator decides."""


#: End states that a retry may follow unless the policy says otherwise; CANCELLED never.
DEFAULT_RETRYABLE = frozenset(
    {AttemptState.FAILED, AttemptState.START_FAILED, AttemptState.TIMEOUT}
)
_NEVER_RETRYABLE = frozenset({AttemptState.CANCELLED, AttemptState.SUCCESS, AttemptState.SKIPPED})


@dataclass(frozen=True)
class RetryPolicy:
    """How many retries an instance gets and how long each waits."""

    max_retries: int = 0
    backoff: Backoff = Backoff.EXPONENTIAL
    delay: timedelta = timedelta(seconds=30)
    max_delay: timedelta = timedelta(minutes=10)
    jitter: float = 0.1
    retry_on: frozenset[AttemptState] = DEFAULT_RETRYABLE

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            at_least = problems.AT_LEAST.format(minimum=0, number=self.max_retries)
            raise InvalidPolicy(f"retry.max_retries: {at_least}")
        if self.delay < timedelta(0):
            raise InvalidPolicy(f"retry.delay: {problems.NOT_NEGATIVE.format(value=self.delay)}")
        if self.max_delay < self.delay:
            shorter = problems.SHORTER_THAN_DELAY.format(max_delay=self.max_delay, delay=self.delay)
            raise InvalidPolicy(f"retry.max_delay: {shorter}")
        if not 0.0 <= self.jitter <= 1.0:
            between = problems.BETWEEN.format(low=0, high=1, number=self.jitter)
            raise InvalidPolicy(f"retry.jitter: {between}")
        forbidden = self.retry_on & _NEVER_RETRYABLE
        if forbidden:
            names = ", ".join(sorted(forbidden))
            raise InvalidPolicy(f"retry.retry_on: {problems.NEVER_RETRIED.format(states=names)}")

    def delay_before(self, *, retry_number: int, seed: str) -> timedelta:
        """The wait before retry ``retry_number`` (1 for the first retry).

        The base grows as the backoff says and is capped at ``max_delay``; the jitter then
        moves it by at most ``jitter`` of itself, in a direction fixed by ``seed``.
        """
        if retry_number < 1:
            raise InvalidPolicy(f"retry_number: must be 1 or more, got {retry_number}")
        # Grow in float seconds, capped before it becomes a timedelta: 2**(k-1) days of delay
        # would overflow timedelta long before the cap applies.
        growth = 2.0 ** min(retry_number - 1, 1000) if self.backoff is Backoff.EXPONENTIAL else 1.0
        seconds = min(self.delay.total_seconds() * growth, self.max_delay.total_seconds())
        base = timedelta(seconds=seconds)
        digest = hashlib.sha256(f"{seed}/{retry_number}".encode()).digest()
        unit = int.from_bytes(digest[:8], "big") / 2**64  # in [0, 1)
        factor = 1.0 + self.jitter * (2.0 * unit - 1.0)
        return timedelta(microseconds=round(base / timedelta(microseconds=1) * factor))


@dataclass(frozen=True)
class TaskPolicy:
    """Everything the fold and the loops need to know about one task's behaviour."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: timedelta | None = None
    lease: timedelta = timedelta(seconds=60)
    evidence_window: timedelta = timedelta(minutes=5)
    cancel_window: timedelta = timedelta(minutes=2)
    on_unknown: OnUnknown = OnUnknown.RETRY
    max_resubmits: int = 3
    requires_commit: bool = False

    def __post_init__(self) -> None:
        for name in ("lease", "evidence_window", "cancel_window"):
            value: timedelta = getattr(self, name)
            if value <= timedelta(0):
                raise InvalidPolicy(f"{name}: {problems.MUST_BE_POSITIVE.format(value=value)}")
        if self.timeout is not None and self.timeout <= timedelta(0):
            positive = problems.MUST_BE_POSITIVE.format(value=self.timeout)
            raise InvalidPolicy(f"timeout: {positive}")
        if self.max_resubmits < 0:
            at_least = problems.AT_LEAST.format(minimum=0, number=self.max_resubmits)
            raise InvalidPolicy(f"max_resubmits: {at_least}")

    def to_json(self) -> JSONObject:
        """The policy as stored beside the instance: only what differs from
        :data:`STORED_DEFAULTS`, since every instance of every run keeps one."""
        full = self.full_json()
        out: JSONObject = {k: v for k, v in full.items() if v != STORED_DEFAULTS[k]}
        retry = full["retry"]
        if "retry" in out and isinstance(retry, dict):
            out["retry"] = {k: v for k, v in retry.items() if v != _STORED_RETRY_DEFAULTS[k]}
        return out

    def full_json(self) -> JSONObject:
        """Every field, the first format of :meth:`to_json` (still read)."""
        r = self.retry
        return {
            "retry": {
                "max_retries": r.max_retries,
                "backoff": r.backoff.value,
                "delay": r.delay.total_seconds(),
                "max_delay": r.max_delay.total_seconds(),
                "jitter": r.jitter,
                "retry_on": [s.value for s in sorted(r.retry_on)],
            },
            "timeout": None if self.timeout is None else self.timeout.total_seconds(),
            "lease": self.lease.total_seconds(),
            "evidence_window": self.evidence_window.total_seconds(),
            "cancel_window": self.cancel_window.total_seconds(),
            "on_unknown": self.on_unknown.value,
            "max_resubmits": self.max_resubmits,
            "requires_commit": self.requires_commit,
        }

    @classmethod
    def from_json(cls, data: JSONObject) -> TaskPolicy:
        """Read a policy written by :meth:`to_json` or :meth:`full_json`."""
        r = data.get("retry", {})
        if not isinstance(r, dict):
            raise InvalidPolicy("retry: expected an object")
        # Absent keys take the stored defaults; an unknown one is refused, not ignored.
        unknown = sorted(set(data) - set(STORED_DEFAULTS)) + sorted(
            f"retry.{k}" for k in set(r) - set(_STORED_RETRY_DEFAULTS)
        )
        if unknown:
            raise InvalidPolicy(f"unknown keys: {', '.join(unknown)}")
        r = {**_STORED_RETRY_DEFAULTS, **r}
        data = {**STORED_DEFAULTS, **data}
        timeout = data.get("timeout")
        return cls(
            retry=RetryPolicy(
                max_retries=_int(r["max_retries"]),
                backoff=Backoff(str(r["backoff"])),
                delay=_seconds(r["delay"]),
                max_delay=_seconds(r["max_delay"]),
                jitter=_float(r["jitter"]),
                retry_on=frozenset(AttemptState(str(s)) for s in _list(r["retry_on"])),
            ),
            timeout=None if timeout is None else _seconds(timeout),
            lease=_seconds(data["lease"]),
            evidence_window=_seconds(data["evidence_window"]),
            cancel_window=_seconds(data["cancel_window"]),
            on_unknown=OnUnknown(str(data["on_unknown"])),
            max_resubmits=_int(data["max_resubmits"]),
            requires_commit=bool(data["requires_commit"]),
        )


def _seconds(value: object) -> timedelta:
    return timedelta(seconds=_float(value))


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidPolicy(f"expected a number, got {value!r}")
    return float(value)


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPolicy(f"expected an integer, got {value!r}")
    return value


def _list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise InvalidPolicy(f"expected a list, got {value!r}")
    return list(value)


#: What a stored policy's absent key means. Frozen, unlike ``TaskPolicy()``'s defaults: a
#: default changed later must not change what a policy stored today says. Equal to
#: ``TaskPolicy().full_json()`` when written (tests/unit/test_policy.py watches it).
_STORED_RETRY_DEFAULTS: JSONObject = {
    "max_retries": 0,
    "backoff": "exponential",
    "delay": 30.0,
    "max_delay": 600.0,
    "jitter": 0.1,
    "retry_on": ["FAILED", "START_FAILED", "TIMEOUT"],
}
STORED_DEFAULTS: JSONObject = {
    "retry": _STORED_RETRY_DEFAULTS,
    "timeout": None,
    "lease": 60.0,
    "evidence_window": 300.0,
    "cancel_window": 120.0,
    "on_unknown": "retry",
    "max_resubmits": 3,
    "requires_commit": False,
}

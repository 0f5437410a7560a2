"""What-if replay over the ledger: finished runs' recorded evidence under another policy.

Reads only: it never records an event, a snapshot or an operation. The replay itself is the
pure :mod:`veritask.core.what_if`; this module reads the runs and their instances' events,
hands each instance to it and adds up what differs (docs/operations.md, 'What-if replay').
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from veritask.core import problems, what_if
from veritask.core.errors import InvalidPolicy
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import OnUnknown, TaskPolicy
from veritask.definitions.durations import InvalidDuration, parse_duration
from veritask.ledger import dialects, queries, timelines
from veritask.services import reading
from veritask.services.errors import InvalidInput
from veritask.services.platform import Platform

DEFAULT_LIMIT: Final = 1000
"""How many runs one replay reads at most, oldest first."""
_BATCH: Final = 50


def parse_policy(text: str) -> what_if.PolicyChange:
    """Read ``lease=30s,retries=5,evidence_window=2m,on_unknown=fail``.

    ``InvalidInput`` names the key and what is wrong with it: an unknown key (with the
    closest known one), a key given twice, a value that is not a duration, a whole number or
    one of the ``on_unknown`` choices.
    """
    values: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not item.strip():
            continue
        if not sep or not key:
            raise InvalidInput.about("policy", f"{item.strip()!r} is not key=value")
        if key not in what_if.POLICY_KEYS:
            close = difflib.get_close_matches(key, what_if.POLICY_KEYS, n=1)
            phrase = (
                problems.UNKNOWN_FIELD_HINT.format(name=key, close=close[0])
                if close
                else problems.UNKNOWN_FIELD.format(name=key)
            )
            raise InvalidInput.about("policy", f"{phrase}; known: {', '.join(what_if.POLICY_KEYS)}")
        if key in values:
            raise InvalidInput.about(f"policy.{key}", "given twice")
        values[key] = value
    if not values:
        known = ", ".join(what_if.POLICY_KEYS)
        raise InvalidInput.about("policy", f"nothing to change; give one of {known}")
    try:
        return what_if.PolicyChange(
            lease=_duration(values, "lease"),
            retries=_whole(values, "retries"),
            evidence_window=_duration(values, "evidence_window"),
            on_unknown=_on_unknown(values),
        )
    except InvalidPolicy as exc:
        raise InvalidInput.about("policy", str(exc)) from None


def _duration(values: dict[str, str], key: str) -> timedelta | None:
    if key not in values:
        return None
    try:
        return parse_duration(values[key])
    except InvalidDuration as exc:
        raise InvalidInput.about(f"policy.{key}", str(exc)) from None


def _whole(values: dict[str, str], key: str) -> int | None:
    if key not in values:
        return None
    text = values[key]
    if not text.isdigit():
        kind = problems.THE_STRING.format(value=text)
        raise InvalidInput.about(f"policy.{key}", problems.EXPECTED_WHOLE_NUMBER.format(kind=kind))
    return int(text)


def _on_unknown(values: dict[str, str]) -> OnUnknown | None:
    text = values.get("on_unknown")
    if text is None:
        return None
    try:
        return OnUnknown(text)
    except ValueError:
        choices = ", ".join(o.value for o in OnUnknown)
        raise InvalidInput.about(
            "policy.on_unknown", f"expected one of {choices}, got {text!r}"
        ) from None


@dataclass(frozen=True)
class InstanceReplay:
    """One instance replayed under both policies."""

    instance_id: str
    task_key: str
    map_index: int
    stored_state: str
    comparison: what_if.Comparison

    @property
    def reproduces_recording(self) -> bool:
        """Whether the replay under the recorded policy ends where the ledger did: when it
        does not, the recording holds something a replay cannot redo, so read the row with
        care."""
        recorded = self.comparison.recorded
        return recorded.state is not None and recorded.state.value == self.stored_state

    def to_json(self) -> JSONObject:
        c = self.comparison
        return {
            "id": self.instance_id,
            "task": self.task_key,
            "map_index": self.map_index,
            "state": self.stored_state,
            "reproduces_recording": self.reproduces_recording,
            "differences": [d.to_json() for d in c.differences],
            "recorded": _course_json(c.recorded),
            "what_if": _course_json(c.what_if),
        }


@dataclass(frozen=True)
class NotReplayed:
    """An instance a replay left out, and the operator's event kind that kept it out."""

    instance_id: str
    run_id: str
    task_key: str
    kind: str

    def to_json(self) -> JSONObject:
        return {"id": self.instance_id, "run": self.run_id, "task": self.task_key, "why": self.kind}


@dataclass(frozen=True)
class RunReplay:
    """A run's instances replayed under both policies."""

    run_id: str
    definition: str
    execution_state: str
    instances: tuple[InstanceReplay, ...]

    @property
    def differing(self) -> tuple[InstanceReplay, ...]:
        return tuple(i for i in self.instances if i.comparison.differences)

    def span(self, which: str) -> tuple[timedelta | None, datetime | None, bool]:
        """Under ``recorded`` or ``what_if``: the run's duration (first attempt opened to the
        last instance's end), when its first instance was called failed, and whether the
        duration is a lower bound (an instance's outcome is unknown)."""
        courses = [getattr(i.comparison, which) for i in self.instances]
        starts = [c.started_at for c in courses if c.started_at is not None]
        ends = [c.ended_at for c in courses if c.ended_at is not None]
        failed = [c.failed_at for c in courses if c.failed_at is not None]
        duration = max(ends) - min(starts) if starts and ends else None
        unknown = any(c.state is None for c in courses)
        return duration, min(failed) if failed else None, unknown

    def to_json(self) -> JSONObject:
        spans: dict[str, JSONValue] = {}
        for which in ("recorded", "what_if"):
            duration, failed_at, lower_bound = self.span(which)
            spans[which] = {
                "duration_seconds": None if duration is None else duration.total_seconds(),
                "failed_at": None if failed_at is None else failed_at.isoformat(),
                "lower_bound": lower_bound,
            }
        return {
            "id": self.run_id,
            "definition": self.definition,
            "execution_state": self.execution_state,
            **spans,
            "instances": [i.to_json() for i in self.differing],
        }


@dataclass(frozen=True)
class Report:
    """Every replayed run, the instances left out, and the totals."""

    change: what_if.PolicyChange
    since: datetime
    until: datetime | None
    runs: tuple[RunReplay, ...]
    not_replayed: tuple[NotReplayed, ...]
    truncated: bool

    def totals(self) -> dict[str, JSONValue]:
        instances = [i for r in self.runs for i in r.instances]

        def both(count: Callable[[what_if.Course], int]) -> JSONObject:
            return {
                "recorded": sum(count(i.comparison.recorded) for i in instances),
                "what_if": sum(count(i.comparison.what_if) for i in instances),
            }

        return {
            "runs": len(self.runs),
            "runs_differing": sum(1 for r in self.runs if r.differing),
            "instances": len(instances),
            "instances_differing": sum(1 for i in instances if i.comparison.differences),
            "attempts": both(lambda c: len(c.attempts)),
            "lost": both(lambda c: len(c.lost)),
            "failed": both(lambda c: 1 if c.failed_at is not None else 0),
            "unknown": both(lambda c: 1 if c.state is None else 0),
            "not_reproduced": sum(1 for i in instances if not i.reproduces_recording),
            "not_replayed": len(self.not_replayed),
        }

    def to_json(self) -> JSONObject:
        return {
            "policy": self.change.to_json(),
            "since": self.since.isoformat(),
            "until": None if self.until is None else self.until.isoformat(),
            "truncated": self.truncated,
            "totals": self.totals(),
            "runs": [r.to_json() for r in self.runs if r.differing],
            "not_replayed": [n.to_json() for n in self.not_replayed],
        }


def _course_json(course: what_if.Course) -> JSONObject:
    return {
        "attempts": [a.to_json() for a in course.attempts],
        "lost": [c.to_json() for c in course.lost],
        "fenced": [c.to_json() for c in course.fenced],
        "outcome": course.outcome_json(),
    }


def replay(
    platform: Platform,
    change: what_if.PolicyChange,
    *,
    since: datetime,
    until: datetime | None = None,
    definition: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Report:
    """Replay the finished runs created in ``[since, until)`` (of ``definition`` only, when
    given; ``NotFound`` if there is no such definition) under ``change``."""
    if limit < 1:
        raise InvalidInput.about("limit", problems.ONE_OR_MORE.format())
    if until is not None and until <= since:
        raise InvalidInput.about("until", f"must be after --since ({since.isoformat()})")
    with dialects.read_transaction(platform.engine) as connection:
        definition_id = None
        if definition is not None:
            definition_id = reading.definition_named(connection, definition).id
        rows = timelines.finished_runs(
            connection, since=since, until=until, definition_id=definition_id, limit=limit + 1
        )
        names = queries.definition_names(connection, {r.definition_id for r in rows})
    truncated = len(rows) > limit
    rows = rows[:limit]
    runs: list[RunReplay] = []
    left_out: list[NotReplayed] = []
    for start in range(0, len(rows), _BATCH):
        batch = rows[start : start + _BATCH]
        with dialects.read_transaction(platform.engine) as connection:
            histories = timelines.instance_histories(connection, [r.id for r in batch])
        by_run: dict[str, list[timelines.InstanceHistory]] = {}
        for history in histories:
            by_run.setdefault(history.run_id, []).append(history)
        for row in batch:
            replayed = _replay_run(by_run.get(row.id, []), change, left_out)
            name = names.get(row.definition_id, "")
            runs.append(RunReplay(row.id, name, row.execution_state, tuple(replayed)))
    return Report(change, since, until, tuple(runs), tuple(left_out), truncated)


def _replay_run(
    histories: Sequence[timelines.InstanceHistory],
    change: what_if.PolicyChange,
    left_out: list[NotReplayed],
) -> list[InstanceReplay]:
    replayed: list[InstanceReplay] = []
    for history in histories:
        if not any(e.attempt_no > 0 for e in history.events):
            continue  # decided without an attempt (skipped, upstream failed): nothing to replay
        kind = what_if.not_replayable(history.events)
        if kind is not None:
            left_out.append(
                NotReplayed(history.instance_id, history.run_id, history.task_key, kind.value)
            )
            continue
        policy = TaskPolicy.from_json(history.policy)
        comparison = what_if.compare(history.instance_id, history.events, policy, change)
        replayed.append(
            InstanceReplay(
                history.instance_id,
                history.task_key,
                history.map_index,
                history.state,
                comparison,
            )
        )
    return replayed

"""Which output of an instance flows to the tasks downstream (docs/definitions.md, "Outputs").

A task's output (the JSON it leaves in ``VERITASK_OUTPUT``, a callable's return value) belongs
to the attempt that wrote it and stays on that attempt's record. Only one of them ever flows
on: the output of the current attempt (the instance's epoch), and only when that attempt
succeeded. A fenced attempt that reports success late keeps its output on its own record; its
instance's state is not its success, so the output does not flow, even when an operator later
marks the instance SUCCESS.
"""

from __future__ import annotations

from veritask.core.facts import AttemptFacts
from veritask.core.fold import InstanceSnapshot
from veritask.core.jsontypes import JSONValue
from veritask.core.states import AttemptState, InstanceState


def attempt_output(facts: AttemptFacts | None) -> JSONValue:
    """What the attempt's deciding completion says it wrote (None when nothing)."""
    if facts is None or not facts.completions:
        return None
    return facts.completions[0].mark.evidence.get("output")


def current_output(snapshot: InstanceSnapshot) -> JSONValue:
    """The output that flows downstream: the current attempt's, when it succeeded and made
    its instance SUCCESS; None otherwise."""
    current = snapshot.current
    if (
        snapshot.state is not InstanceState.SUCCESS
        or current is None
        or current.state is not AttemptState.SUCCESS
    ):
        return None
    return attempt_output(snapshot.facts.attempt(snapshot.epoch))


def nul_at(value: JSONValue, path: str = "output") -> str | None:
    """Where the first NUL character (U+0000) of an output is, in a string or a key; None if
    it holds none. PostgreSQL stores no NUL in JSON, so such an output is refused where it is
    read, with the place named, rather than failing every attempt to record it."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = nul_at(item, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                return f"{path} (a key)"
            found = nul_at(item, f"{path}.{key}")
            if found is not None:
                return found
    return None

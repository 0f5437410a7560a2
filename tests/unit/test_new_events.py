"""Every event the platform sends is made by a named constructor of the core (core/new_events.py).

What a kind must carry is a keyword-only parameter without a default, so it cannot be left
out; and no other module builds an ``Event`` by hand, except those that decode one that
arrived (a worker's report, a row, a JSON record) and the demo's story, which sends any event,
well formed or not, to show how it is judged.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from veritask.core import decide, new_events
from veritask.core.events import (
    KIND_RULES,
    ClearScope,
    Event,
    EventKind,
    OpenReason,
    OverrideScope,
    malformation,
)
from veritask.core.policy import OnUnknown
from veritask.core.states import EngineState, InstanceState

SRC = Path(new_events.__file__).resolve().parents[1]
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WHO: new_events.Subject = {
    "event_id": "ev-1",
    "instance_id": "inst",
    "attempt_no": 1,
    "event_time": NOW,
}
SEEN = decide.Observation(EngineState.NOT_FOUND, "process_table", NOW)

#: Each constructor, the kind it makes, and a call of it with every parameter it needs.
MADE: dict[str, tuple[EventKind, Callable[[], Event]]] = {
    "instance_created": (
        EventKind.INSTANCE_CREATED,
        lambda: new_events.instance_created(
            event_id="ev-1",
            instance_id="inst",
            event_time=NOW,
            observed_at=NOW,
            task_key="extract",
            map_index=0,
            run_id="run",
        ),
    ),
    "attempt_opened": (
        EventKind.ATTEMPT_OPENED,
        lambda: new_events.attempt_opened(
            **WHO, token_hash="h", reason=OpenReason.FIRST, retry_index=0, resubmit_index=0
        ),
    ),
    "trigger_rule_decided": (
        EventKind.SKIPPED,
        lambda: new_events.trigger_rule_decided(
            EventKind.SKIPPED,
            event_id="ev-1",
            instance_id="inst",
            event_time=NOW,
            rule="all_success",
            upstream={"a": InstanceState.SKIPPED},
        ),
    ),
    "map_expanded": (
        EventKind.MAP_EXPANDED,
        lambda: new_events.map_expanded(
            event_id="ev-1",
            instance_id="inst",
            epoch=0,
            event_time=NOW,
            over="list_files",
            upstream_instance_id="up",
            upstream_attempt_no=1,
            items=["a", "b"],
        ),
    ),
    "cancel_requested": (
        EventKind.CANCEL_REQUESTED,
        lambda: new_events.cancel_requested(
            **WHO, actor="operator:alice", reason="wrong input", nothing_running=False
        ),
    ),
    "submit_acknowledged": (
        EventKind.SUBMIT_ACKNOWLEDGED,
        lambda: new_events.submit_acknowledged(
            **WHO, external_id="local:1", executor="local", resubmitted=False
        ),
    ),
    "submit_failed": (
        EventKind.SUBMIT_FAILED,
        lambda: new_events.submit_failed(**WHO, error="no such image", retryable=False),
    ),
    "output_committed": (
        EventKind.OUTPUT_COMMITTED,
        lambda: new_events.output_committed(
            **WHO, marker="m", via="commit_check", seq=1, attempt_token="secret"
        ),
    ),
    "lease_expired": (
        EventKind.LEASE_EXPIRED,
        lambda: new_events.lease_expired(
            **WHO, last_report_seq=3, lease_expires_at=NOW, last_report_at=None, lease_seconds=30.0
        ),
    ),
    "timeout_requested": (
        EventKind.TIMEOUT_REQUESTED,
        lambda: new_events.timeout_requested(
            **WHO, timeout_seconds=60.0, started_at=NOW, reason="ran past its timeout"
        ),
    ),
    "engine_observed": (
        EventKind.ENGINE_OBSERVED,
        lambda: new_events.engine_observed(**WHO, observation=SEEN),
    ),
    "never_received": (
        EventKind.NEVER_RECEIVED,
        lambda: new_events.never_received(**WHO, observation=SEEN),
    ),
    "cancel_confirmed": (
        EventKind.CANCEL_CONFIRMED,
        lambda: new_events.cancel_confirmed(**WHO, observation=SEEN),
    ),
    "cancel_unconfirmed": (
        EventKind.CANCEL_UNCONFIRMED,
        lambda: new_events.cancel_unconfirmed(**WHO, engine_state="running", window_seconds=120.0),
    ),
    "fenced": (
        EventKind.FENCED,
        lambda: new_events.fenced(
            **WHO, reason="fate unknown", on_unknown=OnUnknown.RETRY, gathered={}
        ),
    ),
    "override": (
        EventKind.OVERRIDE,
        lambda: new_events.override(
            **WHO,
            operator="operator:alice",
            to_state=InstanceState.SUCCESS,
            reason="checked by hand",
            scope=OverrideScope.INSTANCE,
            origin_instance="inst",
        ),
    ),
    "cleared": (
        EventKind.CLEARED,
        lambda: new_events.cleared(
            **WHO,
            operator="operator:alice",
            reason="the source was fixed",
            scope=ClearScope.DOWNSTREAM,
        ),
    ),
}

#: Evidence a constructor takes whole from another value, not key by key.
_CARRIED_BY = {"engine_state": "observation", "source": "observation", "count": "items"}


def test_every_public_constructor_is_covered_here() -> None:
    public = {
        name
        for name, value in vars(new_events).items()
        if inspect.isfunction(value)
        and not name.startswith("_")
        and value.__module__ == new_events.__name__
    }
    assert public == set(MADE)


@pytest.mark.parametrize("name", sorted(MADE))
def test_required_evidence_is_a_keyword_without_a_default(name: str) -> None:
    kind, _ = MADE[name]
    parameters = inspect.signature(getattr(new_events, name)).parameters
    for key in KIND_RULES[kind].evidence:
        param = parameters[key if key in parameters else _CARRIED_BY[key]]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, (name, key)
        assert param.default is inspect.Parameter.empty, (name, key)


@pytest.mark.parametrize("name", sorted(MADE))
def test_what_a_constructor_makes_is_well_formed(name: str) -> None:
    kind, make = MADE[name]
    event = make()
    assert event.kind is kind
    assert malformation(event) is None
    assert set(KIND_RULES[kind].evidence) <= set(event.evidence)


def test_leaving_out_required_evidence_fails_at_the_call() -> None:
    with pytest.raises(TypeError, match="retryable"):
        new_events.submit_failed(**WHO, error="no such image")  # type: ignore[call-arg]


def test_the_nonce_is_kept_last_only_when_given() -> None:
    opened = new_events.attempt_opened(
        **WHO, token_hash="h", reason=OpenReason.RETRY, retry_index=1, resubmit_index=0, nonce="n"
    )
    assert list(opened.evidence) == [
        "token_hash",
        "reason",
        "retry_index",
        "resubmit_index",
        "nonce",
    ]
    assert opened.evidence["reason"] == "retry"
    plain = MADE["attempt_opened"][1]()
    assert "nonce" not in plain.evidence


#: Modules that decode an event that arrived, and the demo's story, which sends any event.
_DECODERS = {
    "core/codec.py",
    "core/new_events.py",
    "ledger/statements.py",
    "scheduling/intake.py",
    "demo/story.py",
}


def _builds_an_event(call: ast.Call) -> bool:
    func = call.func
    name = (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )
    return name == "Event" and not (isinstance(func, ast.Attribute) and _threading(func))


def _threading(func: ast.Attribute) -> bool:
    # threading.Event and asyncio.Event are signals between threads or tasks, not events.
    return isinstance(func.value, ast.Name) and func.value.id in ("threading", "asyncio")


def test_no_module_builds_an_event_by_hand() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in _DECODERS:
            continue
        tree = ast.parse(path.read_text(), filename=relative)
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
        found += [f"{relative}:{call.lineno}" for call in calls if _builds_an_event(call)]
    assert found == [], "events built by hand, not by core/new_events.py: " + ", ".join(found)

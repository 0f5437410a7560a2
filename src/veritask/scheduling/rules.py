"""Trigger-rule decisions as events, and the choices of branch tasks (docs/trigger-rules.md)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal

from veritask.core import new_events, reasons
from veritask.core.events import Event, EventKind
from veritask.core.states import InstanceState
from veritask.ledger import run_store
from veritask.ledger.ledger import Ledger
from veritask.scheduling.dispatch import new_event_id


class BranchChoices:
    """Which direct downstream tasks a finished branch task chose (docs/trigger-rules.md)."""

    def __init__(self, ledger: Ledger, instance_ids: Mapping[str, str]) -> None:
        self.ledger = ledger
        self.instance_ids = instance_ids
        self._choices: dict[str, frozenset[str] | None] = {}

    def skipped_by(
        self, key: str, after: tuple[str, ...], upstream: Mapping[str, InstanceState]
    ) -> str | None:
        for up in after:
            if upstream.get(up) is not InstanceState.SUCCESS:
                continue
            chosen = self._chosen(up)
            if chosen is not None and key not in chosen:
                if not chosen:
                    return reasons.BRANCH_CHOSE_NOTHING.format(task=up)
                return reasons.BRANCH_CHOSE.format(task=up, tasks=", ".join(sorted(chosen)))
        return None

    def _chosen(self, task_key: str) -> frozenset[str] | None:
        if task_key not in self._choices:
            self._choices[task_key] = self._read(task_key)
        return self._choices[task_key]

    def _read(self, task_key: str) -> frozenset[str] | None:
        """The ``branch`` list the task's deciding completion wrote to its output, if any."""
        instance_id = self.instance_ids.get(task_key)
        loaded = self.ledger.snapshot(instance_id) if instance_id else None
        if loaded is None:
            return None
        snapshot, _ = loaded
        facts = snapshot.facts.attempt(snapshot.epoch)
        if facts is None or not facts.completions:
            return None
        output = facts.completions[0].mark.evidence.get("output")
        branch = output.get("branch") if isinstance(output, dict) else None
        if isinstance(branch, list):
            return frozenset(str(choice) for choice in branch)
        return None


def rule_event(
    brief: run_store.InstanceBrief,
    kind: Literal[EventKind.SKIPPED, EventKind.UPSTREAM_FAILED],
    rule: str,
    now: datetime,
    upstream: Mapping[str, InstanceState] | None = None,
) -> Event:
    return new_events.trigger_rule_decided(
        kind,
        event_id=new_event_id(),
        instance_id=brief.id,
        event_time=now,
        rule=rule,
        upstream=upstream or {},
    )

"""Expanding a mapped task over its upstream's output (docs/definitions.md, "Mapping").

When a mapped task's trigger rule lets it run, the output of the upstream it maps over decides
what happens to its unmapped instance (map index -1):

- a list of 1 to ``max_map`` items: one ``map_expanded`` event, recorded with the instances of
  the items (map index 0..n-1) in one transaction, carries the output they were made from;
  the unmapped instance is SUCCESS ("expanded into n instances") and the items run;
- an empty list: the task is SKIPPED (its downstream follows its trigger rules);
- anything else (not a list, more than ``max_map`` items): UPSTREAM_FAILED, naming why.

The expansion is a decision on the unmapped instance's snapshot (compare-and-set): a second
scheduler, or this one after a restart, finds it taken and creates nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from veritask.core import new_events, reasons
from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONValue
from veritask.ledger import errors, run_store
from veritask.ledger.ledger import Ledger
from veritask.scheduling import rules
from veritask.scheduling.dispatch import RunContext, new_event_id

log = logging.getLogger(__name__)


def decide(
    ledger: Ledger, context: RunContext, brief: run_store.InstanceBrief, now: datetime
) -> Event | list[JSONValue]:
    """The items to expand into, or the skip or failure the upstream's output decides."""
    task = context.definition.tasks[brief.task_key]
    over = str(task.map_over)
    value = ledger.current_outputs(context.run_id, [over]).get(over)
    rule = task.trigger_rule.value
    if not isinstance(value, list):
        why = reasons.MAP_NOT_A_LIST.format(task=over, kind=_kind(value))
        return rules.rule_event(brief, EventKind.UPSTREAM_FAILED, f"{rule}: {why}", now)
    if not value:
        why = reasons.MAP_EMPTY.format(task=over)
        return rules.rule_event(brief, EventKind.SKIPPED, f"{rule}: {why}", now)
    if len(value) > task.max_map:
        why = reasons.MAP_TOO_MANY.format(task=over, count=len(value), limit=task.max_map)
        return rules.rule_event(brief, EventKind.UPSTREAM_FAILED, f"{rule}: {why}", now)
    return value


def expand(
    ledger: Ledger,
    context: RunContext,
    brief: run_store.InstanceBrief,
    items: list[JSONValue],
    ids: Mapping[str, str],
    now: datetime,
) -> bool:
    """Record the expansion and create the items' instances; False when another scheduler
    (or an earlier try) decided the instance first."""
    over = str(context.definition.tasks[brief.task_key].map_over)
    upstream_id = ids.get(over, "")
    upstream = ledger.snapshot(upstream_id) if upstream_id else None
    policy = ledger.policy_of(brief.id)
    if policy is None:
        return False
    event = new_events.map_expanded(
        event_id=new_event_id(),
        instance_id=brief.id,
        epoch=brief.epoch,
        event_time=now,
        over=over,
        upstream_instance_id=upstream_id,
        upstream_attempt_no=upstream[0].epoch if upstream is not None else 0,
        items=items,
    )
    try:
        applied = ledger.expand_map(
            event,
            expected_version=brief.version,
            run_id=context.run_id,
            task_key=brief.task_key,
            policy=policy,
            new_id=new_event_id,
        )
    except errors.LedgerConflict as exc:  # decided meanwhile: the next pass reads it
        log.info("expanding %s of run %s: %s", brief.task_key, context.run_id, exc)
        return False
    return applied.snapshot is not None and applied.event_id == event.event_id


def _kind(value: JSONValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an object"

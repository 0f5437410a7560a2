"""A definition as the JSON object the ledger stores, and its content hash.

The object is itself a valid definition document, fully explicit: every task carries its
resolved policy, durations are seconds, and ``tasks`` is a *list* of objects with a ``key``
(JSONB, like other JSON stores, does not keep the order of an object's keys, and the task order
is the one the author wrote). ``parse.definition_from_json`` reads it back through the same
checks as YAML.

The content hash is the SHA-256 of a canonical form: keys sorted, no whitespace, tasks as an
object keyed by task (so their order does not count). Equal content gives an equal hash
whatever the formatting, key order or spelling (``1h`` or ``3600``, a value written in
``defaults`` or repeated in every task) of the source.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import TaskPolicy
from veritask.definitions import parameters
from veritask.definitions.durations import to_seconds
from veritask.definitions.model import (
    Definition,
    EnvValue,
    OnPublished,
    PublishSpec,
    Schedule,
    SecretRef,
    TaskSpec,
    WaitSpec,
)


def definition_to_json(definition: Definition) -> JSONObject:
    """The definition as stored: a JSON object that reads back to an equal definition."""
    d = definition
    return {
        "name": d.name,
        "description": d.description,
        "owner": d.owner,
        "schedule": _schedule(d.schedule),
        "concurrency": d.concurrency.value,
        "defaults": _policy(d.defaults),
        "parameters": parameters.to_json(d.parameters),
        "queue": d.queue,
        "tasks": [_task(task, d.priority) for task in d.tasks.values()],
        "publish": _publish(d.publish),
        "wait_for": [
            {
                "definition": w.definition,
                "published": w.published,
                "timeout": None if w.timeout is None else to_seconds(w.timeout),
                "lag": to_seconds(w.lag),
            }
            for w in d.wait_for
        ],
        "expected_finish": None if d.expected_finish is None else to_seconds(d.expected_finish),
        **_trigger(d.trigger),
        **_env(d.env),
        # Only when set: a definition without one keeps the hash it had.
        **({"priority": d.priority} if d.priority else {}),
        **({} if d.alert_on_failure else {"alert_on_failure": False}),
    }


def canonical_json(definition: Definition) -> str:
    """The text that :func:`content_hash` hashes."""
    data = definition_to_json(definition)
    data["tasks"] = {
        key: _task(task, definition.priority) for key, task in definition.tasks.items()
    }
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def content_hash(definition: Definition) -> str:
    """``sha256:<hex>`` of the canonical JSON: equal content, equal hash."""
    digest = hashlib.sha256(canonical_json(definition).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"


def _schedule(schedule: Schedule | None) -> JSONValue:
    if schedule is None:
        return None
    return {
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "catchup": {
            "enabled": schedule.catchup.enabled,
            "max_runs": schedule.catchup.max_runs,
        },
    }


def _policy(policy: TaskPolicy) -> JSONObject:
    retry = policy.retry
    return {
        "retry": {
            "max_retries": retry.max_retries,
            "backoff": retry.backoff.value,
            "delay": to_seconds(retry.delay),
            "max_delay": to_seconds(retry.max_delay),
            "jitter": retry.jitter,
        },
        "timeout": None if policy.timeout is None else to_seconds(policy.timeout),
        "lease": to_seconds(policy.lease),
        "evidence_window": to_seconds(policy.evidence_window),
        "cancel_window": to_seconds(policy.cancel_window),
        "on_unknown": policy.on_unknown.value,
    }


def _task(task: TaskSpec, priority: int) -> JSONObject:
    """The task as stored; ``priority`` is the definition's, which the task inherits."""
    data: JSONObject = {"key": task.key}
    if task.run is not None:
        data["run"] = task.run
    if task.call is not None:
        data["call"] = task.call
    if task.sql is not None:
        data["sql"] = task.sql
        data["connection"] = task.connection
    if task.wait is not None:
        data["wait"] = _wait(task.wait)
    data.update(
        {
            "with": dict(task.with_),
            "after": list(task.after),
            "trigger_rule": task.trigger_rule.value,
            "role": task.role.value,
            "decides_run": task.decides_run,
            "skip_exit_code": task.skip_exit_code,
            "queue": task.queue,
            "executor": task.executor,
            "requires_commit": task.requires_commit,
        }
    )
    data.update(_policy(task.policy))
    data.update(_env(task.env))
    if task.map_over is not None:  # absent otherwise: an unmapped task keeps its hash
        data["map"] = {"over": "{{ outputs." + task.map_over + " }}", "max_map": task.max_map}
    # Each only when it differs from what the task would get without it, so that a
    # definition that names none keeps the hash it had.
    if task.pool is not None:
        data["pool"] = task.pool
    if task.pool_slots != 1:
        data["pool_slots"] = task.pool_slots
    if task.priority != priority:
        data["priority"] = task.priority
    if task.log_limit is not None:
        data["log_limit"] = task.log_limit
    if task.container is not None:
        data["image"] = task.container.image
        if task.container.argv:
            data["run"] = list(task.container.argv)
        data["pull"] = task.container.pull.value
        for name, value in (
            ("cpus", task.container.cpus),
            ("memory", task.container.memory),
            ("workdir", task.container.workdir),
        ):
            if value is not None:
                data[name] = value
        # Each only when given, so that a container task that mounts nothing keeps its hash.
        if task.container.volumes:
            data["volumes"] = [str(volume) for volume in task.container.volumes]
        if task.container.secret_files:
            data["secret_files"] = dict(task.container.secret_files)
    if task.spark is not None:
        spark = task.spark
        if spark.app is not None:
            data["app"] = spark.app
        else:
            data["jar"] = spark.jar
            data["main_class"] = spark.main_class
        data["args"] = list(spark.args)
        data["conf"] = dict(spark.conf)
        del data["with"]  # a spark task's driver takes args, not parameters
    if task.sql is not None:
        del data["with"]  # a sql task has no parameters of its own: the statement is all
    return data


def _trigger(trigger: OnPublished | None) -> JSONObject:
    """``{"trigger": …}`` when there is one: a definition without one keeps the hash it had."""
    if trigger is None:
        return {}
    return {"trigger": {"on_published": list(trigger.upstreams), "when": trigger.when.value}}


def _wait(wait: WaitSpec) -> JSONObject:
    data: JSONObject = {wait.kind.value: wait.target}
    if wait.connection is not None:
        data["connection"] = wait.connection
    data.update(
        {
            "every": to_seconds(wait.every),
            "timeout": to_seconds(wait.timeout),
            "on_timeout": wait.on_timeout.value,
            "expected": None if wait.expected is None else to_seconds(wait.expected),
        }
    )
    return data


def _env(env: Mapping[str, EnvValue]) -> JSONObject:
    """``{"env": …}`` when there is any: a definition without one keeps the hash it had."""
    if not env:
        return {}
    stored: JSONObject = {
        name: {"secret": value.name} if isinstance(value, SecretRef) else value
        for name, value in env.items()
    }
    return {"env": stored}


def _publish(publish: PublishSpec | None) -> JSONValue:
    if publish is None:
        return None
    checks: list[JSONValue] = []
    for check in publish.checks:
        item: JSONObject = {"name": check.name}
        item.update(_step(check.run, check.call))
        checks.append(item)
    return {"checks": checks, "commit": _step(publish.commit.run, publish.commit.call)}


def _step(run: str | None, call: str | None) -> JSONObject:
    return {"run": run} if run is not None else {"call": call}

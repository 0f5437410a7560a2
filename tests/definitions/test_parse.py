"""Reading definitions (docs/definitions.md): what is accepted, and every refusal with its field and
line."""

from __future__ import annotations

from datetime import timedelta

import pytest

from veritask.core.policy import Backoff, OnUnknown
from veritask.core.run_state import TaskRole
from veritask.core.trigger_rules import TriggerRule
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.model import ConcurrencyPolicy
from veritask.definitions.parameters import Parameter
from veritask.definitions.parse import definition_from_json, parse_definition

DESIGN_EXAMPLE = """\
name: daily_user_sync
description: Copy yesterday's users into the warehouse
owner: data-platform              # who is alerted
schedule:
  cron: "0 2 * * *"
  timezone: Asia/Shanghai
  catchup: {enabled: true, max_runs: 7}
concurrency: forbid               # allow | forbid (skip) | queue | replace
defaults:                         # every task inherits; a task may override
  retry: {max_retries: 3, backoff: exponential, delay: 30s, max_delay: 10m, jitter: 0.1}
  timeout: 2h
  lease: 60s                      # a worker that is silent this long is LOST
  evidence_window: 5m             # how long the reconciler gathers evidence before it decides
  on_unknown: retry               # retry | fail | wait
parameters: {table: users}
tasks:
  extract: {run: "python -m jobs.extract --date {{ logical_date }}"}
  transform:
    call: jobs.transform:main     # a Python callable, module:function
    with: {table: "{{ params.table }}"}
    after: [extract]
  load: {run: "...", after: [transform], trigger_rule: all_success}
publish:                          # section 4.3
  checks: [{name: row_count, call: jobs.checks:row_count}]
  commit: {call: jobs.publish:switch_partition}
wait_for:                         # section 4.4
  - {definition: users_raw, published: true, timeout: 6h}
"""


def doc(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def refusal(text: str) -> list[Problem]:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(text)
    return caught.value.problems


# -- accepted ----------------------------------------------------------------------------------


def test_the_design_example_is_accepted_with_every_field() -> None:
    d = parse_definition(DESIGN_EXAMPLE)
    assert d.name == "daily_user_sync"
    assert d.owner == "data-platform"
    assert d.concurrency is ConcurrencyPolicy.FORBID
    assert d.schedule is not None
    assert (d.schedule.cron, d.schedule.timezone) == ("0 2 * * *", "Asia/Shanghai")
    assert (d.schedule.catchup.enabled, d.schedule.catchup.max_runs) == (True, 7)
    assert d.parameters == {"table": Parameter(default="users")}
    assert list(d.tasks) == ["extract", "transform", "load"]
    transform = d.tasks["transform"]
    assert transform.call == "jobs.transform:main"
    assert transform.run is None
    assert transform.with_ == {"table": "{{ params.table }}"}
    assert transform.after == ("extract",)
    assert transform.trigger_rule is TriggerRule.ALL_SUCCESS
    assert transform.role is TaskRole.WORK
    assert transform.skip_exit_code == 99
    assert transform.executor == "local"
    policy = transform.policy
    assert policy.retry.max_retries == 3
    assert policy.retry.backoff is Backoff.EXPONENTIAL
    assert policy.retry.delay == timedelta(seconds=30)
    assert policy.retry.max_delay == timedelta(minutes=10)
    assert policy.retry.jitter == 0.1
    assert policy.timeout == timedelta(hours=2)
    assert policy.lease == timedelta(seconds=60)
    assert policy.evidence_window == timedelta(minutes=5)
    assert policy.on_unknown is OnUnknown.RETRY
    assert d.publish is not None
    assert [c.name for c in d.publish.checks] == ["row_count"]
    assert d.publish.commit.call == "jobs.publish:switch_partition"
    assert d.wait_for[0].definition == "users_raw"
    assert d.wait_for[0].timeout == timedelta(hours=6)


def test_a_task_overrides_single_fields_of_the_defaults() -> None:
    d = parse_definition(
        doc(
            "name: overrides",
            "defaults:",
            "  retry: {max_retries: 3, delay: 30s}",
            "  timeout: 2h",
            "tasks:",
            "  a: {run: 'true', retry: {max_retries: 5}, timeout: null, on_unknown: wait}",
            "  b: {run: 'true', retry: {delay: 20m}, requires_commit: true, queue: heavy}",
        )
    )
    a, b = d.tasks["a"].policy, d.tasks["b"].policy
    assert (a.retry.max_retries, a.retry.delay, a.timeout) == (5, timedelta(seconds=30), None)
    assert a.on_unknown is OnUnknown.WAIT
    assert (b.retry.max_retries, b.retry.delay, b.timeout) == (
        3,
        timedelta(minutes=20),
        timedelta(hours=2),
    )
    assert b.retry.max_delay == timedelta(minutes=20)  # a long delay lifts the default cap
    assert d.tasks["b"].requires_commit
    assert d.tasks["b"].queue == "heavy"


def test_defaults_when_nothing_is_said() -> None:
    d = parse_definition(doc("name: bare", "tasks:", "  only: {run: 'true'}"))
    assert d.schedule is None
    assert d.publish is None
    assert d.concurrency is ConcurrencyPolicy.FORBID
    assert d.description == ""
    assert d.owner is None
    only = d.tasks["only"]
    assert only.policy.retry.max_retries == 0
    assert only.policy.timeout is None
    assert not only.requires_commit


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("45", 45), (90, 90)],
)
def test_durations(written: object, seconds: int) -> None:
    value = repr(written) if isinstance(written, str) else str(written)
    d = parse_definition(doc("name: d", "tasks:", f"  a: {{run: 'true', timeout: {value}}}"))
    assert d.tasks["a"].policy.timeout == timedelta(seconds=seconds)


def test_a_teardown_uses_all_done_setup_success_and_may_decide() -> None:
    d = parse_definition(
        doc(
            "name: td",
            "tasks:",
            "  up: {role: setup, run: 'true'}",
            "  work: {after: [up], run: 'true'}",
            "  down: {role: teardown, after: [up, work], run: 'true', decides_run: true}",
        )
    )
    down = d.tasks["down"]
    assert down.trigger_rule is TriggerRule.ALL_DONE_SETUP_SUCCESS
    assert down.decides_run
    graph = d.run_graph()
    assert graph.leaves() == ("work", "down")
    assert graph.setup_upstreams("down") == frozenset({"up"})


def test_json_is_yaml_even_indented_with_tabs() -> None:
    text = '{\n\t"name": "from_json",\n\t"tasks": {"a": {"run": "true", "after": []}}\n}\n'
    assert parse_definition(text).name == "from_json"


def test_tasks_may_be_a_list_with_keys() -> None:
    d = parse_definition(
        doc(
            "name: listed",
            "tasks:",
            "  - {key: b, run: 'true'}",
            "  - {key: a, run: 'true', after: [b]}",
        )
    )
    assert list(d.tasks) == ["b", "a"]


def test_after_may_name_one_task_without_a_list() -> None:
    d = parse_definition(
        doc("name: one", "tasks:", "  a: {run: 'true'}", "  b: {run: x, after: a}")
    )
    assert d.tasks["b"].after == ("a",)


def test_yaml_merge_keys_and_anchors_work() -> None:
    d = parse_definition(
        doc(
            "name: anchors",
            "tasks:",
            "  a: &base {run: 'true', timeout: 5m}",
            "  b: {<<: *base, after: [a]}",
        )
    )
    assert d.tasks["b"].policy.timeout == timedelta(minutes=5)


# -- refused: every problem names its field and its line -------------------------------------

REFUSALS = [
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true'", "  b: {}"), "", 4, "invalid YAML", id="yaml"
    ),
    pytest.param(
        doc("name: x", "schedul: {cron: '0 2 * * *'}", "tasks:", "  a: {run: 'true'}"),
        "schedul",
        2,
        "unknown field 'schedul' (did you mean 'schedule'?)",
        id="unknown-top-field",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    run: 'true'", "    aftr: []"),
        "tasks.a.aftr",
        5,
        "did you mean 'after'?",
        id="unknown-task-field",
    ),
    pytest.param(
        doc("name: x", "defaults:", "  retry:", "    dealy: 5s", "tasks:", "  a: {run: 'true'}"),
        "defaults.retry.dealy",
        4,
        "did you mean 'delay'?",
        id="unknown-nested-field",
    ),
    pytest.param(
        doc("name: x", "schedule:", "  cron: '0 25 * * *'", "tasks:", "  a: {run: 'true'}"),
        "schedule.cron",
        3,
        "hour field '25' is not valid",
        id="bad-cron",
    ),
    pytest.param(
        doc("name: x", "schedule:", "  cron: '0 2 * *'", "tasks:", "  a: {run: 'true'}"),
        "schedule.cron",
        3,
        "has 4 fields; cron needs 5",
        id="cron-field-count",
    ),
    pytest.param(
        doc("name: x", "schedule:", "  cron: '@dayly'", "tasks:", "  a: {run: 'true'}"),
        "schedule.cron",
        3,
        "unknown macro '@dayly'",
        id="cron-macro",
    ),
    pytest.param(
        doc(
            "name: x",
            "schedule:",
            "  cron: '0 2 * * *'",
            "  timezone: Asia/Shangai",
            "tasks:",
            "  a: {run: 'true'}",
        ),
        "schedule.timezone",
        4,
        "unknown time zone 'Asia/Shangai' (did you mean 'Asia/Shanghai'?)",
        id="bad-timezone",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  a: {run: 'true', after: [c]}",
            "  b: {run: 'true', after: [a]}",
            "  c: {run: 'true', after: [b]}",
        ),
        "tasks.a.after[0]",
        3,
        "the tasks form a cycle: a -> b -> c -> a",
        id="cycle",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true', after: [a]}"),
        "tasks.a.after[0]",
        3,
        "cannot run after itself",
        id="self-edge",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  load: {run: 'true'}",
            "  b:",
            "    run: 'true'",
            "    after:",
            "      - load",
            "      - lod",
        ),
        "tasks.b.after[1]",
        8,
        "no task named 'lod' (did you mean 'load'?)",
        id="missing-task",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true'}", "  b: {run: 'true', after: [a, a]}"),
        "tasks.b.after[1]",
        4,
        "'a' is listed twice",
        id="edge-twice",
    ),
    pytest.param(
        doc("name: x", "defaults:", "  retry: {delay: 3x}", "tasks:", "  a: {run: 'true'}"),
        "defaults.retry.delay",
        3,
        "'3x' is not a duration",
        id="bad-duration",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    run: 'true'", "    timeout: 10 minutes"),
        "tasks.a.timeout",
        5,
        "is not a duration",
        id="bad-task-duration",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true', lease: 0s}"),
        "tasks.a.lease",
        3,
        "must be longer than 0s",
        id="zero-lease",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true', timeout: -5}"),
        "tasks.a.timeout",
        3,
        "must be 0 or more seconds",
        id="negative-duration",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  a: {run: 'true'}",
            "  b: {run: 'true', after: [a], trigger_rule: all_sucess}",
        ),
        "tasks.b.trigger_rule",
        4,
        "unknown value 'all_sucess' (did you mean 'all_success'?)",
        id="bad-trigger-rule",
    ),
    pytest.param(
        doc("name: Daily Sync", "tasks:", "  a: {run: 'true'}"),
        "name",
        1,
        "'Daily Sync' is not a valid name",
        id="bad-name",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  Extract: {run: 'true'}"),
        "tasks.Extract",
        3,
        "is not a valid task key",
        id="bad-task-key",
    ),
    pytest.param(
        doc("description: no name", "tasks:", "  a: {run: 'true'}"),
        "name",
        1,
        "the field 'name' is required",
        id="missing-name",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    run: 'true'", "    call: jobs.a:main"),
        "tasks.a",
        3,
        "has both run and call",
        id="both-run-and-call",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    timeout: 5m"),
        "tasks.a",
        3,
        "needs run (a shell command) or call (module:function)",
        id="neither-run-nor-call",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    call: jobs.transform.main"),
        "tasks.a.call",
        4,
        "'jobs.transform.main' is not module:function",
        id="bad-callable",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    run: 'true'", "    retry:", "      max_retries: -1"),
        "tasks.a.retry.max_retries",
        6,
        "must be 0 or more, got -1",
        id="negative-retries",
    ),
    pytest.param(
        doc(
            "name: x",
            "defaults:",
            "  retry: {delay: 5m, max_delay: 1m}",
            "tasks:",
            "  a: {run: 'true'}",
        ),
        "defaults.retry.max_delay",
        3,
        "is shorter than delay",
        id="max-delay-below-delay",
    ),
    pytest.param(
        doc("name: x", "defaults:", "  retry:", "    jitter: 2", "tasks:", "  a: {run: 'true'}"),
        "defaults.retry.jitter",
        4,
        "must be between 0 and 1, got 2",
        id="jitter",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true', after: 3}"),
        "tasks.a.after",
        3,
        "expected a list of task keys, got the number 3",
        id="wrong-type-after",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true', skip_exit_code: 'ninety'}"),
        "tasks.a.skip_exit_code",
        3,
        "expected a whole number",
        id="wrong-type-int",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true', skip_exit_code: 0}"),
        "tasks.a.skip_exit_code",
        3,
        "must be 1 or more",
        id="skip-exit-code-zero",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    run: 'true'", "    requires_commit: 'yes'"),
        "tasks.a.requires_commit",
        5,
        "expected true or false, got the string 'yes'",
        id="wrong-type-bool",
    ),
    pytest.param(
        doc("name: x", "parameters: [1, 2]", "tasks:", "  a: {run: 'true'}"),
        "parameters",
        2,
        "expected a mapping, got a list",
        id="wrong-type-mapping",
    ),
    pytest.param(
        doc("name: x", "description: [1]", "tasks:", "  a: {run: 'true'}"),
        "description",
        2,
        "expected a string, got a list",
        id="wrong-type-string",
    ),
    pytest.param(doc("name: x", "tasks: []"), "tasks", 2, "at least one task", id="no-tasks"),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true'}", "  a: {run: 'false'}"),
        "tasks.a",
        4,
        "duplicate key (first on line 3)",
        id="duplicate-key",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  a:",
            "    run: 'true'",
            "    role: teardown",
            "    trigger_rule: all_success",
        ),
        "tasks.a.trigger_rule",
        6,
        "a teardown task always uses all_done_setup_success",
        id="teardown-rule",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a:", "    run: 'true'", "    decides_run: true"),
        "tasks.a.decides_run",
        5,
        "only a teardown task may set decides_run",
        id="decides-run-on-work",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true', role: cleanup}"),
        "tasks.a.role",
        3,
        "unknown value 'cleanup'",
        id="bad-role",
    ),
    pytest.param(
        doc("name: x", "concurrency: skip", "tasks:", "  a: {run: 'true'}"),
        "concurrency",
        2,
        "one of: allow, forbid, queue, replace",
        id="bad-concurrency",
    ),
    pytest.param(
        doc(
            "name: x",
            "schedule:",
            "  cron: '0 2 * * *'",
            "  catchup: {enabled: true, max_runs: 0}",
            "tasks:",
            "  a: {run: 'true'}",
        ),
        "schedule.catchup.max_runs",
        4,
        "must be 1 or more",
        id="catchup-max-runs",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  a: {run: 'true'}",
            "wait_for:",
            "  - definition: users_raw",
            "    published: false",
        ),
        "wait_for[0].published",
        6,
        "must be true",
        id="wait-for-unpublished",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true'}", "wait_for:", "  - {definition: x}"),
        "wait_for[0].definition",
        5,
        "a definition cannot wait for its own runs",
        id="wait-for-itself",
    ),
    pytest.param(
        doc("name: x", "tasks:", "  a: {run: 'true'}", "wait_for:", "  - {published: true}"),
        "wait_for[0].definition",
        5,
        "the field 'definition' is required",
        id="wait-for-definition",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  a: {run: 'true'}",
            "publish:",
            "  checks:",
            "    - {name: rows, run: 'true'}",
        ),
        "publish.commit",
        4,
        "the field 'commit' is required",
        id="publish-without-commit",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  a: {run: 'true'}",
            "publish:",
            "  checks:",
            "    - {name: rows, run: 'true'}",
            "    - {name: rows, call: checks:rows}",
            "  commit: {run: 'true'}",
        ),
        "publish.checks[1].name",
        7,
        "'rows' is used twice",
        id="publish-check-twice",
    ),
    pytest.param(
        doc(
            "name: x",
            "tasks:",
            "  a: {run: 'true'}",
            "publish:",
            "  commit: {run: 'true', call: a:b}",
        ),
        "publish.commit",
        5,
        "has both run and call",
        id="publish-commit-both",
    ),
    pytest.param(
        doc(
            "{",
            '  "name": "x",',
            '  "schedule": {"cron": "0 2 * * *", "timezone": "Mars/Base"},',
            '  "tasks": {"a": {"run": "true"}}',
            "}",
        ),
        "schedule.timezone",
        3,
        "unknown time zone 'Mars/Base'",
        id="json-text",
    ),
]


@pytest.mark.parametrize(("text", "field", "line", "message"), REFUSALS)
def test_a_refusal_names_the_field_and_the_line(
    text: str, field: str, line: int, message: str
) -> None:
    problems = refusal(text)
    matching = [p for p in problems if p.field == field]
    assert matching, f"no problem for {field!r} in {problems}"
    assert matching[0].line == line, problems
    assert message in matching[0].message, problems


def test_every_problem_is_found_in_one_pass() -> None:
    text = doc(
        "name: Bad Name",  # 1
        "schedule:",  # 2
        "  cron: '61 * * * *'",  # 3
        "  timezone: Nowhere/City",  # 4
        "tasks:",  # 5
        "  a: {run: 'true', after: [b]}",  # 6
        "  b: {run: 'true', after: [a, zz]}",  # 7
        "  c: {call: 'not a callable', retry: {max_retries: -2}}",  # 8
        "  d: {run: 'true', trigger_rule: sometimes, timeout: soon}",  # 9
    )
    found = {(p.field, p.line) for p in refusal(text)}
    assert found >= {
        ("name", 1),
        ("schedule.cron", 3),
        ("schedule.timezone", 4),
        ("tasks.a.after[0]", 6),
        ("tasks.b.after[1]", 7),
        ("tasks.c.call", 8),
        ("tasks.c.retry.max_retries", 8),
        ("tasks.d.trigger_rule", 9),
        ("tasks.d.timeout", 9),
    }


def test_the_error_message_lists_the_problems_in_line_order() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(doc("name: x", "tasks:", "  b: {run: 'true', after: [zz]}", "bogus: 1"))
    message = str(caught.value)
    assert message.startswith("the definition was refused, 2 problems:")
    assert message.index("line 3: tasks.b.after[0]") < message.index("line 4: bogus")


def test_a_missing_task_list_is_one_problem() -> None:
    assert refusal(doc("name: x", "tasks:")) == [
        Problem("tasks", 2, "the field 'tasks' is required")
    ]


def test_empty_and_non_mapping_documents_are_refused() -> None:
    assert refusal("") == [Problem("", 1, "the definition is empty")]
    assert refusal("- a\n- b\n") == [Problem("", 1, "expected a mapping, got a list")]


def test_yaml_values_json_cannot_hold_are_refused() -> None:
    problems = refusal(doc("name: x", "parameters: {n: .nan}", "tasks:", "  a: {run: 'true'}"))
    assert problems == [Problem("parameters.n", 2, "a number must be finite")]
    tagged = refusal(
        doc("name: x", "parameters: {n: !python/name:os.system ''}", "tasks:", "  a: {run: x}")
    )
    assert tagged[0].field == "parameters.n"
    assert tagged[0].line == 2


def test_a_self_referencing_alias_is_refused() -> None:
    problems = refusal(doc("name: x", "parameters: &p {self: *p}", "tasks:", "  a: {run: x}"))
    assert problems[0].message == "a YAML alias refers to itself"


def test_a_json_object_from_the_ledger_is_checked_too_without_lines() -> None:
    with pytest.raises(DefinitionError) as caught:
        definition_from_json({"name": "x", "tasks": [{"key": "a", "run": "true", "after": ["b"]}]})
    assert caught.value.problems == [Problem("tasks.a.after[0]", None, "no task named 'b'")]


def test_a_zero_retry_delay_is_kept_not_replaced_by_the_default() -> None:
    d = parse_definition(
        """\
name: at_once
tasks:
  work:
    run: "true"
    retry: {max_retries: 2, delay: 0s}
  capped:
    run: "true"
    retry: {max_retries: 2, delay: 0s, max_delay: 0s}
"""
    )
    assert d.tasks["work"].policy.retry.delay == timedelta(0)
    assert d.tasks["capped"].policy.retry.delay == timedelta(0)
    assert d.tasks["capped"].policy.retry.max_delay == timedelta(0)

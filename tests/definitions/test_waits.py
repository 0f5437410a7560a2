"""A ``wait:`` task: one condition and how it is checked; every bad input names its field."""

from __future__ import annotations

import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from veritask.definitions import codec
from veritask.definitions.errors import DefinitionError
from veritask.definitions.model import (
    DEFAULT_WAIT_EVERY,
    DEFAULT_WAIT_TIMEOUT,
    WAIT_EXECUTOR,
    OnTimeout,
    WaitKind,
)
from veritask.definitions.parse import WAIT_LEASE, definition_from_json, parse_definition
from veritask.pipelines import compile as pipelines

YAML = """\
name: arrivals
tasks:
  arrive:
    wait:
      path: /data/{{ ds }}/_SUCCESS
      every: 30s
      timeout: 6h
      on_timeout: skip
      expected: 1h
  landed:
    wait: {sql: "SELECT 1 FROM loads WHERE day = {{ ds }}", connection: warehouse}
  served:
    wait: {http: "https://example.com/ready"}
  ready:
    wait: {call: "jobs.checks:ready"}
    with: {table: orders}
  load: {run: "true", after: [arrive, landed, served, ready]}
"""


def _one(task: str) -> list[tuple[str, str]]:
    """The problems of a definition whose only task is ``w:`` with ``task``'s lines."""
    body = textwrap.indent(textwrap.dedent(task).strip(), "    ")
    with pytest.raises(DefinitionError) as caught:
        parse_definition(f"name: waits\ntasks:\n  w:\n{body}\n")
    return [(p.field, p.message) for p in caught.value.problems]


def test_each_condition_is_read_with_its_checking() -> None:
    d = parse_definition(YAML)
    arrive = d.tasks["arrive"].wait
    assert arrive is not None
    assert (arrive.kind, arrive.target) == (WaitKind.PATH, "/data/{{ ds }}/_SUCCESS")
    assert arrive.every == timedelta(seconds=30)
    assert arrive.timeout == timedelta(hours=6)
    assert arrive.on_timeout is OnTimeout.SKIP
    assert arrive.expected == timedelta(hours=1)
    landed = d.tasks["landed"].wait
    assert landed is not None and (landed.kind, landed.connection) == (WaitKind.SQL, "warehouse")
    served = d.tasks["served"].wait
    assert served is not None
    assert (served.every, served.timeout) == (DEFAULT_WAIT_EVERY, DEFAULT_WAIT_TIMEOUT)
    assert served.on_timeout is OnTimeout.FAIL and served.expected is None
    assert d.tasks["ready"].with_ == {"table": "orders"}
    assert {t.executor for k, t in d.tasks.items() if k != "load"} == {WAIT_EXECUTOR}


def test_a_wait_holds_no_slot_and_gets_a_long_lease_unless_it_sets_one() -> None:
    d = parse_definition(YAML)
    assert d.tasks["arrive"].slots_held == 0
    assert d.tasks["load"].slots_held == 1
    assert d.tasks["arrive"].policy.lease == WAIT_LEASE
    short = YAML.replace("      expected: 1h\n", "      expected: 1h\n    lease: 2m\n")
    assert parse_definition(short).tasks["arrive"].policy.lease == timedelta(minutes=2)


def test_a_wait_survives_storage_and_changes_the_hash() -> None:
    d = parse_definition(YAML)
    assert definition_from_json(codec.definition_to_json(d)) == d
    other = parse_definition(YAML.replace("every: 30s", "every: 31s"))
    assert codec.content_hash(other) != codec.content_hash(d)


@pytest.mark.parametrize(
    ("task", "field", "words"),
    [
        ("wait: {}", "tasks.w.wait", "exactly one condition"),
        ("wait:", "tasks.w.wait", "exactly one condition"),
        ("wait: {path: /a, http: 'http://x'}", "tasks.w.wait", "exactly one condition"),
        ("wait: [path]", "tasks.w.wait", "expected a mapping"),
        ("wait: {path: ''}", "tasks.w.wait.path", "the condition is empty"),
        ("wait: {path: 3}", "tasks.w.wait.path", "expected a string"),
        ("wait: {sql: SELECT 1}", "tasks.w.wait.connection", "needs connection"),
        ("wait: {path: /a, connection: w}", "tasks.w.wait.connection", "and only it"),
        ("wait: {sql: SELECT 1, connection: No_Way}", "tasks.w.wait.connection", "No_Way"),
        ("wait: {http: 'ftp://x'}", "tasks.w.wait.http", "not an http:// or https://"),
        ("wait: {call: nope}", "tasks.w.wait.call", "not module:function"),
        ("wait: {path: /a, every: 0.5s}", "tasks.w.wait.every", "1s or longer"),
        ("wait: {path: /a, every: soon}", "tasks.w.wait.every", "not a duration"),
        ("wait: {path: /a, timeout: 0s}", "tasks.w.wait.timeout", "longer than 0s"),
        ("wait: {path: /a, expected: 0s}", "tasks.w.wait.expected", "longer than 0s"),
        ("wait: {path: /a, on_timeout: maybe}", "tasks.w.wait.on_timeout", "fail, skip"),
        ("wait: {path: /a, often: 1s}", "tasks.w.wait.often", "unknown field"),
        ("wait: {path: /a}\nrun: 'true'", "tasks.w.run", "a wait task has no run"),
        ("wait: {path: /a}\ncall: a:b", "tasks.w.call", "a wait task has no call"),
        ("wait: {path: /a}\nsql: SELECT 1", "tasks.w.sql", "a wait task has no sql"),
        ("wait: {path: /a}\npool: etl", "tasks.w.pool", "a wait task has no pool"),
        ("wait: {path: /a}\npool_slots: 2", "tasks.w.pool_slots", "has no pool_slots"),
        ("wait: {path: /a}\nexecutor: local", "tasks.w.executor", "has no executor"),
    ],
)
def test_a_bad_wait_is_refused_naming_its_field(task: str, field: str, words: str) -> None:
    found = _one(task)
    assert any(f == field and words in m for f, m in found), found


WHERE_VALUES_GO = """\
name: reach
tasks:
  host:
    wait: {http: "https://{{ params.host }}/ready"}
  port:
    wait:
      every: 1m
      http: "https://partner.example:{{ params.port }}/ready"
  scheme:
    wait: {http: "http{{ params.s }}://partner.example/ready"}
  name:
    wait: {http: "https://partner.example/ready?{{ params.k }}=1"}
  fragment:
    wait: {http: "https://partner.example/ready#{{ ds }}"}
  anywhere:
    wait: {path: "{{ params.p }}"}
  relative:
    wait: {path: "data/{{ ds }}/_SUCCESS"}
"""


def test_a_placeholder_where_a_value_could_choose_the_host_or_the_directory_is_refused() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(WHERE_VALUES_GO)
    found = [(p.field, p.line, p.message.split(";")[0]) for p in caught.value.problems]
    origin = "stands in the URL's scheme, host, port or fragment, which come from the definition"
    assert found == [
        ("tasks.host.wait.http", 4, "{{ params.host }} " + origin + " alone"),
        ("tasks.port.wait.http", 8, "{{ params.port }} " + origin + " alone"),
        (
            "tasks.scheme.wait.http",
            10,
            "'http{{ params.s }}://partner.example/ready' is not an http:// or https:// URL",
        ),
        ("tasks.name.wait.http", 12, "{{ params.k }} stands in a query parameter's name"),
        ("tasks.fragment.wait.http", 14, "{{ ds }} " + origin + " alone"),
        ("tasks.anywhere.wait.path", 16, "{{ params.p }} stands under no fixed directory"),
        ("tasks.relative.wait.path", 18, "{{ ds }} stands under no fixed directory"),
    ]


def test_a_value_in_a_path_segment_or_a_query_value_is_accepted() -> None:
    d = parse_definition(
        """\
name: reach
tasks:
  served:
    wait: {http: "https://partner.example/exports/day={{ ds }}/{{ params.t }}?at={{ ds }}&x=1"}
  landed:
    wait: {path: "/data/{{ params.t }}/part-{{ ds }}/_SUCCESS"}
"""
    )
    assert set(d.tasks) == {"served", "landed"}


def test_a_mapped_wait_checks_a_path_or_a_url_only() -> None:
    base = """\
name: mapped
tasks:
  list: {call: "jobs.files:names"}
  each:
    after: [list]
    map: {over: "{{ outputs.list }}"}
    wait: WAIT
"""
    accepted = parse_definition(base.replace("WAIT", "{path: '/in/{{ map.item }}'}"))
    assert accepted.tasks["each"].map_over == "list"
    for refused in ("{call: 'jobs.files:ready'}", "{sql: SELECT 1, connection: w}"):
        with pytest.raises(DefinitionError) as caught:
            parse_definition(base.replace("WAIT", refused))
        fields = [p.field for p in caught.value.problems]
        assert fields == ["tasks.each.map"], caught.value.problems


def test_a_map_item_in_an_unmapped_wait_is_refused() -> None:
    found = _one("wait: {path: '/in/{{ map.item }}'}")
    assert [f for f, _ in found] == ["tasks.w.wait.path"], found


def test_an_unknown_placeholder_in_the_condition_is_refused() -> None:
    found = _one("wait: {path: '/data/{{ nope }}/x'}")
    assert [f for f, _ in found] == ["tasks.w.wait.path"], found


def test_the_python_spelling_is_the_same_definition(tmp_path: Path) -> None:
    path = tmp_path / "arrivals_py.py"
    path.write_text(
        textwrap.dedent(
            """\
            from veritask import pipeline, shell, wait

            @pipeline(name="arrivals")
            def arrivals() -> None:
                arrive = wait(
                    name="arrive",
                    path="/data/{{ ds }}/_SUCCESS",
                    every="30s",
                    timeout="6h",
                    on_timeout="skip",
                    expected="1h",
                )
                landed = wait(
                    name="landed",
                    sql="SELECT 1 FROM loads WHERE day = {{ ds }}",
                    connection="warehouse",
                )
                served = wait(name="served", http="https://example.com/ready")
                ready = wait(name="ready", call="jobs.checks:ready", with_={"table": "orders"})
                shell("true", name="load", after=[arrive, landed, served, ready])
            """
        )
    )
    try:
        [compiled] = pipelines.load_file(path)
    finally:
        sys.modules.pop("arrivals_py", None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))
    written = parse_definition(YAML)
    assert compiled.definition == written
    assert compiled.content_hash == codec.content_hash(written)

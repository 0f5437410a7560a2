"""``trigger: {on_published: [...], when: all|any}``: what is accepted, stored and refused."""

from __future__ import annotations

import pytest

from veritask.definitions import codec
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.model import OnPublished, PublishedWhen
from veritask.definitions.parse import definition_from_json, parse_definition

TASKS = "tasks:\n  load: {run: 'true'}\n"


def read(trigger: str) -> OnPublished | None:
    return parse_definition(f"name: report\n{trigger}\n{TASKS}").trigger


def refused(trigger: str) -> list[Problem]:
    with pytest.raises(DefinitionError) as caught:
        read(trigger)
    return caught.value.problems


def test_all_is_the_default_and_the_order_is_kept() -> None:
    assert read("trigger: {on_published: [users, orders]}") == OnPublished(
        ("users", "orders"), PublishedWhen.ALL
    )
    assert read("trigger:\n  on_published: [users]\n  when: any") == OnPublished(
        ("users",), PublishedWhen.ANY
    )
    assert read("") is None


def test_it_may_coexist_with_a_schedule() -> None:
    definition = parse_definition(
        f"name: report\nschedule: {{cron: '0 2 * * *'}}\ntrigger: {{on_published: [a]}}\n{TASKS}"
    )
    assert definition.schedule is not None
    assert definition.trigger == OnPublished(("a",))


def test_it_is_stored_and_read_back_and_changes_the_hash() -> None:
    with_trigger = parse_definition(f"name: report\ntrigger: {{on_published: [a, b]}}\n{TASKS}")
    without = parse_definition(f"name: report\n{TASKS}")
    stored = codec.definition_to_json(with_trigger)
    assert stored["trigger"] == {"on_published": ["a", "b"], "when": "all"}
    assert definition_from_json(stored) == with_trigger
    # A definition without a trigger keeps the hash it had before triggers existed.
    assert "trigger" not in codec.definition_to_json(without)
    assert codec.content_hash(with_trigger) != codec.content_hash(without)


@pytest.mark.parametrize(
    ("trigger", "field", "message"),
    [
        ("trigger: {on_published: []}", "trigger.on_published", "at least one definition"),
        ("trigger: {on_published: a}", "trigger.on_published", "expected a list"),
        ("trigger: {when: all}", "trigger.on_published", "'on_published' is required"),
        ("trigger: {on_published: [a, b, a]}", "trigger.on_published[2]", "'a' is listed twice"),
        ("trigger: {on_published: [a, report]}", "trigger.on_published[1]", "its own"),
        ("trigger: {on_published: [a], when: most}", "trigger.when", "one of: all, any"),
        ("trigger: {on_published: [a], on: x}", "trigger.on", "unknown field 'on'"),
        ("trigger: {on_published: [Bad]}", "trigger.on_published[0]", "not a valid name"),
        ("trigger: {on_published: [3]}", "trigger.on_published[0]", "expected a string"),
        ("trigger: [a]", "trigger", "expected a mapping"),
    ],
)
def test_a_refusal_names_the_field_and_its_line(trigger: str, field: str, message: str) -> None:
    problems = refused(trigger)
    assert [p.field for p in problems] == [field], problems
    assert message in problems[0].message
    assert problems[0].line == 2


def test_the_stored_form_is_checked_too() -> None:
    stored = codec.definition_to_json(parse_definition(f"name: report\n{TASKS}"))
    stored["trigger"] = {"on_published": ["report"], "when": "all"}
    with pytest.raises(DefinitionError) as caught:
        definition_from_json(stored)
    assert [p.field for p in caught.value.problems] == ["trigger.on_published[0]"]

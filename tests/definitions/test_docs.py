"""docs/definitions.md and docs/trigger-rules.md agree with the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from veritask.core.trigger_rules import TriggerRule
from veritask.definitions import parse, trigger
from veritask.definitions.model import ConcurrencyPolicy
from veritask.definitions.parse import parse_definition

DOCS = Path(__file__).resolve().parents[2] / "docs"
DEFINITIONS = (DOCS / "definitions.md").read_text()
TRIGGER_RULES = (DOCS / "trigger-rules.md").read_text()


def yaml_blocks(page: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", page, flags=re.DOTALL)


@pytest.mark.parametrize("block", yaml_blocks(DEFINITIONS))
def test_every_definition_in_the_reference_is_accepted(block: str) -> None:
    assert parse_definition(block).name


@pytest.mark.parametrize(
    "name",
    sorted(
        {
            *parse.TOP_FIELDS,
            *parse.TASK_FIELDS,
            *parse.POLICY_FIELDS,
            *parse.RETRY_FIELDS,
            *parse.SCHEDULE_FIELDS,
            *parse.CATCHUP_FIELDS,
            *parse.CHECK_FIELDS,
            *parse.WAIT_FIELDS,
            *trigger.TRIGGER_FIELDS,
        }
    ),
)
def test_the_reference_documents_every_field(name: str) -> None:
    assert f"`{name}" in DEFINITIONS or f".{name}`" in DEFINITIONS


@pytest.mark.parametrize("policy", list(ConcurrencyPolicy))
def test_the_reference_documents_every_concurrency_policy(policy: ConcurrencyPolicy) -> None:
    assert f"| `{policy.value}`" in DEFINITIONS


@pytest.mark.parametrize("rule", list(TriggerRule))
def test_the_trigger_rule_table_has_every_rule(rule: TriggerRule) -> None:
    assert re.search(rf"^\| `{rule.value}`", TRIGGER_RULES, flags=re.MULTILINE)

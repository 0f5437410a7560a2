"""The generated reference pages are current."""

from __future__ import annotations

import pytest

from veritask import docgen
from veritask.core import transitions


def test_generated_pages_are_current(capsys: pytest.CaptureFixture[str]) -> None:
    status = docgen.main(["--check"])
    err = capsys.readouterr().err
    assert status == 0, f"docs are stale: {err.strip()}"


def test_the_state_machine_page_shows_every_rule() -> None:
    page = docgen.pages()[docgen.DOCS / "state-machine.md"]
    assert "```mermaid" in page
    for rule in transitions.INSTANCE_RULES:
        assert f"`{rule.name}`" in page


def test_every_state_has_a_meaning_in_the_page() -> None:
    from veritask.core.states import AttemptState, InstanceState

    for enum in (InstanceState, AttemptState):
        docs = docgen.member_docs(enum)
        assert set(docs) == {m.name for m in enum}, "a state lacks its docstring"

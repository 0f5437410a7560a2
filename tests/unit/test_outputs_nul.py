"""Where an output holds a NUL character, which no ledger can store."""

from __future__ import annotations

from veritask.core.outputs import nul_at


def test_a_nul_is_found_in_strings_lists_and_keys_with_its_place() -> None:
    assert nul_at({"a": [1, "x", {"b": None}], "c": True}) is None
    assert nul_at("a\x00") == "output"
    assert nul_at({"a": [1, "x", "y\x00"]}) == "output.a[2]"
    assert nul_at({"ok": 1, "k\x00": 2}) == "output (a key)"
    assert nul_at([{"deep": {"er": ["\x00"]}}]) == "output[0].deep.er[0]"

"""``veritask.definitions`` depends on the core and a few libraries, never on the layers that
use it (the ledger, execution, scheduling, services, the API, the CLI)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "veritask" / "definitions"
FORBIDDEN = ("ledger", "execution", "scheduling", "services", "api", "cli", "ui")
ALLOWED_THIRD_PARTY = {"yaml", "cronsim"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_definitions_import_only_the_core_and_their_libraries(path: Path) -> None:
    for module in imported_modules(path):
        top, _, rest = module.partition(".")
        if top == "veritask":
            layer = rest.split(".")[0]
            assert layer not in FORBIDDEN, f"{path.name} imports {module}"
            assert layer in ("core", "definitions"), f"{path.name} imports {module}"
        else:
            assert top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY, module

"""The core is pure: no I/O, no clock, no randomness, no drivers (pyproject's
import-linter contract says the same for the package as a whole).

This test reads every module of ``veritask.core`` with :mod:`ast`, so it also catches an import
hidden inside a function, which a layer check on the import graph may report differently.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import veritask.core

CORE = Path(veritask.core.__file__).parent

FORBIDDEN_MODULES = frozenset(
    {
        "sqlalchemy",
        "psycopg",
        "fastapi",
        "starlette",
        "typer",
        "click",
        "httpx",
        "subprocess",
        "os",
        "asyncio",
        "time",
        "socket",
        "threading",
        "logging",
        "uuid",
        "random",
    }
)
CLOCK_READS = frozenset({"now", "utcnow", "today"})
CLOCK_OWNERS = frozenset({"datetime", "date"})


def violations(source: str, module: str) -> list[str]:
    """Every forbidden import or clock read in ``source``, as ``module: what``."""
    tree = ast.parse(source, filename=module)
    found: list[str] = []
    # Names bound to the datetime/date classes or the datetime module, under any alias.
    clock_names: set[str] = set(CLOCK_OWNERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    found.append(f"{module}: import {alias.name}")
                if alias.name == "datetime":
                    clock_names.add(alias.asname or "datetime")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module is not None:
                top = node.module.split(".")[0]
                if top in FORBIDDEN_MODULES:
                    names = ", ".join(a.name for a in node.names)
                    found.append(f"{module}: from {node.module} import {names}")
                if node.module == "datetime":
                    for alias in node.names:
                        if alias.name in CLOCK_OWNERS:
                            clock_names.add(alias.asname or alias.name)
                        if alias.name in CLOCK_READS:
                            found.append(f"{module}: from datetime import {alias.name}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            found.append(f"{module}: __import__()")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in CLOCK_READS:
            owner = node.value
            owner_name = (
                owner.id
                if isinstance(owner, ast.Name)
                else owner.attr
                if isinstance(owner, ast.Attribute)
                else None
            )
            if owner_name in clock_names:
                found.append(f"{module}: reads the clock with {owner_name}.{node.attr}")
    return found


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_the_core_has_modules_to_check() -> None:
    names = {p.stem for p in core_modules()}
    assert {"fold", "judge", "decide", "facts", "events", "policy", "codec"} <= names


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.stem)
def test_a_core_module_imports_no_io_clock_or_randomness(path: Path) -> None:
    module = "veritask.core." + ".".join(path.relative_to(CORE).with_suffix("").parts)
    found = violations(path.read_text(encoding="utf-8"), module)
    assert found == [], "the core must stay pure:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\n", "m: import os"),
        ("import os.path as p\n", "m: import os.path"),
        ("from subprocess import run\n", "m: from subprocess import run"),
        ("def f():\n    import random\n", "m: import random"),
        ("from sqlalchemy.orm import Session\n", "m: from sqlalchemy.orm import Session"),
        ("import logging, json\n", "m: import logging"),
        (
            "from datetime import datetime\nx = datetime.now()\n",
            "m: reads the clock with datetime.now",
        ),
        (
            "import datetime as dt\nx = dt.datetime.utcnow()\n",
            "m: reads the clock with datetime.utcnow",
        ),
        ("from datetime import date as D\nD.today()\n", "m: reads the clock with D.today"),
        ("import datetime as dt\nx = dt.date.today\n", "m: reads the clock with date.today"),
        ("mod = __import__('os')\n", "m: __import__()"),
    ],
)
def test_the_checker_catches_a_violation(source: str, expected: str) -> None:
    assert expected in violations(source, "m")


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import datetime, timedelta\nx = datetime(2026, 1, 1)\n",
        "import hashlib, hmac, json\n",
        "from __future__ import annotations\nfrom . import fold\n",
        "class Clock:\n    def now(self) -> int: ...\nClock().now()\n",
        "import osmosis\n",
    ],
)
def test_the_checker_lets_pure_code_through(source: str) -> None:
    assert violations(source, "m") == []

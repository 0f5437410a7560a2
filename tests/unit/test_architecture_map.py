"""docs/architecture.md names every module and package of ``src/veritask``, and nothing else.

The map's convention: a module is written in backticks as its path under ``src/veritask``
(```scheduling/intake.py```), a package as its directory with a slash (```api/v2/```). Paths
that start with ``src/``, ``tests/``, ``docs/``, ``bench/`` or ``tools/`` are read from the
repository's root, and ``path.py::name`` also names a function or class that must be defined
in that file. Every module and package must have its line in the ``## Code map`` section.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "veritask"
MAP = ROOT / "docs" / "architecture.md"
#: First path parts that are read from the repository's root, not from ``src/veritask``.
FROM_ROOT = ("src", "tests", "docs", "bench", "tools")

_SEGMENT = r"[a-z0-9_]+"
_MODULE = re.compile(rf"^((?:{_SEGMENT}/)*{_SEGMENT}\.py)(?:::([A-Za-z_][A-Za-z0-9_]*))?$")
_DIRECTORY = re.compile(rf"^(?:{_SEGMENT}/)+$")


def spans(text: str) -> list[str]:
    """Every inline code span of a Markdown page, outside fenced blocks."""
    outside = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    return re.findall(r"`([^`\n]+)`", outside)


def named_paths(text: str) -> tuple[set[str], dict[str, set[str]]]:
    """The directories (``a/b/``) and files (``a/b.py``, with the names after ``::``) named."""
    directories: set[str] = set()
    files: dict[str, set[str]] = {}
    for span in spans(text):
        if _DIRECTORY.match(span):
            directories.add(span)
        elif found := _MODULE.match(span):
            names = files.setdefault(found[1], set())
            if found[2]:
                names.add(found[2])
    return directories, files


def source_paths() -> tuple[set[str], set[str]]:
    """Every package directory (one holding a module) and module (``__init__.py`` aside)."""
    modules = {
        path.relative_to(SOURCE).as_posix()
        for path in SOURCE.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    directories = {module.rsplit("/", 1)[0] + "/" for module in modules if "/" in module}
    return directories, {m for m in modules if not m.endswith("__init__.py")}


def resolve(path: str) -> Path:
    return (ROOT if path.split("/", 1)[0] in FROM_ROOT else SOURCE) / path


def code_map(text: str) -> str:
    """The page's code map: from its ``## Code map`` heading to the next heading of that level."""
    found = re.search(r"^## Code map\n(.*?)(?=^## |\Z)", text, flags=re.DOTALL | re.MULTILINE)
    assert found, "docs/architecture.md has no '## Code map' section"
    return found[1]


def missing_from(text: str) -> list[str]:
    """What ``src/veritask`` holds that the page's code map does not name (naming it in the
    bird's-eye view alone is not enough: every module has its line in the map)."""
    directories, files = named_paths(code_map(text))
    packages, modules = source_paths()
    return sorted((packages - directories) | (modules - set(files)))


def stale_in(text: str) -> list[str]:
    """What the page names that does not exist: a path, or a name not defined in its file."""
    directories, files = named_paths(text)
    stale = [d for d in sorted(directories) if not resolve(d).is_dir()]
    for path, names in sorted(files.items()):
        file = resolve(path)
        if not file.is_file():
            stale.append(path)
            continue
        source = file.read_text()
        for name in sorted(names):
            if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", source, re.MULTILINE):
                stale.append(f"{path}::{name}")
    return stale


def test_the_map_names_every_module_and_package() -> None:
    missing = missing_from(MAP.read_text())
    assert not missing, (
        "docs/architecture.md does not name these (add a line to its code map, as "
        f"`package/module.py` or `package/`): {', '.join(missing)}"
    )


def test_every_path_the_map_names_exists() -> None:
    stale = stale_in(MAP.read_text())
    assert not stale, f"docs/architecture.md names what no longer exists: {', '.join(stale)}"


def test_the_checks_catch_a_missing_module_and_a_stale_path() -> None:
    text = MAP.read_text().replace("`scheduling/intake.py`", "intake")
    assert "scheduling/intake.py" in missing_from(text)
    text = MAP.read_text().replace("`api/v2/`", "api/v2")
    assert "api/v2/" in missing_from(text)
    # Named in the bird's-eye view but not in the map: still missing.
    page = MAP.read_text()
    start = page.index("## Code map")
    text = page[:start] + page[start:].replace("`scheduling/sweeps.py`", "sweeps")
    assert "`scheduling/sweeps.py`" in text
    assert "scheduling/sweeps.py" in missing_from(text)
    extra = (
        "\n`scheduling/gone.py` `gone/` `tests/unit/test_docs.py::test_gone` "
        "`tests/unit/test_docs.py::test_generated_pages_are_current`\n"
    )
    assert stale_in(MAP.read_text() + extra) == [
        "gone/",
        "scheduling/gone.py",
        "tests/unit/test_docs.py::test_gone",
    ]


def test_the_map_never_counts_a_fenced_block() -> None:
    assert spans("`a/b.py`\n```\n`c/d.py`\n```\n`e/`") == ["a/b.py", "e/"]

"""How fast a Python pipeline of 1,000 tasks compiles and applies: ``make bench`` (never a
test).

Writes a module whose pipeline declares ``--tasks`` tasks (a @task function called in a loop,
each call after the one ten before it, and a shell task at the end after the last ten), then
imports and compiles it as ``veritask apply -f`` does, and applies the compiled definition to a
migrated SQLite ledger in a temporary directory through the service layer. The target is under
one second for compiling and applying together.

    python -m bench.pipelines
    python -m bench.pipelines --tasks 1000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from veritask.ledger import migrate
from veritask.pipelines import compile as pipelines
from veritask.services import definitions
from veritask.services.platform import Platform

TARGET_SECONDS = 1.0
FAN = 10

MODULE = """\
from veritask import pipeline, shell, task


@task
def step(n: int) -> None:
    print(n)


@pipeline(name="bench_wide", concurrency="allow")
def bench_wide() -> None:
    done = []
    for n in range({steps}):
        after = done[n - {fan}] if n >= {fan} else None
        done.append(step.after(after)(n) if after is not None else step(n))
    shell("true", name="finish", after=done[-{fan}:])
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        home = Path(directory)
        module = home / "bench_wide_pipeline.py"
        module.write_text(MODULE.format(steps=args.tasks - 1, fan=FAN))
        began = time.perf_counter()
        [compiled] = pipelines.load_file(module)
        compile_seconds = time.perf_counter() - began
        sys.path.remove(str(home))
        url = f"sqlite:///{home / 'bench.db'}"
        migrate.upgrade(url)
        platform = Platform.open(url, home)
        try:
            began = time.perf_counter()
            source = compiled.source()
            source_seconds = time.perf_counter() - began
            began = time.perf_counter()
            applied = definitions.apply_definition(platform, source, actor="bench")
            apply_seconds = time.perf_counter() - began
        finally:
            platform.close()
    tasks = len(compiled.spec["tasks"]) if isinstance(compiled.spec["tasks"], dict) else 0
    total = compile_seconds + source_seconds + apply_seconds
    print(
        f"a pipeline of {tasks} tasks: import and compile {compile_seconds:.3f} s, "
        f"its YAML {source_seconds:.3f} s ({len(source) // 1024} KiB), "
        f"apply to SQLite {apply_seconds:.3f} s (version {applied.version})"
    )
    print(
        f"together {total:.3f} s (target {TARGET_SECONDS:.0f} s, "
        f"ratio {total / TARGET_SECONDS:.2f})"
    )


if __name__ == "__main__":
    main()

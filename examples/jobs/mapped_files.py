"""Data passed between tasks and a task mapped over it: one ``load`` per file that
``list_files`` finds, decided when the run gets there, and a ``report`` of their counts.

    PYTHONPATH="$PWD/examples" veritask apply -m jobs.mapped_files
    veritask test examples/jobs/mapped_files.py --param parts=4
"""

from __future__ import annotations

from veritask import pipeline, task


@task
def list_files(day: str, parts: int) -> list[str]:
    """The files of one day; the list is the task's output."""
    return [f"/data/{day}/part-{n}.csv" for n in range(parts)]


@task
def load(path: str) -> int:
    """Pretend to load one file: its instance of the map gets the path as its item."""
    print(f"loading {path}", flush=True)
    return len(path)


@task
def report(counts: list[int]) -> int:
    """The mapped instances' results, in the order of the files."""
    print(f"{len(counts)} files, {sum(counts)} bytes of names", flush=True)
    return sum(counts)


@pipeline(owner="data")
def mapped_files(parts: int = 3) -> None:
    files = list_files("{{ ds }}", parts)
    counts = load.map(files)
    report(counts)

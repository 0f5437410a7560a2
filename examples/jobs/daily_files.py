"""A pipeline whose tasks are Python functions: the worker imports this module and calls them.

    PYTHONPATH="$PWD/examples" veritask apply -m jobs.daily_files
    veritask trigger daily_files --param prefix=/tmp --wait

A task's arguments are constants and pipeline parameters, sent as the ``call`` task's ``with``
(a parameter arrives as text); a task runs after another one with ``.after(result)``.
"""

from __future__ import annotations

from veritask import Cron, Retry, pipeline, task


@task(retry=Retry(max_retries=3, delay="30s"), timeout="10m")
def list_files(day: str, prefix: str) -> list[str]:
    """The files of one day; the list becomes the task's output."""
    return [f"{prefix}/{day}/part-{n}.csv" for n in range(3)]


@task
def load(day: str, parts: int) -> int:
    """Pretend to load ``parts`` files of ``day``; the count becomes the task's output."""
    print(f"loading {parts} files of {day}", flush=True)
    return parts


@pipeline(schedule=Cron("0 2 * * *", timezone="Asia/Shanghai"), owner="data")
def daily_files(prefix: str = "/data/raw") -> None:
    files = list_files("{{ ds }}", prefix)
    load.after(files)("{{ ds }}", parts=3)

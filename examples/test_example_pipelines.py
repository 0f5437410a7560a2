"""A test of a Python pipeline, as you would write one for your own: one real run on this
machine with ``veritask.testing.run``, no server (docs/python.md, "Testing a pipeline").

    pytest examples/test_example_pipelines.py
"""

from __future__ import annotations

from datetime import UTC, datetime

from daily_report import daily_report
from hello import hello
from jobs.daily_files import daily_files
from jobs.mapped_files import mapped_files

from veritask import testing


def test_hello_greets() -> None:
    result = testing.run(hello)
    assert result.succeeded, result.reason
    assert result.instances["greet"].log == "hello from Veritask\n"


def test_daily_report_builds_checks_and_publishes() -> None:
    result = testing.run(daily_report, logical_time=datetime(2024, 1, 2, 2, 30, tzinfo=UTC))
    assert (result.state, result.publication) == ("SUCCESS", "PUBLISHED")
    assert result.instances["publish.check.not_empty"].log == "42 rows\n"
    assert [t.exit_code for t in result.instances.values()] == [0] * len(result.instances)


def test_daily_files_loads_the_day() -> None:
    result = testing.run(
        daily_files, params={"prefix": "/tmp"}, logical_time=datetime(2024, 1, 31, tzinfo=UTC)
    )
    assert result.succeeded, result.reason
    assert result.instances["load"].exit_code == 0
    assert result.instances["load"].log == "loading 3 files of 2024-01-31\n"


def test_mapped_files_loads_each_file_and_reports_in_order() -> None:
    result = testing.run(
        mapped_files, params={"parts": 2}, logical_time=datetime(2024, 1, 31, tzinfo=UTC)
    )
    assert result.succeeded, result.reason
    assert result.instances["load[1]"].log == "loading /data/2024-01-31/part-1.csv\n"
    assert result.instances["report"].output == 2 * len("/data/2024-01-31/part-0.csv")

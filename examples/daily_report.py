"""examples/publish.yaml written in Python: the same definition, with the same content hash.

    veritask apply -f examples/daily_report.py

The tasks are shell commands, so nothing of this module runs on a worker; see
examples/jobs/pipelines.py for tasks that are Python functions.
"""

from __future__ import annotations

from veritask import Catchup, Check, Cron, Defaults, Publish, Retry, Step, pipeline, shell

WORKSPACE = "/tmp/veritask-daily-report"


@pipeline(
    name="daily_report",
    description="Build the daily report, check it, then publish it",
    owner="analytics",
    schedule=Cron("30 2 * * *", timezone="Asia/Shanghai", catchup=Catchup(True, max_runs=3)),
    concurrency="queue",
    defaults=Defaults(
        retry=Retry(max_retries=2, backoff="exponential", delay="30s", max_delay="5m"),
        timeout="30m",
        lease="60s",
        evidence_window="2m",
        on_unknown="retry",
    ),
    expected_finish="3h",
    publish=Publish(
        checks=[
            Check(name="not_empty", run="python3 -c 'print(\"42 rows\")'"),
            Check(name="fresh", run="true"),
        ],
        commit=Step(run="python3 -c 'print(\"switched the report to the new partition\")'"),
    ),
)
def daily_report(report: str = "daily_sales") -> None:
    workspace = shell(
        f"python3 -c 'import os; os.makedirs(\"{WORKSPACE}\", exist_ok=True)'",
        name="make_workspace",
        role="setup",
    )
    build = shell(
        "python3 -c 'import time; time.sleep(1); "
        f'open("{WORKSPACE}/report.csv", "w").write("day,sales\\n1,42\\n")\'',
        name="build",
        after=[workspace],
    )
    shell(
        f"python3 -c 'import shutil; shutil.rmtree(\"{WORKSPACE}\", ignore_errors=True)'",
        name="remove_workspace",
        role="teardown",
        after=[workspace, build],
    )

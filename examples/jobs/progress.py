"""The callable of examples/progress.yaml: count through rows and report progress.

``report_progress`` is best effort and does nothing outside a worker, so this also runs
as plain Python: ``python -c 'from jobs.progress import count_rows; count_rows(total=3)'``.
"""

from __future__ import annotations

import time

from veritask.execution import task_api


def count_rows(total: int = 20, pause_seconds: float = 0.2) -> dict[str, int]:
    """Pretend to process ``total`` rows; the return value becomes the task's output."""
    task_api.report_progress("counting", done=0, total=total, message="starting")
    print(f"counting {total} rows", flush=True)
    for done in range(1, total + 1):
        time.sleep(pause_seconds)
        task_api.report_progress("counting", done=done, total=total)
        if done % 5 == 0 or done == total:
            print(f"counted {done}/{total} rows", flush=True)
    task_api.report_progress("counting", done=total, total=total, message="finished")
    return {"rows": total}

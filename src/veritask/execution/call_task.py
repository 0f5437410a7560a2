"""A ``call:`` task in a fresh interpreter: how a callable runs as another user than its worker.

A callable usually runs in a child forked from the worker (no interpreter to start). That child
holds a copy of the worker's memory, and with it the platform's settings: fine for a task that
runs as the worker's user, who could read them anyway, not for one that runs as another user
(``task_user.py``). Such a task is started as ``python -m veritask.execution.call_task
CALL_FD CONFIRM_FD``, with the user already switched: it reads what to call from the anonymous
file ``CALL_FD`` (module, function, params, output path; never a command line others can read)
and confirms the import on ``CONFIRM_FD``, as the forked child does.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from veritask.execution import task_process


def main(argv: Sequence[str]) -> int:
    call_fd, confirm_fd = (int(value) for value in argv)
    with os.fdopen(call_fd, "rb") as call_file:
        call = json.loads(call_file.read())
    return task_process.call_target(
        module=call["module"],
        function=call["function"],
        params=call["params"],
        output_path=Path(call["output"]),
        confirm_fd=confirm_fd,
        in_place=True,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Reading a process's stat line from /proc, for real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from veritask.execution import procfs

# The child names itself as a task might (PR_SET_NAME): spaces and parentheses in the one field
# that is not a number, then waits to be read.
NAMED_CHILD = """
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, b"a) b (c", 0, 0, 0)
print("named", flush=True)
time.sleep(30)
"""


def test_a_command_name_with_parentheses_and_spaces_does_not_shift_the_fields() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", NAMED_CHILD], stdout=subprocess.PIPE, process_group=0
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"named\n"
        stat = procfs.read_stat(child.pid)

        assert stat is not None
        assert stat.ppid == os.getpid()
        assert stat.pgrp == child.pid  # its own group, as asked
        assert stat.state in ("S", "R")
        assert stat.start_ticks > 0 and procfs.is_running(child.pid, stat.start_ticks)
    finally:
        child.kill()
        child.communicate()


def test_a_process_that_is_gone_has_no_stat() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = procfs.start_ticks(child.pid)
    child.wait()
    deadline = time.monotonic() + 5
    while procfs.read_stat(child.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # reaped: the pid is free (a new process may take it, rarely)

    assert ticks is not None
    assert procfs.read_stat(child.pid) is None or not procfs.is_running(child.pid, ticks)

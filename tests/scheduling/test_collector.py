"""The scheduler's process tunes its garbage collector once, in a process of its own here."""

from __future__ import annotations

import json
import subprocess
import sys

from veritask.scheduling import collector

PROBE = """
import gc, json
from veritask.scheduling import collector
before = gc.get_threshold()
collector.tune()
frozen, tuned = gc.get_freeze_count(), gc.get_threshold()
gc.set_threshold(1, 1, 1)
collector.tune()  # once per process: a second call changes nothing
print(json.dumps([before, frozen, tuned, gc.get_threshold()]))
"""


def test_tuning_freezes_what_is_loaded_and_raises_the_thresholds_once() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True
    ).stdout
    before, frozen, tuned, after = json.loads(out)
    assert before == [700, 10, 10]  # CPython's defaults: what the tuning replaces
    assert frozen > 1000  # the modules loaded so far are out of every scan
    assert tuned == list(collector.THRESHOLDS)
    assert after == [1, 1, 1]

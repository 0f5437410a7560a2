"""A mixed workload for the fault tests, and the checks that it converged to the engine's truth.

Every task appends ``<instance> <attempt> start|end <ns> <pid>`` lines to a marker file, so the
test knows which attempts really ran, when, and how often — whatever the ledger says.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tests.scheduling.harness import Ledgers, attempt_dirs
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import layout, records


def marked(marker: Path, body: str) -> str:
    """A shell command that records its start and end around ``body`` (keeping its status)."""
    line = '"$VERITASK_INSTANCE_ID $VERITASK_ATTEMPT_NO'
    return (
        f'echo {line} start $(date +%s%N) $$" >> {marker}; '
        f"( {body} ); rc=$?; "
        f'echo {line} end $(date +%s%N) $$" >> {marker}; exit $rc'
    )


def exclusive(lock: Path, body: str) -> str:
    """A shell command running ``body`` while it holds ``lock``, for as long as any process it
    starts lives (they inherit the descriptor; an ended process, a zombie too, holds none).
    An attempt that finds the lock held by another notes it (:func:`overlapped`)."""
    return (
        f'exec 9>>{lock}; flock -n 9 || echo "$VERITASK_ATTEMPT_NO" >> {lock}.overlap; '
        f"flock 9; {body}"
    )


def overlapped(lock: Path) -> list[int]:
    """The attempts that started while another held ``lock`` (see :func:`exclusive`)."""
    noted = lock.with_name(lock.name + ".overlap")
    return [int(line) for line in noted.read_text().split()] if noted.exists() else []


def mixed_definition(name: str, marker: Path, *, extra: str = "") -> str:
    """A DAG with short sleeps, a task that fails once, one that always fails, and joins."""
    tasks = {
        "a": ("sleep 0.2", []),
        "b": ('sleep 0.1; [ "$VERITASK_ATTEMPT_NO" -ge 2 ]', ["a"]),
        "c": ("sleep 0.3", ["a"]),
        "d": ("sleep 0.1; exit 1", ["a"]),
        "e": ("sleep 0.1", ["b", "c"]),
    }
    lines = [
        f"name: {name}",
        "concurrency: allow",
        extra.rstrip(),
        "defaults:",
        "  retry: {max_retries: 2, backoff: fixed, delay: 0.2s, max_delay: 1s, jitter: 0}",
        "  lease: 2s",
        "  evidence_window: 2s",
        "tasks:",
    ]
    for key, (body, after) in tasks.items():
        lines.append(f"  {key}:")
        lines.append(f"    run: {json.dumps(marked(marker, body))}")
        if after:
            lines.append(f"    after: [{', '.join(after)}]")
    lines.append("  f:")
    lines.append(f"    run: {json.dumps(marked(marker, 'true'))}")
    lines.append("    after: [d]")
    lines.append("    trigger_rule: all_done")
    return "\n".join(line for line in lines if line) + "\n"


#: What every run of :func:`mixed_definition` converges to, and how many attempts each takes.
EXPECTED_STATES = {
    "a": InstanceState.SUCCESS,
    "b": InstanceState.SUCCESS,
    "c": InstanceState.SUCCESS,
    "d": InstanceState.FAILED,
    "e": InstanceState.SUCCESS,
    "f": InstanceState.SUCCESS,
}
EXPECTED_ATTEMPTS = {"a": 1, "b": 2, "c": 1, "d": 3, "e": 1, "f": 1}


@dataclass(frozen=True)
class Execution:
    """One attempt as the marker file saw it run."""

    starts: int
    ends: int
    started_ns: int
    ended_ns: int | None


def executions(marker: Path) -> dict[tuple[str, int], Execution]:
    """(instance, attempt) -> how often it started and ended, and when."""
    starts: dict[tuple[str, int], list[int]] = defaultdict(list)
    ends: dict[tuple[str, int], list[int]] = defaultdict(list)
    if marker.exists():
        for line in marker.read_text().splitlines():
            instance_id, attempt_no, what, ns, _pid = line.split()
            key = (instance_id, int(attempt_no))
            (starts if what == "start" else ends)[key].append(int(ns))
    return {
        key: Execution(len(times), len(ends[key]), min(times), max(ends[key], default=None))
        for key, times in starts.items()
    }


def assert_converged(db: Ledgers, executor_home: layout.ExecutorHome, marker: Path) -> int:
    """Every run of the workload reached its expected end, as the engine saw it; returns the
    number of attempts checked."""
    ran = executions(marker)
    dirs = attempt_dirs(executor_home)
    checked = 0
    for run_id, state, key in db.runs():
        assert state is RunExecutionState.SUCCESS, f"run {key} ended {state}"
        instances = db.instances(run_id)
        assert {k: v.state for k, v in instances.items()} == EXPECTED_STATES, key
        for task, instance in instances.items():
            attempts = db.attempts(instance.id)
            numbers = [n for n, *_ in attempts]
            assert numbers == list(range(1, EXPECTED_ATTEMPTS[task] + 1)), (key, task, attempts)
            # One engine submission per attempt: the engine holds exactly these attempts.
            assert dirs.get(instance.id, set()) == set(numbers), (key, task, dirs.get(instance.id))
            previous_end: int | None = None
            for attempt_no, attempt_state, exit_code, _ in attempts:
                execution = ran.get((instance.id, attempt_no))
                # Each (instance, attempt) ran exactly once, to its end.
                assert execution is not None, (key, task, attempt_no, "never ran")
                assert (execution.starts, execution.ends) == (1, 1), (key, task, attempt_no)
                # No instance ran two attempts at the same time.
                if previous_end is not None:
                    assert execution.started_ns >= previous_end, (key, task, attempt_no)
                previous_end = execution.ended_ns
                # The ledger says what the engine's exit record says.
                attempt_dir = executor_home.attempt(instance.id, attempt_no)
                record = records.read_exit_record(attempt_dir)
                assert record is not None, (key, task, attempt_no, "no exit record")
                assert exit_code == record.exit_code, (key, task, attempt_no)
                assert attempt_state == ("SUCCESS" if record.exit_code == 0 else "FAILED")
                checked += 1
    # Nothing ran that the ledger does not know.
    known = {
        (instance.id, n)
        for run_id, _, _ in db.runs()
        for instance in db.instances(run_id).values()
        for n, *_ in db.attempts(instance.id)
    }
    assert set(ran) <= known, set(ran) - known
    db.assert_snapshots_are_folds()
    return checked

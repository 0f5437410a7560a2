"""How fast the local executor turns submissions into exit records, beside plain Popen.

Submits N attempts of ``true`` through a LocalExecutor with S slots (events through the outbox,
the embedded default) and waits until every exit record is on disk. The baseline, in the same
run, is ``subprocess.Popen(["true"])`` with the same number in flight, so the figure reads as
"what the execution layer costs on top of starting the task's own process".

    python -m bench.executor [--attempts 200] [--slots 8]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from veritask.execution import layout, local, port


def _popen_baseline(count: int, in_flight: int) -> float:
    """Attempts per second of bare ``Popen(["true"])``, at most ``in_flight`` at once."""
    started = time.perf_counter()
    running: list[subprocess.Popen[bytes]] = []
    for _ in range(count):
        if len(running) >= in_flight:
            running.pop(0).wait()
        running.append(subprocess.Popen(["true"]))
    for process in running:
        process.wait()
    return count / (time.perf_counter() - started)


def _spec(outbox: Path) -> port.AttemptSpec:
    return port.AttemptSpec(
        instance_id=f"bench-{uuid.uuid4().hex[:12]}",
        attempt_no=1,
        attempt_token="bench",
        task=port.ShellCommand("true"),
        callback=port.OutboxCallback(outbox),
    )


def _wait_for_exit_records(attempts: list[layout.AttemptDir]) -> None:
    waiting = list(attempts)
    while waiting:
        waiting = [a for a in waiting if not a.exit_record.exists()]
        if waiting:
            time.sleep(0.002)


def _executor_throughput(executor: local.LocalExecutor, outbox: Path, count: int) -> float:
    specs = [_spec(outbox) for _ in range(count)]
    started = time.perf_counter()
    for spec in specs:
        executor.submit(spec=spec)
    _wait_for_exit_records([executor.home.attempt(s.instance_id, 1) for s in specs])
    return count / (time.perf_counter() - started)


def _one_at_a_time_latency(executor: local.LocalExecutor, outbox: Path, count: int) -> float:
    """Median seconds from submit to exit record for one attempt alone on the machine."""
    latencies = []
    for _ in range(count):
        spec = _spec(outbox)
        started = time.perf_counter()
        executor.submit(spec=spec)
        _wait_for_exit_records([executor.home.attempt(spec.instance_id, 1)])
        latencies.append(time.perf_counter() - started)
    return statistics.median(latencies)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.executor", description=__doc__)
    parser.add_argument("--attempts", type=int, default=200)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to make VERITASK_HOME (default: $TMPDIR)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(
        prefix="veritask-bench-", dir=args.dir, ignore_cleanup_errors=True
    ) as tmp:
        home = Path(tmp)
        outbox = home / "outbox"
        executor = local.LocalExecutor(home=home, slots=args.slots)
        started = time.perf_counter()
        executor.ensure_supervisor()
        supervisor_start = time.perf_counter() - started
        try:
            _executor_throughput(executor, outbox, 20)  # warm the page cache and the supervisor
            baseline = _popen_baseline(args.attempts, args.slots)
            throughput = _executor_throughput(executor, outbox, args.attempts)
            latency = _one_at_a_time_latency(executor, outbox, 20)
        finally:
            executor.shutdown_supervisor()
    print(f"supervisor start (once):            {supervisor_start * 1000:8.1f} ms")
    print(
        f"local executor, {args.attempts} x `true`, {args.slots} slots: "
        f"{throughput:8.1f} attempts/s  (submit -> exit record on disk)"
    )
    print(f"baseline Popen(['true']), {args.slots} in flight:  {baseline:8.1f} processes/s")
    print(f"one attempt alone, submit -> exit record (median of 20): {latency * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

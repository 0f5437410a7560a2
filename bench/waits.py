"""What ten thousand open waits cost the scheduler's checker: ``make bench`` (never a test).

``--waits`` path waits whose file never appears, checked every ``--every`` seconds by one
``WaitExecutor`` (the one a scheduler holds: a heap, one timer thread, four checker threads),
reporting to an outbox in a temporary directory as the scheduler's own would. After a warm-up
of one check cycle (every wait's first check and its ``started`` report, paid once), the
process's CPU time is measured over ``--cycles`` check cycles and printed as a fraction of one
core, beside the target. The default window is one period of a wait's record of its unchanged
checks (``waits.RECORD_EVERY``, 30 cycles of 30 s), so it holds every report a steady wait
writes in that period, each once.

It also prints the reports written per second: what the scheduler's loop reads from the outbox
and records for these waits.

``--scheduler`` measures the whole scheduler process instead (the loop, its ledger on SQLite,
and the checker it holds): one run whose mapped wait task expands into ``--waits`` waits, the
process's CPU over the same window, beside the idle scheduler's over two minutes before the
run.

    python -m bench.waits
    python -m bench.waits --waits 2000 --every 5 --cycles 3
    python -m bench.waits --scheduler
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.scheduler import _Loop
from veritask.core.states import TriggerKind
from veritask.definitions.model import WAIT_EXECUTOR
from veritask.definitions.parse import WAIT_LEASE
from veritask.execution import local, port, waits
from veritask.ledger import dialects, migrate
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

#: The share of one core the checker may use for 10,000 waits checked every 30 s.
TARGET = 0.05
#: Seconds the idle scheduler is measured for: its cost is a steady rate.
IDLE_WINDOW = 120.0
#: A wait's heartbeat interval as the scheduler gives it: a third of its lease.
BEAT = WAIT_LEASE / 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--waits", type=int, default=10_000)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between checks")
    parser.add_argument(
        "--cycles",
        type=int,
        default=None,
        help="check cycles measured (default: one record period)",
    )
    parser.add_argument("--scheduler", action="store_true", help="the whole scheduler process")
    args = parser.parse_args()
    if args.cycles is None:
        args.cycles = math.ceil(waits.RECORD_EVERY.total_seconds() / args.every)
    if args.scheduler:
        _with_scheduler(args)
        return
    every = timedelta(seconds=args.every)
    with tempfile.TemporaryDirectory(prefix="bench-waits-") as home:
        outbox = Path(home) / "outbox"
        checker = waits.WaitExecutor(servers={})
        try:
            began = time.process_time()
            started = time.monotonic()
            for i in range(args.waits):
                checker.submit(spec=_spec(outbox, i, every))
            submitted = time.monotonic() - started
            print(
                f"submitted {args.waits} waits in {submitted:.2f} s "
                f"({time.process_time() - began:.2f} s of CPU)"
            )
            time.sleep(args.every + 5)  # every wait's first check and started report
            reports_before = _count(outbox)
            cpu_before, wall_before = time.process_time(), time.monotonic()
            time.sleep(args.every * args.cycles)
            cpu = time.process_time() - cpu_before
            wall = time.monotonic() - wall_before
            written = _count(outbox) - reports_before
            held = checker.held()
        finally:
            checker.close()
    share = cpu / wall
    verdict = "ok" if share < TARGET else "OVER TARGET"
    print(f"{held} waits held, checked every {args.every:g} s, over {wall:.0f} s:")
    print(f"  checker CPU {share:.2%} of one core (target < {TARGET:.0%}): {verdict}")
    print(
        f"  {args.waits * wall / args.every / wall:.0f} checks/s; "
        f"{written / wall:.1f} reports/s to the outbox ({written} in the window)"
    )


def _with_scheduler(args: argparse.Namespace) -> None:
    window = args.every * args.cycles
    with tempfile.TemporaryDirectory(prefix="bench-waits-") as directory:
        home = Path(directory)
        url = f"sqlite:///{home / 'bench.db'}"
        migrate.upgrade(url)
        engine = dialects.create_engine(url)
        ledger = Ledger(engine)
        executor = local.LocalExecutor(home=home, slots=2)
        scheduler = Scheduler(
            ledger,
            executors={"local": executor},
            tokens=AttemptTokens(b"bench-secret-0123456789"),
            outbox=home / "outbox",
            settings=Settings(),
        )
        checker = scheduler.dispatcher.executors[WAIT_EXECUTOR]
        assert isinstance(checker, waits.WaitExecutor)
        try:
            with _Loop(scheduler, None):
                idle = _cpu_share(min(window, IDLE_WINDOW))
                triggers.apply_definition(ledger, _mapped_waits(args.waits, args.every))
                started = time.monotonic()
                triggers.trigger(ledger, name="waits", kind=TriggerKind.MANUAL, actor="bench")
                while checker.held() < args.waits:
                    time.sleep(0.5)
                opened = time.monotonic() - started
                time.sleep(args.every + 5)  # every wait's first check and started report
                busy = _cpu_share(window)
                held = checker.held()
        finally:
            executor.shutdown_supervisor()
            engine.dispose()
    verdict = "ok" if busy - idle < TARGET else "OVER TARGET"
    print(f"{held} waits opened and held in {opened:.0f} s, checked every {args.every:g} s:")
    print(
        f"  scheduler process CPU {busy:.2%} of one core over {window:g} s, idle {idle:.2%}: "
        f"the waits cost {busy - idle:.2%} (target < {TARGET:.0%}): {verdict}"
    )


def _cpu_share(seconds: float) -> float:
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.monotonic() - wall)


def _mapped_waits(count: int, every: float) -> str:
    listing = f"python3 -c 'import json; print(json.dumps(list(range({count}))))'"
    return f"""\
name: waits
tasks:
  names:
    run: {listing} > "$VERITASK_OUTPUT"
  each:
    after: [names]
    map: {{over: "{{{{ outputs.names }}}}", max_map: {count}}}
    wait: {{path: "/nonexistent/bench-waits/{{{{ map.item }}}}/_SUCCESS", every: {every:g}s}}
"""


def _spec(outbox: Path, i: int, every: timedelta) -> port.AttemptSpec:
    condition = port.WaitCondition(
        port.Condition.PATH,
        f"/nonexistent/bench-waits/{i}/_SUCCESS",
        every,
        timedelta(days=1),
    )
    return port.AttemptSpec(
        instance_id=f"bench-wait-{i}",
        attempt_no=1,
        attempt_token=f"token-{i}",
        task=condition,
        callback=port.OutboxCallback(outbox),
        heartbeat_interval=BEAT,
    )


def _count(outbox: Path) -> int:
    with os.scandir(outbox) as entries:
        return sum(1 for entry in entries if entry.name.endswith(".json"))


if __name__ == "__main__":
    main()

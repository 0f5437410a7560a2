"""The Celery executor end to end, beside bare Celery on the same broker and backend.

(a) **Veritask**: one run of ``--tasks`` independent tasks ``true`` through a scheduler with
    the Celery executor, two Veritask Celery workers (``--concurrency`` each) on RabbitMQ and
    Redis, events through the outbox (workers on this host); from the trigger until every
    instance is durably SUCCESS in the ledger (SQLite), in tasks per second. The scheduler's
    loop is started before the window opens, as bare Celery's client connects before its own.
(b) **bare Celery**, measured in the same run: ``--tasks`` no-op Celery tasks sent to two plain
    Celery workers with the same concurrency, broker and backend, until every result is in
    (the issue's baseline);
(c) **bare Celery running** ``true``: the same, each task running ``true`` in a process of its
    own, the work one Veritask attempt of ``true`` does for the task itself.

    python -m bench.celery --tasks 1000 --concurrency 2
    python -m bench.celery --rounds 3     # the parts in turn, three times; the median ratios
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from celery import Celery

from bench.scheduler import _all_success, _fanout_yaml, _Loop, _wait_run
from veritask.core.states import TriggerKind
from veritask.execution.celery import executor as celery_executor
from veritask.execution.celery.settings import CelerySettings
from veritask.ledger import dialects, migrate
from veritask.ledger.ledger import Ledger
from veritask.scheduling import collector, triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

BROKER = os.environ.get("VERITASK_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
BACKEND = os.environ.get("VERITASK_CELERY_BACKEND", "redis://127.0.0.1:6379/13")
ROOT = Path(__file__).resolve().parents[1]
#: How long the scheduler's loop runs before the measured window opens: it recovers and
#: connects to its executors' engines in that time, as a scheduler in service has.
LOOP_STARTED_SECONDS = 0.5
#: A plain Celery worker for the baselines, the same configuration otherwise: a no-op task, and
#: a task that runs ``true`` in a process of its own (the work a Veritask attempt of ``true``
#: does, without a worker that survives the pool, a spool, a claim or a ledger).
BARE_WORKER = """
import sys
from veritask.execution.celery import app as celery_app
from veritask.execution.celery.settings import CelerySettings
app = celery_app.make_app(CelerySettings(broker_url=sys.argv[1], backend_url=sys.argv[2]))
@app.task(name="bench.noop")
def noop():
    return None
@app.task(name="bench.true")
def true():
    import subprocess
    return subprocess.run(["true"], check=True).returncode
app.worker_main(["worker", "--queues=" + sys.argv[3], "--concurrency=" + sys.argv[4],
                 "--hostname=" + sys.argv[5], "--loglevel=WARNING", "--without-gossip",
                 "--without-mingle", "--pool=prefork"])
"""


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    with open(log, "ab") as output:
        return subprocess.Popen(
            command,
            stdout=output,
            stderr=output,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its session holds its pool and what the pool forks
        )


@dataclass(frozen=True)
class WorkersCpu:
    """CPU seconds of Celery workers' sessions, by the part of the host that spent it."""

    #: The Celery worker processes themselves: consuming, acknowledging, feeding the pool.
    workers: float = 0.0
    #: Their children: the pool processes that run the Celery tasks (Veritask's deliveries).
    children: float = 0.0
    #: What those forked: the tasks' own processes (a Veritask pool process runs the worker
    #: program itself).
    below: float = 0.0

    @property
    def total(self) -> float:
        return self.workers + self.children + self.below

    def since(self, earlier: WorkersCpu, *, scale: float = 1.0) -> WorkersCpu:
        """What was spent since ``earlier``, times ``scale``."""
        return WorkersCpu(
            (self.workers - earlier.workers) * scale,
            (self.children - earlier.children) * scale,
            (self.below - earlier.below) * scale,
        )


def _session_cpu(sessions: set[int]) -> WorkersCpu:
    """User + system CPU of every live process of these sessions and of the children they
    reaped (a pool process reaps the task it forked), from
    /proc: what the work cost, whatever else the machine was doing."""
    workers = children = below = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) not in sessions:
            continue
        own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
        if int(entry.name) in sessions:  # a Celery worker: what it reaped were its children
            workers, children = workers + own, children + reaped
        elif int(fields[1]) in sessions:  # a pool process
            children, below = children + own, below + reaped
        else:
            below += own + reaped
    tick = os.sysconf("SC_CLK_TCK")
    return WorkersCpu(workers / tick, children / tick, below / tick)


@dataclass(frozen=True)
class Measured:
    tasks_per_second: float
    #: CPU milliseconds per task: this process (the scheduler, or the client sending tasks) ...
    own_cpu_ms: float
    #: ... and the Celery workers' sessions, by part.
    workers_cpu: WorkersCpu

    @property
    def workers_cpu_ms(self) -> float:
        return self.workers_cpu.total


def _measure(
    tasks: int, workers: list[subprocess.Popen[bytes]], work: Callable[[], float]
) -> Measured:
    sessions = {worker.pid for worker in workers}
    own_before = time.process_time()
    workers_before = _session_cpu(sessions)
    elapsed = work()
    workers_after = _session_cpu(sessions)
    own_cpu = time.process_time() - own_before
    per_task_ms = 1000 / tasks
    return Measured(
        tasks / elapsed,
        own_cpu * per_task_ms,
        workers_after.since(workers_before, scale=per_task_ms),
    )


def _wait_ready(app: Celery, hostnames: list[str]) -> None:
    give_up_at = time.monotonic() + 60
    while len(app.control.ping(destination=hostnames, timeout=0.5)) < len(hostnames):
        if time.monotonic() > give_up_at:
            raise TimeoutError(f"workers {hostnames} did not answer")


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _delete_queue(app: Celery, queue: str) -> None:
    """Delete a round's queue and the exchange Celery made for it: each round makes its own, and
    the broker would keep them all."""
    with contextlib.suppress(Exception), app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.queue_delete(queue)
        channel.exchange_delete(queue)


def bare_celery(args: argparse.Namespace, tmp: Path, task: str = "bench.noop") -> Measured:
    queue = f"bench-bare-{secrets.token_hex(3)}"
    settings = CelerySettings(broker_url=BROKER, backend_url=BACKEND, default_queue=queue)
    from veritask.execution.celery import app as celery_app

    app = celery_app.make_app(settings)
    names = [f"bare{n}-{secrets.token_hex(2)}@bench" for n in range(2)]
    workers = [
        _start(
            [
                sys.executable,
                "-c",
                BARE_WORKER,
                BROKER,
                BACKEND,
                queue,
                str(args.concurrency),
                name,
            ],
            tmp / "bare.log",
        )
        for name in names
    ]
    try:
        _wait_ready(app, names)

        def work() -> float:
            started = time.perf_counter()
            results = [app.send_task(task, queue=queue) for _ in range(args.tasks)]
            for result in results:
                result.get(timeout=300)
            return time.perf_counter() - started

        return _measure(args.tasks, workers, work)
    finally:
        _stop(workers)
        _delete_queue(app, queue)


def veritask_celery(args: argparse.Namespace, tmp: Path) -> Measured:
    queue = f"bench-vt-{secrets.token_hex(3)}"
    settings = CelerySettings(broker_url=BROKER, backend_url=BACKEND, default_queue=queue)
    executor = celery_executor.CeleryExecutor(settings)
    names = [f"vt{n}-{secrets.token_hex(2)}@bench" for n in range(2)]
    workers = [
        _start(
            [
                sys.executable,
                "-m",
                "veritask.execution.celery",
                f"--broker={BROKER}",
                f"--backend={BACKEND}",
                f"--queues={queue}",
                f"--concurrency={args.concurrency}",
                f"--home={tmp / name}",
                f"--hostname={name}",
                "--loglevel=WARNING",
            ],
            tmp / "veritask-workers.log",
        )
        for name in names
    ]
    url = f"sqlite:///{tmp / 'veritask.db'}"
    migrate.upgrade(url)
    engine = dialects.create_engine(url)
    ledger = Ledger(engine)
    try:
        _wait_ready(executor.app, names)
        collector.tune()  # as a scheduler's process does once it has started
        scheduler = Scheduler(
            ledger,
            executors={"celery": executor},
            tokens=AttemptTokens(b"bench-secret-0123456789"),
            outbox=tmp / "outbox",
            settings=Settings(),
        )
        name = f"celery-{secrets.token_hex(3)}"
        text = _fanout_yaml(name, args.tasks).replace(
            "{run: 'true'}", "{run: 'true', executor: celery}"
        )
        triggers.apply_definition(ledger, text)
        run_ids: list[str] = []

        def work() -> float:
            started = time.perf_counter()
            run = triggers.trigger(
                ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench"
            )
            _wait_run(ledger, run.run_id)
            run_ids.append(run.run_id)
            return time.perf_counter() - started

        # A scheduler that is running already, as bare Celery's client is connected before its
        # window opens: recovered, and connected to the broker and Redis ahead of submissions.
        with _Loop(scheduler, None):
            time.sleep(LOOP_STARTED_SECONDS)
            measured = _measure(args.tasks, workers, work)
        _all_success(ledger, run_ids[0])
        return measured
    finally:
        _stop(workers)
        _delete_queue(executor.app, queue)
        executor.close()
        engine.dispose()


def _print_round(
    args: argparse.Namespace, bare: Measured, bare_true: Measured, ours: Measured
) -> tuple[float, float]:
    """Print one round; returns its ratios to bare Celery and to bare Celery running `true`."""
    for label, measured, what in (
        ("bare Celery:      ", bare, "no-op tasks"),
        ("bare Celery, true:", bare_true, "tasks running 'true' in a process"),
        ("Veritask + Celery:", ours, "tasks 'true'"),
    ):
        print(
            f"{label} {measured.tasks_per_second:8.1f} tasks/s ({args.tasks} {what}, 2 workers);"
            f" CPU per task: this process {measured.own_cpu_ms:5.2f} ms, Celery workers"
            f" {measured.workers_cpu_ms:5.2f} ms"
        )
        split = measured.workers_cpu
        print(
            f"{'':19}   workers' CPU per task: worker processes {split.workers:4.2f} ms, their"
            f" children {split.children:4.2f} ms, what those forked {split.below:4.2f} ms"
        )
    ratio = ours.tasks_per_second / bare.tasks_per_second
    print(f"ratio Veritask/Celery:    {ratio:8.2f}  (target >= 0.5)")
    same_work = ours.tasks_per_second / bare_true.tasks_per_second
    print(f"ratio Veritask/Celery running the same 'true': {same_work:8.2f}")
    return ratio, same_work


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.celery")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=2, help="per worker (2 workers)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the three parts in turn this many times; with more than one, the medians"
        " of the ratios end the report (the host's speed drifts between runs)",
    )
    args = parser.parse_args(argv)
    ratios: list[float] = []
    same_work_ratios: list[float] = []
    # Every round's files stay until the end: on ext4 without a journal, deleting a round's
    # thousands of files would make creating files dearer for the next (docs/executors.md).
    with tempfile.TemporaryDirectory(prefix="veritask-bench-celery-") as name:
        for round_no in range(1, args.rounds + 1):
            tmp = Path(name) / f"round-{round_no}"
            tmp.mkdir()
            bare = bare_celery(args, tmp)
            bare_true = bare_celery(args, tmp, "bench.true")
            ours = veritask_celery(args, tmp)
            if args.rounds > 1:
                print(f"-- round {round_no} of {args.rounds}")
            ratio, same_work = _print_round(args, bare, bare_true, ours)
            ratios.append(ratio)
            same_work_ratios.append(same_work)
    if args.rounds > 1:
        print(
            f"median over {args.rounds} rounds: ratio Veritask/Celery"
            f" {statistics.median(ratios):.2f} (target >= 0.5), running the same 'true'"
            f" {statistics.median(same_work_ratios):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

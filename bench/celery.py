"""The Celery executor end to end, beside bare Celery on the same broker and backend.

(a) **Veritask**: one run of ``--tasks`` independent tasks ``true`` through a scheduler with
    the Celery executor, two Veritask Celery workers (``--concurrency`` each) on RabbitMQ and
    Redis, events through the outbox (workers on this host); from the trigger until every
    instance is durably SUCCESS in the ledger (SQLite), in tasks per second.
(b) **bare Celery**, measured in the same run: ``--tasks`` no-op Celery tasks sent to two plain
    Celery workers with the same concurrency, broker and backend, until every result is in.

    python -m bench.celery --tasks 1000 --concurrency 2
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from celery import Celery

from bench.scheduler import _all_success, _fanout_yaml, _Loop, _wait_run
from veritask.core.states import TriggerKind
from veritask.execution.celery import executor as celery_executor
from veritask.execution.celery.settings import CelerySettings
from veritask.ledger import dialects, migrate
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

BROKER = os.environ.get("VERITASK_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
BACKEND = os.environ.get("VERITASK_CELERY_BACKEND", "redis://127.0.0.1:6379/13")
ROOT = Path(__file__).resolve().parents[1]
#: A plain Celery worker for the baseline: one no-op task, the same configuration otherwise.
BARE_WORKER = """
import sys
from veritask.execution.celery import app as celery_app
from veritask.execution.celery.settings import CelerySettings
app = celery_app.make_app(CelerySettings(broker_url=sys.argv[1], backend_url=sys.argv[2]))
@app.task(name="bench.noop")
def noop():
    return None
app.worker_main(["worker", "--queues=" + sys.argv[3], "--concurrency=" + sys.argv[4],
                 "--hostname=" + sys.argv[5], "--loglevel=WARNING", "--without-gossip",
                 "--without-mingle", "--pool=prefork"])
"""


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    with open(log, "ab") as output:
        return subprocess.Popen(
            command, stdout=output, stderr=output, stdin=subprocess.DEVNULL, env=env
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


def bare_celery(args: argparse.Namespace, tmp: Path) -> float:
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
        started = time.perf_counter()
        results = [app.send_task("bench.noop", queue=queue) for _ in range(args.tasks)]
        for result in results:
            result.get(timeout=300)
        count: int = args.tasks
        return count / (time.perf_counter() - started)
    finally:
        _stop(workers)


def veritask_celery(args: argparse.Namespace, tmp: Path) -> float:
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
        with _Loop(scheduler, None):
            started = time.perf_counter()
            run = triggers.trigger(
                ledger, name=name, kind=TriggerKind.MANUAL, actor="operator:bench"
            )
            _wait_run(ledger, run.run_id)
            elapsed = time.perf_counter() - started
        _all_success(ledger, run.run_id)
        count: int = args.tasks
        return count / elapsed
    finally:
        _stop(workers)
        engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.celery")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=2, help="per worker (2 workers)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="veritask-bench-celery-") as name:
        tmp = Path(name)
        bare = bare_celery(args, tmp)
        ours = veritask_celery(args, tmp)
    print(f"bare Celery:              {bare:8.1f} tasks/s ({args.tasks} no-op tasks, 2 workers)")
    print(f"Veritask + Celery:        {ours:8.1f} tasks/s ({args.tasks} tasks 'true', 2 workers)")
    print(f"ratio Veritask/Celery:    {ours / bare:8.2f}  (target >= 0.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

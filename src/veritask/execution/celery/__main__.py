"""``python -m veritask.execution.celery`` (also ``veritask-celery-worker``): a Celery worker
that runs Veritask attempts.

    veritask-celery-worker --queues etl,default --concurrency 4 --home /var/lib/veritask-worker

The broker and the result backend come from ``--broker``/``--backend`` or the environment
(``VERITASK_CELERY_BROKER``, ``VERITASK_CELERY_BACKEND``), as for the scheduler. Each attempt
gets a directory under ``<home>/executor/attempts``. ``--hostname`` names the worker in
Celery (``inspect``) and in the claim evidence; give every worker of a host its own.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from veritask.execution import layout, task_env
from veritask.execution.celery import registration
from veritask.execution.celery.settings import BACKEND_ENV, BROKER_ENV, CelerySettings

try:
    from veritask.execution.celery import app as celery_app
    from veritask.execution.celery import claims, task
except ModuleNotFoundError as missing:  # the celery extra is not installed
    if (missing.name or "").split(".")[0] not in registration.CLIENT_PACKAGES:
        raise
    raise SystemExit(
        f"veritask-celery-worker needs the package {missing.name}: {registration.INSTALL}"
    ) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="veritask-celery-worker", description="A Celery worker that runs Veritask attempts."
    )
    parser.add_argument("--broker", default=os.environ.get(BROKER_ENV))
    parser.add_argument("--backend", default=os.environ.get(BACKEND_ENV))
    parser.add_argument(
        "--queues", default=None, help="comma-separated queues to consume (default: veritask)"
    )
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--home", type=Path, default=Path(os.environ.get("VERITASK_HOME", ".veritask-worker"))
    )
    parser.add_argument("--hostname", default=f"veritask@{socket.gethostname()}")
    parser.add_argument("--loglevel", default="INFO")
    args = parser.parse_args(argv)
    if not args.broker:
        parser.error(f"--broker: give the broker URL (or set {BROKER_ENV})")
    if args.concurrency < 1:
        parser.error("--concurrency: must be 1 or more")
    try:
        task_env.passthrough_names(os.environ)
    except task_env.TaskEnvError as exc:
        parser.error(str(exc))
    environ = dict(os.environ)
    environ[BROKER_ENV] = args.broker
    if args.backend:
        environ[BACKEND_ENV] = args.backend
    settings = CelerySettings.from_environment(environ)
    if settings is None:  # unreachable: the broker is set above
        parser.error("no broker")
    home = layout.ExecutorHome(args.home.resolve() / "executor")
    home.attempts.mkdir(parents=True, exist_ok=True, mode=0o700)
    app = celery_app.make_app(settings)
    context = task.WorkerContext(
        settings=settings,
        home=home,
        claims=claims.Claims.connect(settings.backend_url, retention=settings.retention),
    )
    task.register(app, context)
    queues = args.queues or settings.default_queue
    app.worker_main(
        [
            "worker",
            f"--queues={queues}",
            f"--concurrency={args.concurrency}",
            f"--hostname={args.hostname}",
            f"--loglevel={args.loglevel}",
            "--pool=prefork",
            "--without-gossip",
            "--without-mingle",
        ]
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

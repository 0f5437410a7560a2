"""The verbs that start processes: ``up`` (API + scheduler), ``server`` (API), ``scheduler``.

This is the one part of the CLI that does not talk HTTP: it builds the API and the scheduler
in this process. Ctrl-C and SIGTERM stop it cleanly: the API finishes its requests, the
scheduler its tick, the lease is given up. Attempts keep running under the local executor's
supervisor; the next start recovers them (docs/scheduling.md,
section 5).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Final

import click

from veritask.cli import client
from veritask.cli.client import EXIT_FAILED, EXIT_OK, EXIT_REFUSED

if TYPE_CHECKING:  # imported at run time only by the verbs that start processes
    from fastapi import FastAPI

    from veritask.services.platform import Platform

DEFAULT_PORT: Final = 8765
DEFAULT_HOST: Final = "127.0.0.1"
GRACEFUL_SHUTDOWN_SECONDS: Final = 3

log = logging.getLogger("veritask")


class _Stop:
    """Set by SIGINT/SIGTERM. Installed before uvicorn, which re-raises the signal it caught
    after its shutdown: this handler then takes it instead of the default one (which would
    end the process before the scheduler stopped)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self)


def _configure_logging() -> None:
    """``VERITASK_LOG_LEVEL`` (default WARNING) and ``VERITASK_LOG_FORMAT`` (text or json)."""
    from veritask.services import log_format

    handler = logging.StreamHandler(sys.stderr)
    try:
        handler.setFormatter(log_format.formatter(os.environ.get("VERITASK_LOG_FORMAT", "")))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    logging.basicConfig(
        level=os.environ.get("VERITASK_LOG_LEVEL", "WARNING").upper(), handlers=[handler]
    )


def _tasks_as_root_if_need_be(home: Path) -> None:
    """``veritask up`` is the one command that must run the examples on a fresh machine:
    started as root where the default task user cannot run this Python or reach the data
    folder, it runs tasks as root, and says so, rather than start tasks that cannot run.
    ``veritask server`` and ``scheduler`` never do this: a deployment sets
    ``VERITASK_TASK_USER`` or installs Python where the task user can run it."""
    from veritask.execution import task_user

    problem = task_user.embedded_problem(home, Path(sys.executable), os.environ)
    if problem is None:
        return
    os.environ[task_user.SETTING] = "root"
    sys.stderr.write(
        f"warning: tasks run as root, so they can read the platform's secrets: {problem}."
        f" Set {task_user.SETTING} to an unprivileged user that can, to keep tasks apart"
        " from the platform (docs/security.md).\n"
    )


def _secure_home() -> Path:
    """``VERITASK_HOME``, made or kept private to this user (``execution/task_user.py``);
    a ``VERITASK_TASK_USER`` that cannot be used is a usage error, said before anything
    starts."""
    from veritask.execution import task_user

    home = client.home()
    try:
        task_user.secure_home(home, os.environ)
    except task_user.TaskUserError as exc:
        raise click.UsageError(str(exc)) from None
    return home


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise client.CliError(EXIT_FAILED, f"cannot listen on {host}:{port}: {exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _serve(app: FastAPI, sock: socket.socket, stop: _Stop) -> None:
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level=os.environ.get("VERITASK_LOG_LEVEL", "warning").lower(),
        access_log=False,
        lifespan="on",
        # Open browser tabs hold server-sent event streams; a stop waits this long for them.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    server = uvicorn.Server(config)
    stop.install()
    server.run(sockets=[sock])


def _application(database_url: str, home: Path, platform: Platform) -> FastAPI:
    """The API with the web UI mounted on it: one process serves both."""
    from veritask.api.app import create_app
    from veritask.api.settings import ApiSettings
    from veritask.ui import app as ui_app

    app = create_app(ApiSettings(database_url, home), platform=platform)
    ui_app.install(app)
    return app


def _announce(url: str, token: str, created: bool, home: Path) -> None:
    lines = [
        f"Veritask is up at {url}",
        f"open {url}/ in a browser and sign in with the admin token below",
        f"admin token ({'new' if created else 'kept'} in {home / client.TOKEN_FILE}): {token}",
        f"data folder: {home}",
        "the CLI on this machine finds both by itself; elsewhere:",
        f"  export VERITASK_URL={url} VERITASK_TOKEN={token}",
        "Ctrl-C stops it; running attempts continue and are recovered at the next start.",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _on_tasks_path(folder: Path) -> None:
    """Put ``folder`` first on the PYTHONPATH that the local workers, started from this
    process, give their tasks: its ``call:`` modules (examples/jobs) are importable."""
    entries = [
        str(folder.resolve()),
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(entries))


def _spark_apps_in(folder: Path) -> None:
    """Let the examples' Spark tasks name their applications relative to ``folder``, unless
    ``VERITASK_SPARK_APPS`` names another folder."""
    from veritask.execution.spark import registration

    os.environ.setdefault(registration.APPS_ENV, str(folder.resolve()))


def _load_examples(platform: Platform, folder: Path) -> None:
    from veritask.services import definitions, errors

    for path in sorted(folder.glob("*.yaml")):
        try:
            applied = definitions.apply_definition(platform, path.read_text(), actor="api")
        except errors.ServiceError as exc:
            first = str(exc).splitlines()[0]
            sys.stderr.write(f"example {path.name} skipped: {first}\n")
            continue
        what = "new version" if applied.created else "unchanged"
        sys.stderr.write(f"example {path.name}: {applied.name} v{applied.version} ({what})\n")
        for warning in applied.warnings:
            sys.stderr.write(f"example {path.name}: warning: {warning.field}: {warning.message}\n")


@click.command("up")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option("--host", default=DEFAULT_HOST, show_default=True)
@click.option("--slots", type=click.IntRange(min=1), default=None, help="Attempts run at once.")
@click.option(
    "--examples",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("examples"),
    show_default=True,
    help="Apply every *.yaml in this folder at start (if it exists); its Python modules are "
    "importable by the tasks (the folder goes on their PYTHONPATH).",
)
def up_command(port: int, host: str, slots: int | None, examples: Path) -> None:
    """Migrate, then run the API and the scheduler in this process until Ctrl-C."""
    _configure_logging()
    from veritask.ledger import dialects, migrate
    from veritask.services import errors, tokens
    from veritask.services.platform import Platform
    from veritask.services.runtime import SchedulerRuntime

    _tasks_as_root_if_need_be(client.home())
    home = _secure_home()
    database_url = dialects.default_database_url()
    try:
        migrate.upgrade(database_url, permit_home=home)
    except Exception as exc:  # the driver's, alembic's or ours: all say the same to a person
        shown = dialects.normalize_url(database_url).render_as_string(hide_password=True)
        raise client.CliError(EXIT_FAILED, f"cannot migrate {shown}: {exc}") from None
    platform = Platform.open(database_url, home)
    sock = _bind(host, port)
    url = f"http://{host}:{sock.getsockname()[1]}"
    if examples.is_dir():
        _on_tasks_path(examples)
        _spark_apps_in(examples)
    runtime = SchedulerRuntime(platform, commit_base_url=url, slots=slots)
    try:
        runtime.start()
    except errors.SchedulerRefused as exc:
        sock.close()
        platform.close()
        raise client.CliError(EXIT_REFUSED, f"the scheduler refused to start: {exc}") from None
    try:
        token, created = tokens.admin_token_for_home(platform, home)
        if examples.is_dir():
            _load_examples(platform, examples)
        tokens.write_private(home / client.URL_FILE, url)
        _announce(url, token, created, home)
        _serve(_application(database_url, home, platform), sock, _Stop())
    finally:
        runtime.stop()
        platform.close()
    sys.stderr.write("Veritask stopped\n")


@click.command("server")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option("--host", default=DEFAULT_HOST, show_default=True)
def server_command(port: int, host: str) -> None:
    """Run the API alone (run `veritask db upgrade` first, and a scheduler somewhere)."""
    _configure_logging()
    from veritask.ledger import dialects
    from veritask.services import health, tokens
    from veritask.services.platform import Platform

    home = _secure_home()
    database_url = dialects.default_database_url()
    platform = Platform.open(database_url, home)
    try:
        ready = health.readiness(platform)
        if not ready.ready:
            raise client.CliError(EXIT_FAILED, f"not ready: {ready.detail}")
        sock = _bind(host, port)
        url = f"http://{host}:{sock.getsockname()[1]}"
        token, created = tokens.admin_token_for_home(platform, home)
        tokens.write_private(home / client.URL_FILE, url)
        _announce(url, token, created, home)
        _serve(_application(database_url, home, platform), sock, _Stop())
    finally:
        platform.close()


@click.command("scheduler")
@click.option("--slots", type=click.IntRange(min=1), default=None, help="Attempts run at once.")
def scheduler_command(slots: int | None) -> None:
    """Run the scheduler alone until Ctrl-C (one per SQLite database; many on PostgreSQL)."""
    _configure_logging()
    from veritask.ledger import dialects
    from veritask.services import errors, health
    from veritask.services.platform import Platform
    from veritask.services.runtime import SchedulerRuntime

    home = _secure_home()
    platform = Platform.open(dialects.default_database_url(), home)
    stop = _Stop()
    stop.install()
    try:
        ready = health.readiness(platform)
        if not ready.ready:
            raise client.CliError(EXIT_FAILED, f"not ready: {ready.detail}")
        runtime = SchedulerRuntime(platform, commit_base_url=client.api_url(), slots=slots)
        try:
            runtime.start()
        except errors.SchedulerRefused as exc:
            raise client.CliError(EXIT_REFUSED, f"the scheduler refused to start: {exc}") from None
        sys.stdout.write(f"scheduler running on {platform.database_backend}; Ctrl-C stops it\n")
        sys.stdout.flush()
        try:
            while not stop.event.wait(1.0):  # a timeout keeps the wait responsive to signals
                pass
        finally:
            runtime.stop()
    finally:
        platform.close()
    sys.stderr.write("scheduler stopped\n")
    raise SystemExit(EXIT_OK)

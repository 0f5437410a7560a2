"""How fast the web UI renders a run of 1,000 instances: ``make bench`` (never a test).

Runs a real run of ``--tasks`` tasks ``true`` (``--layers`` layers, each task after one task
of the layer before) through the scheduler and the local executor on SQLite, so that the
ledger holds the events a real run leaves (created, opened, acknowledged, started, completed).
Then serves the API with the UI from a thread, signs in, and times ``GET /ui/runs/<id>``
(services, graph layout, timeline, Gantt and the template, over HTTP) ``--repeat`` times.
The target is under one second.

    python -m bench.ui
    python -m bench.ui --tasks 1000 --layers 20 --repeat 5
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from tests.integration.conftest import ServerThread

from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.core.states import RunExecutionState, TriggerKind
from veritask.execution import local
from veritask.ledger import migrate
from veritask.services import definitions, runs, tokens
from veritask.services.platform import Platform
from veritask.services.runtime import SchedulerRuntime
from veritask.services.tokens import TokenRole
from veritask.ui import app as ui_app
from veritask.ui.context import LANGUAGE_COOKIE

TARGET_SECONDS = 1.0
DEADLINE_SECONDS = 600.0
LANGUAGES = ("en", "zh")
FINISHED = (RunExecutionState.SUCCESS, RunExecutionState.FAILED, RunExecutionState.CANCELLED)


def layered_definition(tasks: int, layers: int) -> str:
    """``tasks`` tasks ``true`` in ``layers`` layers; each waits for one of the layer before."""
    width = max(1, tasks // layers)
    lines = ["name: wide_run", "tasks:"]
    for index in range(tasks):
        layer, column = divmod(index, width)
        after = f", after: [t{(layer - 1) * width + column:04}]" if layer else ""
        lines.append(f"  t{index:04}: {{run: 'true'{after}}}")
    return "\n".join(lines) + "\n"


def run_to_the_end(platform: Platform, tasks: int, layers: int) -> str:
    definitions.apply_definition(platform, layered_definition(tasks, layers), actor="bench")
    runtime = SchedulerRuntime(platform, commit_base_url=None)
    runtime.start()
    try:
        run_id = runs.trigger_run(
            platform, "wide_run", actor="bench", kind=TriggerKind.MANUAL
        ).run_id
        give_up = time.monotonic() + DEADLINE_SECONDS
        while runs.get_run(platform, run_id).run.execution_state not in FINISHED:
            if time.monotonic() > give_up:
                raise TimeoutError("the run did not finish")
            time.sleep(1.0)
    finally:
        runtime.stop()
        local.LocalExecutor(home=platform.home).shutdown_supervisor()
    return run_id


def signed_in(url: str, token: str) -> httpx.Client:
    http = httpx.Client(base_url=url, timeout=60)
    csrf = re.search(r'name="csrf" value="([^"]+)"', http.get("/ui/sign-in").text)
    assert csrf is not None
    answer = http.post("/ui/sign-in", data={"csrf": csrf.group(1), "token": token})
    if answer.status_code != 303:
        raise RuntimeError(f"sign-in refused: {answer.status_code}")
    return http


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="veritask-bench-ui-") as folder:
        home = Path(folder) / "home"
        home.mkdir()
        url = f"sqlite:///{folder}/veritask.db"
        migrate.upgrade(url)
        platform = Platform.open(url, home)
        started = time.monotonic()
        run_id = run_to_the_end(platform, options.tasks, options.layers)
        detail = runs.get_run(platform, run_id)
        print(
            f"run of {len(detail.instances)} instances: {detail.run.execution_state} "
            f"in {time.monotonic() - started:.1f}s"
        )
        token = tokens.create_token(platform, role=TokenRole.VIEWER, name="bench").token
        app = create_app(ApiSettings(url, home), platform=platform)
        ui_app.install(app)
        timings: dict[str, list[float]] = {}
        first: dict[str, float] = {}
        with ServerThread(app) as server:
            http = signed_in(server.url, token)
            for language in LANGUAGES:
                http.cookies.set(LANGUAGE_COOKIE, language)
                # The first page of a language pays for compiling templates and, in Chinese,
                # for reading each recorded reason once; it is shown apart.
                began = time.perf_counter()
                http.get(f"/ui/runs/{run_id}").raise_for_status()
                first[language] = time.perf_counter() - began
                timings[language] = []
                for _ in range(options.repeat):
                    began = time.perf_counter()
                    page = http.get(f"/ui/runs/{run_id}")
                    timings[language].append(time.perf_counter() - began)
                    page.raise_for_status()
            http.close()
        platform.close()
    for language, measured in timings.items():
        median, worst = statistics.median(measured), max(measured)
        verdict = "under" if worst < TARGET_SECONDS else "OVER"
        print(
            f"GET /ui/runs/<id> with {len(detail.instances)} instances ({language}), "
            f"{len(page.content) // 1024} KiB: "
            f"median {median * 1000:.0f} ms, worst {worst * 1000:.0f} ms of {options.repeat} "
            f"({verdict} the {TARGET_SECONDS:.0f} s target); "
            f"first page {first[language] * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()

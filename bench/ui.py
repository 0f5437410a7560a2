"""How fast the web UI renders a run of 1,000 instances: ``make bench`` (never a test).

Runs a real run of ``--tasks`` tasks ``true`` (``--layers`` layers, each task after one task
of the layer before) through the scheduler and the local executor on SQLite, so that the
ledger holds the events a real run leaves (created, opened, acknowledged, started, completed).
Then serves the API with the UI from a thread, signs in, and times ``GET /ui/runs/<id>``
(services, graph layout, timeline, Gantt and the template, over HTTP) ``--repeat`` times.
The target is under one second.

Then the grid: a definition of ``--grid-tasks`` tasks (200) with ``--grid-runs`` runs (100)
written through the ledger as the scheduler and the workers would (each instance opened,
acknowledged, started and completed, one in ten failed, in batches), and
``GET /ui/definitions/<name>/grid?runs=100`` timed the same way: services, folds, the
template, over HTTP. The target is under one second too.

    python -m bench.ui
    python -m bench.ui --tasks 1000 --layers 20 --repeat 5
    python -m bench.ui --grid-only --grid-tasks 200 --grid-runs 100

Then the log viewer: an attempt whose log is ``--log-mb`` megabytes (100; written to a
temporary VERITASK_HOME at bench time, never kept), and ``GET /ui/instances/<id>/log`` timed
for its last page (the default; the first request also counts the file's lines once), its
first page, a page in the middle, and a search over the whole file. The target is under one
second for the pages.

    python -m bench.ui --log-only --log-mb 100
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
from tests.integration.conftest import ServerThread

from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.core import decide, judge
from veritask.core.events import Event, EventKind
from veritask.core.states import RunExecutionState, TriggerKind
from veritask.execution import local
from veritask.ledger import migrate
from veritask.scheduling import intake
from veritask.services import definitions, logs, runs, tokens
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


def grid_definition(tasks: int, layers: int) -> str:
    """``layered_definition`` named ``wide_grid``, whose runs may overlap."""
    return layered_definition(tasks, layers).replace(
        "name: wide_run\n", "name: wide_grid\nconcurrency: allow\n", 1
    )


def _worker_event(
    instance_id: str, attempt_no: int, token: str, seq: int, kind: str, evidence: dict[str, object]
) -> Event:
    return intake.to_event(
        {
            "event_id": str(uuid.uuid4()),
            "instance_id": instance_id,
            "attempt_no": attempt_no,
            "kind": kind,
            "actor": "worker",
            "event_time": datetime.now(UTC).isoformat(),
            "seq": seq,
            "attempt_token": token,
            "evidence": evidence,  # type: ignore[dict-item]
        }
    )


def finish_every_instance(platform: Platform, run_id: str, *, failing_every: int = 10) -> None:
    """Open, acknowledge, start and complete each instance of the run, in four batches."""
    instances = runs.get_run(platform, run_id).instances
    tokens_of = {i.id: f"bench-{uuid.uuid4().hex}" for i in instances}
    opened = []
    for instance in instances:
        loaded = platform.ledger.snapshot(instance.id)
        assert loaded is not None
        event = decide.open_attempt(
            loaded[0],
            token_hash=judge.hash_token(tokens_of[instance.id]),
            now=datetime.now(UTC),
            event_id=str(uuid.uuid4()),
        )
        assert event is not None
        opened.append(event)
    platform.ledger.apply_batch(opened)
    platform.ledger.apply_batch(
        [
            Event(
                str(uuid.uuid4()),
                e.instance_id,
                e.attempt_no,
                EventKind.SUBMIT_ACKNOWLEDGED,
                "executor",
                datetime.now(UTC),
                {"external_id": f"bench:{e.instance_id}/{e.attempt_no}", "executor": "bench"},
            )
            for e in opened
        ]
    )
    started = {"worker": "bench:1", "host": "bench", "pid": 1, "pid_start_time": 1, "pgid": 1}
    platform.ledger.apply_batch(
        [
            _worker_event(
                e.instance_id, e.attempt_no, tokens_of[e.instance_id], 1, "started", started
            )
            for e in opened
        ]
    )
    completions = []
    for index, e in enumerate(opened):
        failed = index % failing_every == failing_every - 1
        evidence: dict[str, object] = {
            "exit_code": 1 if failed else 0,
            "signal": None,
            "error_category": "task_error" if failed else "none",
            "commit_marker": None,
            "log_path": "",
            "output": None,
        }
        completions.append(
            _worker_event(
                e.instance_id, e.attempt_no, tokens_of[e.instance_id], 2, "completed", evidence
            )
        )
    platform.ledger.apply_batch(completions)


def build_grid(platform: Platform, tasks: int, runs_count: int) -> None:
    definitions.apply_definition(platform, grid_definition(tasks, 10), actor="bench")
    for _ in range(runs_count):
        run_id = runs.trigger_run(
            platform, "wide_grid", actor="bench", kind=TriggerKind.MANUAL
        ).run_id
        finish_every_instance(platform, run_id)


def time_pages(
    http: httpx.Client, path: str, repeat: int
) -> tuple[dict[str, list[float]], dict[str, float], int]:
    """Each language's first render apart (templates compile, reasons are read once), then
    ``repeat`` renders; and the size of the last page."""
    timings: dict[str, list[float]] = {}
    first: dict[str, float] = {}
    size = 0
    for language in LANGUAGES:
        http.cookies.set(LANGUAGE_COOKIE, language)
        began = time.perf_counter()
        http.get(path).raise_for_status()
        first[language] = time.perf_counter() - began
        timings[language] = []
        for _ in range(repeat):
            began = time.perf_counter()
            page = http.get(path)
            timings[language].append(time.perf_counter() - began)
            page.raise_for_status()
            size = len(page.content)
    return timings, first, size


def report(label: str, timings: dict[str, list[float]], first: dict[str, float], size: int) -> None:
    for language, measured in timings.items():
        median, worst = statistics.median(measured), max(measured)
        verdict = "under" if worst < TARGET_SECONDS else "OVER"
        print(
            f"{label} ({language}), {size // 1024} KiB: "
            f"median {median * 1000:.0f} ms, worst {worst * 1000:.0f} ms of {len(measured)} "
            f"({verdict} the {TARGET_SECONDS:.0f} s target); "
            f"first page {first[language] * 1000:.0f} ms"
        )


def bench_grid(options: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="veritask-bench-grid-") as folder:
        home = Path(folder) / "home"
        home.mkdir()
        url = f"sqlite:///{folder}/veritask.db"
        migrate.upgrade(url)
        platform = Platform.open(url, home)
        started = time.monotonic()
        build_grid(platform, options.grid_tasks, options.grid_runs)
        print(
            f"{options.grid_runs} runs of {options.grid_tasks} tasks written "
            f"in {time.monotonic() - started:.1f}s"
        )
        token = tokens.create_token(platform, role=TokenRole.VIEWER, name="bench").token
        app = create_app(ApiSettings(url, home), platform=platform)
        ui_app.install(app)
        path = f"/ui/definitions/wide_grid/grid?runs={options.grid_runs}"
        with ServerThread(app) as server:
            http = signed_in(server.url, token)
            timings, first, size = time_pages(http, path, options.repeat)
            http.close()
        platform.close()
    report(
        f"GET {path.split('?')[0]} with {options.grid_runs} runs x {options.grid_tasks} tasks",
        timings,
        first,
        size,
    )


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
    parser.add_argument("--grid-tasks", type=int, default=200)
    parser.add_argument("--grid-runs", type=int, default=100)
    parser.add_argument("--grid-only", action="store_true", help="Only the grid's page.")
    parser.add_argument("--log-mb", type=int, default=100)
    parser.add_argument("--log-only", action="store_true", help="Only the log viewer's page.")
    parser.add_argument("--run-only", action="store_true", help="Only the run's page.")
    options = parser.parse_args()
    if options.run_only:
        bench_run_page(options)
        return
    if options.log_only:
        bench_log_page(options)
        return
    if not options.grid_only:
        bench_run_page(options)
    bench_grid(options)
    bench_log_page(options)


def write_log(path: Path, megabytes: int) -> int:
    """A log of about ``megabytes`` MB of numbered lines, some coloured; its line count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = lines = 0
    with path.open("wb") as log:
        while written < megabytes * 1_000_000:
            block = "".join(
                f"2026-01-01T00:00:00Z INFO step {n:09d} read 4096 rows from the source "
                f"\x1b[32mok\x1b[0m\n"
                for n in range(lines + 1, lines + 10_001)
            ).encode()
            log.write(block)
            written += len(block)
            lines += 10_000
    return lines


def bench_log_page(options: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="veritask-bench-log-") as folder:
        home = Path(folder) / "home"
        home.mkdir()
        url = f"sqlite:///{folder}/veritask.db"
        migrate.upgrade(url)
        platform = Platform.open(url, home)
        definitions.apply_definition(
            platform, "name: big_log\ntasks:\n  only: {run: 'true'}\n", actor="bench"
        )
        run_id = runs.trigger_run(platform, "big_log", actor="bench").run_id
        instance_id = runs.get_run(platform, run_id).instances[0].id
        loaded = platform.ledger.snapshot(instance_id)
        assert loaded is not None
        opened = decide.open_attempt(
            loaded[0],
            token_hash=judge.hash_token("bench"),
            now=datetime.now(UTC),
            event_id=str(uuid.uuid4()),
        )
        assert opened is not None
        platform.ledger.apply(opened)
        path = logs.attempt_log(platform, instance_id, opened.attempt_no)
        assert path is not None
        lines = write_log(path, options.log_mb)
        print(f"log of {path.stat().st_size / 1e6:.0f} MB, {lines} lines written")
        token = tokens.create_token(platform, role=TokenRole.VIEWER, name="bench").token
        app = create_app(ApiSettings(url, home), platform=platform)
        ui_app.install(app)
        base = f"/ui/instances/{instance_id}/log?attempt={opened.attempt_no}"
        with ServerThread(app) as server:
            http = signed_in(server.url, token)
            for label, path_asked in (
                ("last page", base),
                ("first page", f"{base}&line=1"),
                ("a middle page", f"{base}&line={lines // 2}"),
                ("a search over the whole log", f"{base}&q=step+{lines // 3:09d}"),
            ):
                timings, first, size = time_pages(http, path_asked, options.repeat)
                report(f"GET /ui/instances/<id>/log, {label}", timings, first, size)
            http.close()
        platform.close()


def bench_run_page(options: argparse.Namespace) -> None:
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

"""How fast ``explain --as-of`` answers for a run of 1,000 instances: ``make bench`` (never a
test).

Writes a run of ``--tasks`` tasks (1,000, in 20 layers) through the ledger as the scheduler
and the workers would: each instance opened, acknowledged and started, then T is taken, then
each completes — one in ``--late-every`` (10) with an event time before T (its report
arrives late, from the spool, as after a lost worker), one in ten failed. Then serves the API
from a thread and times, warm, ``GET /api/v2/runs/<id>/explain?as_of=T`` (what ``veritask
explain RUN --as-of T`` asks) and, as the baseline measured in the same run, ``GET
/api/v2/runs/<id>`` (the run as shown today). The target is under 300 ms.

    python -m bench.explain
    python -m bench.explain --tasks 2000 --repeat 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from tests.integration.conftest import ServerThread

from bench.ui import layered_definition
from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.core import decide, judge
from veritask.core.events import Event, EventKind
from veritask.core.states import TriggerKind
from veritask.ledger import migrate
from veritask.scheduling import intake
from veritask.services import definitions, runs, tokens
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole

TARGET_SECONDS = 0.3


def _report(
    instance_id: str, attempt_no: int, token: str, seq: int, kind: str, at: datetime, **ev: object
) -> Event:
    return intake.to_event(
        {
            "event_id": str(uuid.uuid4()),
            "instance_id": instance_id,
            "attempt_no": attempt_no,
            "kind": kind,
            "actor": "worker",
            "event_time": at.isoformat(),
            "seq": seq,
            "attempt_token": token,
            "evidence": ev,  # type: ignore[dict-item]
        }
    )


def build_run(platform: Platform, tasks: int, late_every: int) -> tuple[str, datetime]:
    """The run, and the instant T between its starts and its completions."""
    source = layered_definition(tasks, 20).replace("name: wide_run\n", "name: explained\n", 1)
    definitions.apply_definition(platform, source, actor="bench")
    run_id = runs.trigger_run(platform, "explained", actor="bench", kind=TriggerKind.MANUAL).run_id
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
            _report(
                e.instance_id,
                e.attempt_no,
                tokens_of[e.instance_id],
                1,
                "started",
                datetime.now(UTC),
                **started,
            )
            for e in opened
        ]
    )
    happened = datetime.now(UTC)
    as_of = happened + timedelta(milliseconds=1)
    time.sleep(0.01)
    completions = []
    for index, e in enumerate(opened):
        failed = index % 10 == 9
        at = happened if index % late_every == 0 else datetime.now(UTC)
        completions.append(
            _report(
                e.instance_id,
                e.attempt_no,
                tokens_of[e.instance_id],
                2,
                "completed",
                at,
                exit_code=1 if failed else 0,
                signal=None,
                error_category="task_error" if failed else "none",
                commit_marker=None,
                log_path="",
                output=None,
            )
        )
    platform.ledger.apply_batch(completions)
    return run_id, as_of


def timed(http: httpx.Client, path: str, params: dict[str, str], repeat: int) -> tuple[float, int]:
    """The median of ``repeat`` warm answers (after one that warms the caches), and its size."""
    http.get(path, params=params).raise_for_status()
    measured = []
    size = 0
    for _ in range(repeat):
        began = time.perf_counter()
        answer = http.get(path, params=params)
        measured.append(time.perf_counter() - began)
        answer.raise_for_status()
        size = len(answer.content)
    return statistics.median(measured), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--late-every", type=int, default=10, help="One instance in N completes late."
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="veritask-bench-explain-") as folder:
        home = Path(folder) / "home"
        home.mkdir()
        url = f"sqlite:///{folder}/veritask.db"
        migrate.upgrade(url)
        platform = Platform.open(url, home)
        run_id, as_of = build_run(platform, options.tasks, options.late_every)
        token = tokens.create_token(platform, role=TokenRole.VIEWER, name="bench").token
        app = create_app(ApiSettings(url, home), platform=platform)
        with ServerThread(app) as server:
            http = httpx.Client(
                base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {token}"}
            )
            path = f"/api/v2/runs/{run_id}/explain"
            answer = http.get(path, params={"as_of": as_of.isoformat()}).json()
            late = sum(1 for i in answer["instances"] if i["known_now"]["made_by"]["late"])
            explain, size = timed(http, path, {"as_of": as_of.isoformat()}, options.repeat)
            baseline, _ = timed(http, f"/api/v2/runs/{run_id}", {}, options.repeat)
            http.close()
        platform.close()
    verdict = "under" if explain < TARGET_SECONDS else "OVER"
    print(
        f"explain --as-of, a run of {options.tasks} instances ({late} late), warm median of "
        f"{options.repeat}: {explain * 1000:.0f} ms, {size / 1e6:.2f} MB "
        f"(target < {TARGET_SECONDS * 1000:.0f} ms: {verdict}); GET /runs/<id> "
        f"{baseline * 1000:.0f} ms in the same run: ratio {explain / baseline:.2f}"
    )


if __name__ == "__main__":
    main()

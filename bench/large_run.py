"""How fast the API answers a run of 20,000 tasks: ``python -m bench.large_run`` (never a test).

Writes one RUNNING run of ``--instances`` CREATED instances (20,000) straight into a fresh
SQLite ledger, serves the API from a thread, then times ``GET /api/v2/runs/<id>`` (its first
page of instances), the walk through every page of ``GET /api/v2/runs/<id>/instances``, and
``POST /api/v2/runs/<id>/cancel``. The targets: the first page and the cancel under one second.

    python -m bench.large_run
    python -m bench.large_run --instances 50000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
from tests.contract import builders
from tests.integration.conftest import ServerThread

from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.core.policy import TaskPolicy
from veritask.core.states import InstanceState
from veritask.ledger import migrate, schema
from veritask.ledger import runs as ledger_runs
from veritask.services import tokens
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole

TARGET_SECONDS = 1.0


def build_run(platform: Platform, count: int) -> str:
    policy = TaskPolicy().to_json()
    with platform.engine.begin() as connection:
        definition = builders.a_definition(connection, "large")
        run_id = builders.a_run(connection, definition, key="large:1")
        connection.execute(
            schema.task_instances.insert(),
            [
                ledger_runs.instance_row(
                    ledger_runs.new_id(),
                    run_id,
                    f"t{n:06d}",
                    ledger_runs.UNMAPPED,
                    InstanceState.CREATED,
                    policy,
                    builders.T0,
                )
                for n in range(count)
            ],
        )
    return run_id


def timed(label: str, call: object) -> httpx.Response:
    assert callable(call)
    started = time.monotonic()
    answer = call()
    took = time.monotonic() - started
    assert isinstance(answer, httpx.Response)
    verdict = "ok" if took < TARGET_SECONDS else "SLOW"
    print(
        f"{label}: {took:.3f}s, {len(answer.content) / 1e6:.2f} MB, {answer.status_code} {verdict}"
    )
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=20_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="veritask-bench-large-") as folder:
        home = Path(folder) / "home"
        home.mkdir()
        url = f"sqlite:///{folder}/veritask.db"
        migrate.upgrade(url)
        platform = Platform.open(url, home)
        run_id = build_run(platform, options.instances)
        token = tokens.create_token(platform, role=TokenRole.OPERATOR, name="bench").token
        app = create_app(ApiSettings(url, home), platform=platform)
        with ServerThread(app) as server:
            http = httpx.Client(
                base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {token}"}
            )
            head = timed("GET /runs/{id}", lambda: http.get(f"/api/v2/runs/{run_id}"))
            cursor = head.json()["instances_next_cursor"]
            started, pages = time.monotonic(), 1
            while cursor is not None:
                page = http.get(f"/api/v2/runs/{run_id}/instances", params={"cursor": cursor})
                cursor = page.json()["next_cursor"]
                pages += 1
            print(f"every page ({pages}): {time.monotonic() - started:.3f}s")
            timed(
                "POST /runs/{id}/cancel",
                lambda: http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "bench"}),
            )
            http.close()
        platform.close()


if __name__ == "__main__":
    main()

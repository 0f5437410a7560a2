"""A worker whose clock is behind never gives a negative duration: the phase is clamped at
zero, and the skew is shown as evidence in the durations API and on the run's timeline."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.ui.conftest import PIPELINE, Ui, served_ui
from veritask.core import judge
from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONObject
from veritask.services import runs
from veritask.services.tokens import TokenRole

TOKEN = "attempt-token"


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[Ui]:
    with served_ui(database_url, tmp_path / "home", PIPELINE) as found:
        yield found


def event(
    instance_id: str, kind: EventKind, actor: str, at: datetime, evidence: JSONObject, seq: int = 0
) -> Event:
    worker = actor == "worker"
    return Event(
        str(uuid.uuid4()),
        instance_id,
        1,
        kind,
        actor,
        at,
        evidence,
        seq=seq if worker else None,
        attempt_token=TOKEN if worker else None,
    )


def attempt(ui: Ui, *, worker_behind: timedelta, report_first: bool) -> tuple[str, str]:
    """The run's ``extract`` opened and acknowledged by the platform, started and completed
    by a worker whose clock is ``worker_behind``; ``report_first``: its start report is
    recorded before the acknowledgement (they raced). The run and the instance's ids."""
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    instance_id = next(
        i.id for i in runs.get_run(ui.platform, run_id).instances if i.task == "extract"
    )
    ledger = ui.platform.ledger
    now = datetime.now(UTC)
    opened = event(
        instance_id,
        EventKind.ATTEMPT_OPENED,
        "scheduler",
        now,
        {
            "token_hash": judge.hash_token(TOKEN),
            "reason": "first",
            "retry_index": 0,
            "resubmit_index": 0,
        },
    )
    acked = event(
        instance_id,
        EventKind.SUBMIT_ACKNOWLEDGED,
        "executor",
        now + timedelta(seconds=1),
        {"external_id": "local:1", "executor": "local"},
    )
    worker_now = now + timedelta(seconds=2) - worker_behind
    started = event(instance_id, EventKind.STARTED, "worker", worker_now, {"worker": "w:1"}, seq=1)
    completed = event(
        instance_id,
        EventKind.COMPLETED,
        "worker",
        worker_now + timedelta(seconds=10),
        {"exit_code": 0, "error_category": "none"},
        seq=2,
    )
    order = (
        [opened, started, acked, completed] if report_first else [opened, acked, started, completed]
    )
    for each in order:
        ledger.apply(each)
    return run_id, instance_id


def test_a_worker_clock_behind_is_clamped_and_shown_as_clock_skew(served: Ui) -> None:
    run_id, instance_id = attempt(served, worker_behind=timedelta(seconds=30), report_first=False)
    api = served.client()
    api.headers["Authorization"] = f"Bearer {served.tokens[TokenRole.VIEWER]}"

    body = api.get(f"/api/v2/runs/{run_id}/durations").json()

    extract = next(i for i in body["instances"] if i["instance_id"] == instance_id)
    assert all(value >= 0 for value in extract["seconds"].values()), extract["seconds"]
    assert all(value >= 0 for value in body["seconds"].values())
    queue = next(p for p in extract["phases"] if p["phase"] == "queue")
    assert queue["end"] == queue["start"]
    # The start report was stamped 29 s before the acknowledgement it came after.
    assert queue["clock_skew_seconds"] == pytest.approx(29.0)
    assert extract["seconds"]["queue"] == 0.0
    assert extract["seconds"]["execution"] == pytest.approx(10.0)
    execution = next(p for p in extract["phases"] if p["phase"] == "execution")
    assert execution["clock_skew_seconds"] is None

    page = served.signed_in(TokenRole.VIEWER).http.get(f"/ui/runs/{run_id}").text
    assert 'data-phase="queue" data-attempt="1"' in page
    assert 'data-clock-skew="29.0"' in page
    assert "clocks disagree" in page

    statistics = api.get("/api/v2/definitions/pipeline/durations").json()
    assert statistics["tasks"]["extract"]["queue"]["p50"] == 0.0


def test_reports_that_raced_are_clamped_without_blaming_a_clock(served: Ui) -> None:
    """The worker's start report was recorded before the engine's acknowledgement, and
    stamped before it too: both orders agree, the queue was zero long, no clock is wrong."""
    run_id, instance_id = attempt(served, worker_behind=timedelta(seconds=1.5), report_first=True)
    api = served.client()
    api.headers["Authorization"] = f"Bearer {served.tokens[TokenRole.VIEWER]}"

    body = api.get(f"/api/v2/runs/{run_id}/durations").json()

    extract = next(i for i in body["instances"] if i["instance_id"] == instance_id)
    queue = next(p for p in extract["phases"] if p["phase"] == "queue")
    assert queue["end"] == queue["start"]
    assert queue["clock_skew_seconds"] is None
    assert extract["seconds"]["queue"] == 0.0

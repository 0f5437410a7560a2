"""An instance's history over HTTP: newest or oldest first by a query parameter, filtered by
event kind and outcome with a GET form, routine heartbeats and progress reports folded into
one row that opens, and no box of its own that would hide the newest events."""

from __future__ import annotations

import re
import uuid
from importlib import resources
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import completed, open_attempt, started, worker_event
from tests.ui.conftest import Ui
from veritask.core.jsontypes import JSONObject
from veritask.execution import wire
from veritask.services import definitions, errors, runs
from veritask.services.tokens import TokenRole

ROW = re.compile(r'<tr class="event [^"]*" data-kind="([^"]*)" data-outcome="([^"]*)"')
POSITION = re.compile(r'data-position="(\d+)"')
RETRIED = "name: retried\ntasks:\n  work: {run: 'true', retry: {max_retries: 2, delay: 0s}}\n"
FOLD = re.compile(r'<tr class="fold" data-kind="folded" data-count="(\d+)">')


def _running(ui: Ui, definition: str = "pipeline") -> tuple[str, str, httpx.Client]:
    """An instance whose worker has started; its id, its token, the worker's client."""
    run_id = runs.trigger_run(ui.platform, definition, actor="test").run_id
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    token = "token-" + uuid.uuid4().hex
    open_attempt(ui.platform, instance_id, token)
    worker = ui.client()  # closed with the others
    worker.headers["Authorization"] = f"Bearer {token}"
    _send(worker, started(instance_id, 1, token))
    return instance_id, token, worker


def _send(worker: httpx.Client, event: JSONObject) -> None:
    answer = worker.post("/api/v2/callbacks/events", json=event)
    assert answer.status_code in (200, 403), answer.text


def _routine(worker: httpx.Client, instance_id: str, token: str, first_seq: int) -> int:
    """Three heartbeats and two progress reports; the next sequence number."""
    seq = first_seq
    reports: list[tuple[wire.WorkerEventKind, JSONObject]] = [
        ("heartbeat", {}),
        ("progress", {"phase": "load", "done": 1, "total": 4}),
        ("heartbeat", {}),
        ("progress", {"phase": "load", "done": 2, "total": 4}),
        ("heartbeat", {}),
    ]
    for kind, evidence in reports:
        _send(worker, worker_event(instance_id, 1, token, seq, kind, evidence))
        seq += 1
    return seq


def test_the_history_is_newest_first_unless_asked_for_the_recorded_order(ui: Ui) -> None:
    instance_id, token, worker = _running(ui)
    _send(worker, completed(instance_id, 1, token, seq=2))
    viewer = ui.signed_in(TokenRole.VIEWER).http

    newest = viewer.get(f"/ui/instances/{instance_id}").text
    oldest = viewer.get(f"/ui/instances/{instance_id}?order=oldest").text

    shown = [int(p) for p in POSITION.findall(newest)]
    assert len(shown) >= 5 and shown == sorted(shown, reverse=True)
    assert [int(p) for p in POSITION.findall(oldest)] == sorted(shown)
    assert ROW.findall(newest)[0][0] == "completed"
    assert ROW.findall(oldest)[0][0] == "instance_created"
    assert 'href="?order=oldest#history" id="history-oldest"' in newest
    assert 'id="history-newest" aria-current="true"' in newest
    assert 'id="history-oldest" aria-current="true"' in oldest


@pytest.mark.parametrize("language", ["en", "zh"])
def test_heartbeats_and_progress_between_two_events_fold_into_one_row(
    ui: Ui, language: str
) -> None:
    instance_id, token, worker = _running(ui)
    _send(worker, completed(instance_id, 1, token, seq=_routine(worker, instance_id, token, 2)))
    viewer = ui.signed_in(TokenRole.VIEWER).http
    viewer.cookies.set("veritask_lang", language)

    page = viewer.get(f"/ui/instances/{instance_id}").text

    assert FOLD.findall(page) == ["5"]
    summary = re.search(r"<summary>(.*?)</summary>", page.split('data-kind="folded"')[1], re.S)
    assert summary is not None
    text = re.sub(r"<[^>]+>", "", summary.group(1))
    expected = (
        r"3 heartbeats and 2 progress reports from .+ to .+"
        if language == "en"
        else r"3 次心跳和2 次进度报告，从 .+ 到 .+"
    )
    assert re.fullmatch(expected, text), text
    assert summary.group(1).count("<time") == 2  # both times in the viewer's zone
    folded = page.split('data-kind="folded"')[1].split("</table>")[0]
    assert [kind for kind, _ in ROW.findall(folded)] == [
        "heartbeat",
        "progress",
        "heartbeat",
        "progress",
        "heartbeat",
    ]
    outside = page.replace(folded, "")
    assert "heartbeat" not in {kind for kind, _ in ROW.findall(outside)}
    # Asked for one kind, the rows are shown as they are.
    beats = viewer.get(f"/ui/instances/{instance_id}?kind=heartbeat").text
    assert FOLD.findall(beats) == []
    assert [kind for kind, _ in ROW.findall(beats)] == ["heartbeat"] * 3


def test_a_lone_heartbeat_is_not_folded(ui: Ui) -> None:
    instance_id, token, worker = _running(ui)
    _send(worker, worker_event(instance_id, 1, token, 2, "heartbeat", {}))
    _send(worker, completed(instance_id, 1, token, seq=3))
    page = ui.signed_in(TokenRole.VIEWER).http.get(f"/ui/instances/{instance_id}").text
    assert FOLD.findall(page) == []
    assert "heartbeat" in {kind for kind, _ in ROW.findall(page)}


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_filter_form_keeps_one_kind_and_one_outcome(ui: Ui, language: str) -> None:
    definitions.apply_definition(ui.platform, RETRIED, actor="test")
    instance_id, token, worker = _running(ui, "retried")
    _send(worker, completed(instance_id, 1, token, seq=2, exit_code=1))
    second = "token-" + uuid.uuid4().hex
    assert open_attempt(ui.platform, instance_id, second) == 2
    # The first attempt, fenced by the second, reports late: kept, stale.
    _send(worker, worker_event(instance_id, 1, token, 3, "heartbeat", {}))
    worker.headers["Authorization"] = f"Bearer {second}"
    # An attempt that does not exist: refused, kept for audit as rejected.
    _send(worker, started(instance_id, 3, second))
    viewer = ui.signed_in(TokenRole.VIEWER).http
    viewer.cookies.set("veritask_lang", language)
    base = f"/ui/instances/{instance_id}"

    page = viewer.get(base).text
    assert '<form method="get" action="/ui/instances/' in page
    assert '<select id="history-kind" name="kind">' in page
    assert '<select id="history-outcome" name="outcome">' in page
    assert ("Every outcome" if language == "en" else "所有结果") in page
    outcomes = {outcome for _, outcome in ROW.findall(page)}
    assert {"applied", "stale", "rejected"} <= outcomes

    stale = viewer.get(f"{base}?kind=&outcome=stale").text
    assert ROW.findall(stale) == [("heartbeat", "stale")]
    assert '<option value="stale" selected>' in stale
    assert 'id="history-clear"' in stale
    rejected = viewer.get(f"{base}?outcome=rejected").text
    assert ROW.findall(rejected) == [("started", "rejected")]
    opened = viewer.get(f"{base}?kind=attempt_opened&order=oldest").text
    assert ROW.findall(opened) == [("attempt_opened", "applied")] * 2
    assert '<option value="attempt_opened" selected>' in opened
    nothing = viewer.get(f"{base}?kind=cancel_requested").text
    assert ("No event matches." if language == "en" else "没有符合条件的事件。") in nothing
    # A value the form never offers shows every event rather than an error.
    every = viewer.get(f"{base}?kind=nonsense&outcome=x&order=y").text
    assert len(ROW.findall(every)) == len(ROW.findall(page))


def test_the_history_has_no_box_of_its_own() -> None:
    stylesheet = Path(str(resources.files("veritask.ui") / "static" / "veritask.css")).read_text()
    rule = re.search(r"\.scroll-x \{([^}]*)\}", stylesheet)
    assert rule is not None and "max-height" not in rule.group(1)
    template = Path(str(resources.files("veritask.ui") / "templates" / "instance.html")).read_text()
    assert 'id="instance-history" class="scroll-x"' in template


def test_the_service_refuses_a_kind_or_an_outcome_it_does_not_know(ui: Ui) -> None:
    instance_id, _, _ = _running(ui)
    with pytest.raises(errors.InvalidInput, match="must be one of"):
        runs.instance_events(ui.platform, instance_id, kind="nonsense")
    with pytest.raises(errors.InvalidInput, match="must be one of"):
        runs.instance_events(ui.platform, instance_id, outcome="lost")

"""Worker reports over HTTP that the ledger cannot keep as sent, or that exceed their
attempt's limits (``core/reports.py``): refused naming the field, kept or counted, and the
attempt's end always recorded."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import (
    Api,
    completed,
    hello_attempt,
    now,
    report,
    started,
    worker_event,
)
from veritask.core import reports
from veritask.core.events import EventKind
from veritask.core.jsontypes import JSONObject
from veritask.execution import wire
from veritask.ledger import metric_values, rejections, schema
from veritask.services import metrics


def _rejected(api: Api, instance_id: str) -> list[sa.Row[tuple[object, ...]]]:
    x = schema.rejected_events.c
    with api.platform.engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(schema.rejected_events)
                .where(x.instance_id == instance_id)
                .order_by(x.position)
            ).all()
        )


def _events(api: Api, instance_id: str, kind: str) -> list[str]:
    e = schema.events.c
    with api.platform.engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(e.event_id).where(e.instance_id == instance_id, e.kind == kind)
            ).scalars()
        )


def _stored_bytes(api: Api, instance_id: str) -> int:
    """What the attempt's reports occupy in the events and rejected_events tables."""
    e, x = schema.events.c, schema.rejected_events.c
    with api.platform.engine.connect() as connection:
        evidence = connection.execute(sa.select(e.evidence).where(e.instance_id == instance_id))
        payloads = connection.execute(sa.select(x.payload).where(x.instance_id == instance_id))
        return sum(len(json.dumps(row[0])) for row in (*evidence, *payloads))


def _problem_fields(response_json: JSONObject) -> list[object]:
    found = response_json.get("errors")
    assert isinstance(found, list)
    return [item.get("field") for item in found if isinstance(item, dict)]


def test_a_time_without_its_offset_is_422_naming_it_and_kept_as_refused(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    naive = started(instance_id, attempt_no, token) | {"event_time": "2026-01-02T03:04:05"}
    response = report(api, naive, token)
    assert response.status_code == 422, response.text
    assert "body.event_time" in _problem_fields(response.json()), response.json()
    kept = _rejected(api, instance_id)
    assert [row.event_id for row in kept] == [naive["event_id"]]
    assert kept[0].event_time is None  # the column holds only times with their offset
    assert kept[0].payload["event_time"] == "2026-01-02T03:04:05"
    assert "event_time" in kept[0].reason
    # The attempt is untouched and its next, well-formed report is applied.
    assert report(api, started(instance_id, attempt_no, token), token).status_code == 200


def test_numbers_and_texts_past_the_columns_are_422_naming_them_and_kept(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    assert report(api, started(instance_id, attempt_no, token), token).status_code == 200
    sent: list[tuple[JSONObject, str]] = [
        ({"phase": "p", "done": 2**63, "total": None, "message": None}, "body.evidence.done"),
        ({"phase": "x" * 129, "done": 1, "total": 2, "message": None}, "body.evidence.phase"),
        ({"phase": "p", "done": 1, "total": -(2**63) - 1}, "body.evidence.total"),
    ]
    later = now()
    for seq, (evidence, field) in enumerate(sent, start=2):
        event = worker_event(instance_id, attempt_no, token, seq, "progress", evidence)
        event["event_time"] = wire.format_time(later + timedelta(seconds=2 * seq))
        response = report(api, event, token)
        assert response.status_code == 422, response.text
        assert field in _problem_fields(response.json()), response.json()
    assert len(_rejected(api, instance_id)) == len(sent)
    assert _events(api, instance_id, "progress") == []
    end = completed(instance_id, attempt_no, token, 9)
    assert report(api, end, token).status_code == 200
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["state"] == "SUCCESS"


def _scraped(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(api.client(None).get("/metrics").text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


REFUSED_RATE = ("veritask_reports_refused_total", (("kind", "progress"), ("limit", "rate")))


def _progress(bulk: str) -> JSONObject:
    """A progress report carrying ``bulk`` (a message holds at most 4,096 characters; the
    evidence may hold other keys)."""
    return {"phase": "load", "done": 1, "total": 100, "message": None, "bulk": bulk}


def test_twenty_large_progress_reports_stay_within_the_bounds_and_the_end_lands(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "POSTGRES_SETTLE", timedelta())
    metric_values.PROCESS_TALLY.take()  # counts of earlier tests belong to their databases
    instance_id, attempt_no, token = hello_attempt(api)
    assert report(api, started(instance_id, attempt_no, token), token).status_code == 200
    # Twenty reports as large as a report may be, in a burst: the first few are recorded
    # (an attempt's first 64 KiB of progress are free), the others are too soon (only the
    # latest progress matters) and only counted.
    near_limit = "y" * (reports.MAX_EVIDENCE_BYTES[EventKind.PROGRESS] - 200)
    answers = []
    burst = now()
    for seq in range(2, 22):
        event = worker_event(instance_id, attempt_no, token, seq, "progress", _progress(near_limit))
        event["event_time"] = wire.format_time(burst + timedelta(milliseconds=10 * seq))
        answers.append(report(api, event, token))
    free = -(-reports.FREE_PROGRESS_BYTES // len(near_limit))  # reports until the free part
    assert [a.status_code for a in answers] == [200] * free + [422] * (20 - free)
    assert all(_problem_fields(a.json()) == ["body.event_time"] for a in answers[free:])
    # Twenty more, each larger than a report may be: refused naming the evidence, kept
    # (bounded) as refused evidence.
    too_large = "z" * reports.MAX_EVIDENCE_BYTES[EventKind.PROGRESS]
    for seq in range(22, 42):
        event = worker_event(instance_id, attempt_no, token, seq, "progress", _progress(too_large))
        refused = report(api, event, token)
        assert refused.status_code == 422
        assert _problem_fields(refused.json()) == ["body.evidence"]
    assert len(_events(api, instance_id, "progress")) == free
    assert len(_rejected(api, instance_id)) == 20
    # What the forty reports left: the free progress, and twenty bounded refusals.
    assert _stored_bytes(api, instance_id) < (free + 20) * rejections.MAX_PAYLOAD_BYTES
    assert _scraped(api)[REFUSED_RATE] == 20 - free
    end = completed(instance_id, attempt_no, token, 50)
    assert report(api, end, token).status_code == 200
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["state"] == "SUCCESS"


def test_progress_past_the_attempts_total_is_refused_but_its_beats_and_end_are_not(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reports, "MAX_PROGRESS_BYTES", 30 * 1024)
    monkeypatch.setattr(metrics, "POSTGRES_SETTLE", timedelta())
    metric_values.PROCESS_TALLY.take()
    instance_id, attempt_no, token = hello_attempt(api)
    assert report(api, started(instance_id, attempt_no, token), token).status_code == 200
    start = now()

    def at(seconds: int, event: JSONObject) -> JSONObject:
        return event | {"event_time": wire.format_time(start + timedelta(seconds=seconds))}

    ten_kib = "x" * (10 * 1024)
    codes = [
        report(
            api,
            at(
                2 * seq,
                worker_event(instance_id, attempt_no, token, seq, "progress", _progress(ten_kib)),
            ),
            token,
        ).status_code
        for seq in range(2, 7)
    ]
    assert codes == [200, 200, 422, 422, 422], codes
    heartbeat = at(20, worker_event(instance_id, attempt_no, token, 7, "heartbeat"))
    assert report(api, heartbeat, token).status_code == 200
    assert (
        report(api, at(21, completed(instance_id, attempt_no, token, 8)), token).status_code == 200
    )
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["state"] == "SUCCESS"
    total = ("veritask_reports_refused_total", (("kind", "progress"), ("limit", "total")))
    assert _scraped(api)[total] == 3

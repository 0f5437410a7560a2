"""Worker reports and the commit check: attempt tokens, fencing, duplicates."""

from __future__ import annotations

import json
import uuid

import sqlalchemy as sa

from tests.integration.conftest import (
    MAX_BODY,
    Api,
    completed,
    hello_attempt,
    now,
    open_attempt,
    report,
    started,
    worker_event,
)
from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONObject
from veritask.ledger import rejections, schema


def _fence(api: Api, instance_id: str, attempt_no: int) -> None:
    """What the reconciler records after a LOST attempt stayed unknown: fenced, retry."""
    loaded = api.platform.ledger.snapshot(instance_id)
    assert loaded is not None
    lease = Event(
        str(uuid.uuid4()),
        instance_id,
        attempt_no,
        EventKind.LEASE_EXPIRED,
        "monitor",
        now(),
        {"last_report_seq": loaded[0].attempts[-1].max_report_seq, "lease_expires_at": "x"},
    )
    api.platform.ledger.apply(lease, expected_version=loaded[1])
    fenced = Event(
        str(uuid.uuid4()),
        instance_id,
        attempt_no,
        EventKind.FENCED,
        "reconciler",
        now(),
        {"reason": "unknown past the window", "on_unknown": "retry", "gathered": {}},
    )
    api.platform.ledger.apply(fenced)


def test_a_report_with_the_attempt_token_is_applied(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    response = report(api, started(instance_id, attempt_no, token), token)
    assert response.status_code == 200
    assert response.json() == {
        "outcome": "applied",
        "reason": "attempt 1: the worker reports it running",
        "stop": False,
        "duplicate": False,
    }
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["state"] == "RUNNING"


def test_the_token_comes_from_the_header_not_the_body(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    event = started(instance_id, attempt_no, "a-token-in-the-body")
    assert report(api, event, token).status_code == 200


def test_a_duplicate_answers_with_the_original_outcome(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    event = started(instance_id, attempt_no, token)
    first = report(api, event, token)
    again = report(api, event, token)
    assert again.status_code == 200
    assert again.json()["outcome"] == first.json()["outcome"] == "applied"
    assert again.json()["duplicate"] is True
    with api.platform.engine.connect() as connection:
        count = connection.execute(
            sa.select(sa.func.count()).where(schema.events.c.event_id == event["event_id"])
        ).scalar_one()
    assert count == 1


def _rejected(api: Api, **where: object) -> list[sa.Row[tuple[object, ...]]]:
    x = schema.rejected_events.c
    with api.platform.engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(schema.rejected_events).where(
                    *(getattr(x, name) == value for name, value in where.items())
                )
            ).all()
        )


def _rejected_count(api: Api) -> int:
    with api.platform.engine.connect() as connection:
        return int(
            connection.execute(
                sa.select(sa.func.count()).select_from(schema.rejected_events)
            ).scalar_one()
        )


def test_a_token_that_names_no_attempt_is_401_and_stores_nothing(api: Api) -> None:
    instance_id, attempt_no, _token = hello_attempt(api)
    response = report(api, started(instance_id, attempt_no, "stolen"), "stolen")
    assert response.status_code == 401
    assert response.json()["type"] == "/problems/unauthenticated"
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["state"] == "QUEUED"
    # The disk-filling probe: garbage token, invented instance, a body near the cap.
    padding: JSONObject = {"note": "x" * (MAX_BODY - 2048)}
    invented = worker_event(str(uuid.uuid4()), 1, "garbage", 1, "progress", padding)
    assert report(api, invented, "garbage").status_code == 401
    assert _rejected_count(api) == 0


def test_an_attempt_may_write_only_its_own_events(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    # Its token, another instance: refused, and kept as evidence about the sender.
    other, other_attempt, _ = _attempt_of_new_run(api)
    assert report(api, started(other, other_attempt, token), token).status_code == 403
    # Its token, an attempt that does not exist: refused.
    assert report(api, started(instance_id, attempt_no + 1, token), token).status_code == 403
    kept = _rejected(api, instance_id=instance_id)
    assert [row.attempt_no for row in kept] == [attempt_no, attempt_no]
    assert {row.payload["instance_id"] for row in kept} == {other, instance_id}
    assert all("may not report about" in row.reason for row in kept)
    assert _rejected(api, instance_id=other) == []


def test_what_a_refused_sender_leaves_is_bounded_in_size_and_count(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    big: JSONObject = {"phase": "x", "message": "y" * (MAX_BODY - 4096)}
    for seq in range(1, rejections.MAX_PER_ATTEMPT + 11):
        # A stolen-but-real token spraying reports about an attempt not its own.
        event = worker_event(instance_id, attempt_no + 1, token, seq, "progress", big)
        assert report(api, event, token).status_code == 403
    kept = _rejected(api, instance_id=instance_id, attempt_no=attempt_no)
    assert len(kept) == rejections.MAX_PER_ATTEMPT
    for row in kept:
        assert len(json.dumps(row.payload)) <= rejections.MAX_PAYLOAD_BYTES
        assert row.payload["truncated"] is True
        assert row.payload["event_id"]


#: A definition whose runs may overlap: a second run of ``hello`` (concurrency forbid) is
#: refused and its instance closed, so it has no attempt to open.
SIDE_BY_SIDE = """\
name: side_by_side
concurrency: allow
tasks:
  greet: {run: echo hello}
"""


def _attempt_of_new_run(api: Api) -> tuple[str, int, str]:
    api.apply(SIDE_BY_SIDE)
    run_id = api.trigger("side_by_side", idempotency_key=uuid.uuid4().hex)
    instance_id = api.instance_ids(run_id)["greet"]
    token = "token-" + uuid.uuid4().hex
    return instance_id, open_attempt(api.platform, instance_id, token), token


def test_a_callback_without_a_token_is_401(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    response = api.client(None).post(
        "/api/v2/callbacks/events", json=started(instance_id, attempt_no, token)
    )
    assert response.status_code == 401


def test_a_report_about_an_unknown_instance_with_a_wrong_token_is_401(api: Api) -> None:
    # 404 here would tell a stranger which instances exist.
    response = report(api, started("no-such-instance", 1, "t"), "t")
    assert response.status_code == 401
    assert _rejected_count(api) == 0


def test_a_malformed_report_without_a_valid_token_is_401_before_the_body(api: Api) -> None:
    for token in (None, "garbage"):
        client = api.client(token)
        not_json = client.post(
            "/api/v2/callbacks/events",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        assert not_json.status_code == 401
        assert client.post("/api/v2/callbacks/events", json={"kind": 3}).status_code == 401
        assert client.post("/api/v2/callbacks/commit", json=[]).status_code == 401


def test_a_malformed_report_is_422(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    event = worker_event(instance_id, attempt_no, token, 1, "progress", {"done": 1})
    response = report(api, event, token)  # progress needs a phase
    assert response.status_code == 422
    not_worker = started(instance_id, attempt_no, token) | {"actor": "reconciler"}
    assert report(api, not_worker, token).status_code == 422
    bad_time = started(instance_id, attempt_no, token) | {"event_time": "yesterday"}
    assert report(api, bad_time, token).status_code == 422


def test_a_report_from_a_fenced_attempt_is_kept_as_stale_and_told_to_stop(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    report(api, started(instance_id, attempt_no, token), token)
    _fence(api, instance_id, attempt_no)
    late = report(api, completed(instance_id, attempt_no, token, seq=2), token)
    assert late.status_code == 200
    assert late.json()["outcome"] == "stale"
    assert late.json()["stop"] is True
    shown = api.http.get(f"/api/v2/instances/{instance_id}").json()
    assert shown["attempts"][0]["state"] == "ABANDONED"
    assert shown["attempts"][0]["late"]


def test_a_report_of_a_cancelling_attempt_is_told_to_stop(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    report(api, started(instance_id, attempt_no, token), token)
    assert api.http.post(f"/api/v2/instances/{instance_id}/cancel", json={}).status_code == 202
    beat = report(api, worker_event(instance_id, attempt_no, token, 2), token)
    assert beat.json()["stop"] is True


def test_a_commit_from_the_current_attempt_is_accepted_and_recorded(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    report(api, started(instance_id, attempt_no, token), token)
    body = {"instance_id": instance_id, "attempt_no": attempt_no, "marker": "s3://out/1"}
    response = api.client(token).post("/api/v2/callbacks/commit", json=body)
    assert response.status_code == 200
    assert response.json()["outcome"] == "applied"
    # A task that retries its commit is answered the same, and recorded once.
    again = api.client(token).post("/api/v2/callbacks/commit", json=body)
    assert again.status_code == 200
    shown = api.http.get(f"/api/v2/instances/{instance_id}").json()
    assert shown["attempts"][0]["commit_marker"] == "s3://out/1"
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds.count("output_committed") == 1


def test_a_commit_from_a_stale_attempt_is_409(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    report(api, started(instance_id, attempt_no, token), token)
    _fence(api, instance_id, attempt_no)
    body = {"instance_id": instance_id, "attempt_no": attempt_no, "marker": "s3://out/1"}
    response = api.client(token).post("/api/v2/callbacks/commit", json=body)
    assert response.status_code == 409
    problem = response.json()
    assert problem["type"] == "/problems/stale-attempt"
    assert problem["current_state"] == "ABANDONED"
    assert "stale" in problem["detail"] or "may not publish" in problem["detail"]
    # A newer attempt supersedes it: the old one is stale even after the new one opens.
    rerun = Event(
        str(uuid.uuid4()),
        instance_id,
        attempt_no + 1,
        EventKind.ATTEMPT_OPENED,
        "scheduler",
        now(),
        {"token_hash": "x", "reason": "rerun", "retry_index": 0, "resubmit_index": 0},
    )
    assert api.platform.ledger.apply(rerun).outcome.value == "applied"
    response = api.client(token).post("/api/v2/callbacks/commit", json=body)
    assert response.status_code == 409
    assert "attempt 2 owns the instance" in response.json()["detail"]


def test_a_commit_with_a_wrong_token_is_401_and_with_another_attempts_403(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    body = {"instance_id": instance_id, "attempt_no": attempt_no, "marker": "m"}
    assert api.client("wrong").post("/api/v2/callbacks/commit", json=body).status_code == 401
    missing = {"instance_id": "nope", "attempt_no": 1, "marker": "m"}
    assert api.client("wrong").post("/api/v2/callbacks/commit", json=missing).status_code == 401
    assert api.client(token).post("/api/v2/callbacks/commit", json=missing).status_code == 403


def test_a_conflicting_completion_over_http_raises_the_conflict_alert(api: Api) -> None:
    instance_id, attempt_no, token = hello_attempt(api)
    assert report(api, started(instance_id, attempt_no, token), token).status_code == 200
    first = report(api, completed(instance_id, attempt_no, token, 2, exit_code=0), token)
    assert first.json()["outcome"] == "applied"

    second = report(api, completed(instance_id, attempt_no, token, 3, exit_code=1), token)

    assert second.json()["outcome"] == "conflict"
    listed = api.http.get("/api/v2/alerts", params={"category": "platform"}).json()["items"]
    assert len(listed) == 1
    assert listed[0]["message"].startswith("conflicting evidence: ")
    assert listed[0]["instance_id"] == instance_id
    assert listed[0]["attempt_no"] == attempt_no
    assert listed[0]["definition"] == "hello"

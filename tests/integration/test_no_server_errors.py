"""Inputs that answered 500: each is a clear 4xx problem now, on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.integration.conftest import (
    HELLO,
    Api,
    completed,
    open_attempt,
    report,
    started,
    worker_event,
)
from veritask.core.policy import TaskPolicy

HUGE_ID = "99999999999999999999"


def _assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    found: dict[str, Any] = response.json()
    return found


@pytest.mark.parametrize("action", ["", "/acknowledge", "/resolve"])
def test_an_alert_id_past_the_integer_range_is_404(api: Api, action: str) -> None:
    method = api.http.get if not action else api.http.post
    problem = _assert_problem(method(f"/api/v2/alerts/{HUGE_ID}{action}"), 404)
    assert problem["detail"] == f"no alert {HUGE_ID}"
    _assert_problem(method(f"/api/v2/alerts/0{action}"), 404)


def test_a_downstream_override_of_a_publication_step_is_422_naming_scope(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    greet = api.instance_ids(run_id)["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, greet, token)
    report(api, started(greet, attempt_no, token), token)
    report(api, completed(greet, attempt_no, token, seq=2, exit_code=3), token)
    commit_id, _ = api.platform.ledger.create_instance(
        run_id=run_id, task_key="publish.commit", policy=TaskPolicy(), event_id=str(uuid.uuid4())
    )
    response = api.http.post(
        f"/api/v2/instances/{commit_id}/override",
        json={"state": "SUCCESS", "reason": "published by hand", "scope": "downstream"},
    )
    problem = _assert_problem(response, 422)
    assert problem["errors"][0]["field"] == "scope"
    assert "publish.commit" in problem["detail"]
    # The same step alone may be overridden.
    alone = api.http.post(
        f"/api/v2/instances/{commit_id}/override",
        json={"state": "SUCCESS", "reason": "published by hand", "scope": "instance"},
    )
    assert alone.status_code == 200, alone.text


def _assert_nul_refused(response: httpx.Response, field: str) -> None:
    problem = _assert_problem(response, 422)
    assert [e["field"] for e in problem["errors"]] == [field]
    assert "NUL" in problem["errors"][0]["message"]


def test_a_nul_character_is_refused_naming_where_it_is(api: Api) -> None:
    with_nul = HELLO.replace("one shell task", "one\x00task")
    _assert_nul_refused(
        api.http.post("/api/v2/definitions", json={"source": with_nul}), "body.source"
    )
    escaped = HELLO.replace("description: one shell task", 'description: "one\\0task"')
    applied = api.http.post("/api/v2/definitions", json={"source": escaped})
    _assert_nul_refused(applied, "description")
    api.apply(HELLO)
    runs = "/api/v2/definitions/hello/runs"
    _assert_nul_refused(
        api.http.post(runs, json={"parameters": {"table": "us\x00ers"}}), "body.parameters.table"
    )
    _assert_nul_refused(
        api.http.post(runs, json={"idempotency_key": "k\x00"}), "body.idempotency_key"
    )
    run_id = api.trigger("hello")
    cancel = api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "r\x00"})
    _assert_nul_refused(cancel, "body.reason")
    _assert_nul_refused(api.http.get("/api/v2/runs/a%00b"), "path")
    _assert_nul_refused(api.http.get("/api/v2/definitions/hello%00"), "path")
    _assert_nul_refused(
        api.http.get("/api/v2/runs", params={"definition": "h\x00"}), "query.definition"
    )
    # Nothing was stored by any of them: the run is still the only one.
    listed = api.http.get("/api/v2/runs").json()
    assert [run["id"] for run in listed["items"]] == [run_id]


def test_a_report_the_ledger_cannot_hold_is_422_naming_the_field(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    n = open_attempt(api.platform, instance_id, token)
    huge = 2**70
    cases = {
        "body.seq": started(instance_id, n, token) | {"seq": huge},
        "body.attempt_no": started(instance_id, n, token) | {"attempt_no": huge},
        "body.event_time": started(instance_id, n, token)
        | {"event_time": "9999-12-31T23:59:59-23:59"},
        "body.evidence.exit_code": completed(instance_id, n, token, 2, exit_code=huge),
        "body.evidence.done": worker_event(
            instance_id, n, token, 3, "progress", {"phase": "p", "done": huge}
        ),
    }
    for field, body in cases.items():
        problem = _assert_problem(report(api, body, token), 422)
        assert field in [e["field"] for e in problem["errors"]], (field, problem)

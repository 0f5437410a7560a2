"""An engine another distribution registers by an entry point: apply accepts its name, a
broken one is refused saying why, and its attempts' logs are read through it."""

from __future__ import annotations

import uuid

from tests.execution.engine_plugins import Plugin, plugin
from tests.integration.conftest import Api, open_attempt

__all__ = ["plugin"]


def _source(executor: str) -> str:
    return f"name: elsewhere\ntasks:\n  a:\n    run: 'true'\n    executor: {executor}\n"


def test_apply_accepts_an_engine_registered_by_an_entry_point(api: Api, plugin: Plugin) -> None:
    api.apply(_source(plugin.engine))
    shown = api.http.get("/api/v2/definitions/elsewhere")
    assert shown.status_code == 200


def test_apply_refuses_an_engine_whose_entry_point_fails_saying_why(
    api: Api, plugin: Plugin
) -> None:
    response = api.http.post("/api/v2/definitions", json={"source": _source(plugin.broken)})
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert (error["field"], error["line"]) == ("tasks.a.executor", 5)
    assert error["message"].startswith(f"the executor '{plugin.broken}' cannot be used here")
    assert "the client library is missing" in error["message"]


def test_an_attempts_log_is_read_through_its_engine(api: Api, plugin: Plugin) -> None:
    api.apply(_source(plugin.engine))
    instance_id = api.instance_ids(api.trigger("elsewhere"))["a"]
    attempt_no = open_attempt(
        api.platform, instance_id, "token-" + uuid.uuid4().hex, executor=plugin.engine
    )
    chunk = api.http.get(f"/api/v2/instances/{instance_id}/logs").json()
    assert chunk["text"] == f"{instance_id}/{attempt_no} kept by {plugin.engine}\n"
    assert chunk["log_location"] == f"{plugin.engine}:{instance_id}/{attempt_no}"


def test_a_search_reads_the_logs_an_engine_keeps(api: Api, plugin: Plugin) -> None:
    api.apply(_source(plugin.engine))
    instance_id = api.instance_ids(api.trigger("elsewhere"))["a"]
    attempt_no = open_attempt(
        api.platform, instance_id, "token-" + uuid.uuid4().hex, executor=plugin.engine
    )
    response = api.http.get(
        "/api/v2/logs/search", params={"text": "KEPT BY", "instance": instance_id}
    )
    assert response.status_code == 200, response.text
    [match] = response.json()["matches"]
    assert (match["instance_id"], match["attempt_no"], match["line_no"]) == (
        instance_id,
        attempt_no,
        1,
    )
    assert match["line"] == f"{instance_id}/{attempt_no} kept by {plugin.engine}"

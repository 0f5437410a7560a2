"""Health without a token, and the one error map: every error is application/problem+json."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.integration.conftest import HELLO, MAX_BODY, Api, ServerThread
from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.services.platform import Platform

PROBLEM = "application/problem+json"


def test_healthz_and_readyz_answer_without_a_token(api: Api) -> None:
    anonymous = api.client(None)
    assert anonymous.get("/healthz").json() == {"status": "ok"}
    ready = anonymous.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["ready"] is True
    assert ready.json()["revision"] == ready.json()["expected_revision"]


def test_readyz_is_503_on_a_database_that_was_never_migrated(
    empty_database_url: str, tmp_path: Path
) -> None:
    platform = Platform.open(empty_database_url, tmp_path)
    app = create_app(ApiSettings(empty_database_url, tmp_path), platform=platform)
    try:
        with ServerThread(app) as server, httpx.Client(base_url=server.url) as http:
            response = http.get("/readyz")
            assert http.get("/healthz").status_code == 200
    finally:
        platform.close()
    assert response.status_code == 503
    assert response.json()["ready"] is False
    assert "veritask db upgrade" in response.json()["detail"]


def test_the_openapi_document_is_served_without_a_token(api: Api) -> None:
    document = api.client(None).get("/openapi.json").json()
    assert "/api/v2/runs/{run_id}/cancel" in document["paths"]
    assert "/api/v1/runs/{run_id}" in document["paths"]
    errors = document["paths"]["/api/v2/runs/{run_id}"]["get"]["responses"]["404"]["content"]
    assert PROBLEM in errors
    schemes = document["components"]["securitySchemes"]
    assert {"ApiToken", "AttemptToken"} <= set(schemes)


def test_an_unknown_id_is_404_problem(api: Api) -> None:
    response = api.http.get("/api/v2/runs/no-such-run")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["type"] == "/problems/not-found"
    assert body["status"] == 404
    assert body["title"] == "Not Found"
    assert "no-such-run" in body["detail"]


def test_an_unknown_route_is_404_problem(api: Api) -> None:
    response = api.http.get("/api/v2/nothing-here")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM


def test_a_wrong_method_is_405_problem(api: Api) -> None:
    response = api.http.put("/api/v2/runs")
    assert response.status_code == 405
    assert response.headers["content-type"] == PROBLEM


def test_a_body_over_the_cap_is_413_by_its_length(api: Api) -> None:
    response = api.http.post("/api/v2/definitions", json={"source": HELLO + "#" * (MAX_BODY + 1)})
    assert response.status_code == 413
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "/problems/too-large"


def test_a_chunked_body_over_the_cap_is_413_too(api: Api) -> None:
    def chunks() -> object:
        for _ in range(5):
            yield b"x" * (MAX_BODY // 4)

    response = api.http.post(
        "/api/v2/definitions",
        content=chunks(),  # type: ignore[arg-type]
        headers={"content-type": "application/yaml"},
    )
    assert response.status_code == 413


def test_a_body_that_is_not_json_is_422_problem(api: Api) -> None:
    response = api.http.post(
        "/api/v2/definitions/hello/runs",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["errors"]


def test_unknown_fields_in_a_request_body_are_refused(api: Api) -> None:
    api.apply(HELLO)
    response = api.http.post("/api/v2/definitions/hello/runs", json={"bogus": 1})
    assert response.status_code == 422
    fields = [e["field"] for e in response.json()["errors"]]
    assert fields == ["body.bogus"]

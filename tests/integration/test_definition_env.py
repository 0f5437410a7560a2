"""``env:`` over HTTP: a secret is applied and read back as its reference, a reserved name is
refused with its field and line."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import Api

WITH_SECRET = """\
name: with_secret
env:
  PGPASSWORD: {secret: warehouse_password}
tasks:
  load: {run: "psql -c 'select 1'", env: {PGHOST: warehouse}}
"""
SECRET_VALUE = "api-side-secret-value"


def test_a_secret_is_stored_and_read_back_as_its_reference(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Even where the platform's process could resolve it, nothing on its side does.
    monkeypatch.setenv("VERITASK_SECRET_WAREHOUSE_PASSWORD", SECRET_VALUE)
    assert api.http.post("/api/v2/definitions", json={"source": WITH_SECRET}).status_code == 201

    shown = api.http.get("/api/v2/definitions/with_secret")

    assert shown.status_code == 200
    assert "{secret: warehouse_password}" in shown.json()["source"]
    run_id = api.trigger("with_secret")
    answers = [shown.text, api.http.get(f"/api/v2/runs/{run_id}").text]
    answers.append(api.http.get("/api/v2/definitions").text)
    assert all(SECRET_VALUE not in answer for answer in answers)


def test_a_reserved_name_in_env_is_refused_with_its_field_and_line(api: Api) -> None:
    source = WITH_SECRET.replace("PGHOST", "VERITASK_DATABASE_URL")

    response = api.http.post("/api/v2/definitions", json={"source": source})

    assert response.status_code == 422
    assert json.loads(response.text)["errors"] == [
        {
            "field": "tasks.load.env.VERITASK_DATABASE_URL",
            "line": 5,
            "message": "'VERITASK_DATABASE_URL' is reserved: the VERITASK_* variables belong "
            "to the platform",
        }
    ]

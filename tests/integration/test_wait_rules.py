"""An end to every wait (docs/definitions.md, "wait_for"): only a PUBLISHED run releases a
``wait_for``, so both ends of one must keep a publish section, and a run still waiting past its
expected finish raises a ``dependency`` alert naming what it waits for (SQLite, PostgreSQL)."""

from __future__ import annotations

from tests.integration.conftest import Api

UPSTREAM_UNPUBLISHED = """\
name: upstream
tasks:
  load: {run: "true"}
"""
UPSTREAM_PUBLISHED = """\
name: upstream
tasks:
  load: {run: "true"}
publish:
  commit: {run: "true"}
"""
DOWNSTREAM = """\
name: downstream
wait_for:
  - definition: upstream
tasks:
  report: {run: "true"}
"""


def _refusal(api: Api, source: str) -> list[dict[str, object]]:
    response = api.http.post("/api/v2/definitions", json={"source": source})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    errors: list[dict[str, object]] = response.json()["errors"]
    return errors


def test_waiting_for_a_definition_without_publish_is_refused_at_apply(api: Api) -> None:
    api.apply(UPSTREAM_UNPUBLISHED)

    errors = _refusal(api, DOWNSTREAM)

    assert errors == [
        {
            "field": "wait_for[0].definition",
            "line": 3,
            "message": "'upstream' has no publish section: its runs are never PUBLISHED, "
            "so this wait would never end",
        }
    ]
    assert api.http.get("/api/v2/definitions/downstream").status_code == 404


def test_a_waited_for_definition_may_not_drop_its_publish_section(api: Api) -> None:
    api.apply(DOWNSTREAM)  # the upstream is not applied yet: it is checked when it is
    refused = _refusal(api, UPSTREAM_UNPUBLISHED)
    assert refused == [
        {
            "field": "publish",
            "line": None,
            "message": "'downstream' wait for this definition's runs to be PUBLISHED "
            "(wait_for): keep a publish section, or remove their wait_for first",
        }
    ]

    api.apply(UPSTREAM_PUBLISHED)
    assert _refusal(api, UPSTREAM_UNPUBLISHED)[0]["field"] == "publish"
    detail = api.http.get("/api/v2/definitions/upstream").json()
    assert detail["current_version"] == 1, detail

"""Bearer tokens with roles: viewer reads, operator acts on runs, admin changes definitions and
tokens. Callbacks accept attempt tokens only."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.integration.conftest import HELLO, Api
from veritask.services.tokens import TokenRole

MALFORMED = b'{"not json'


def _guarded_operations(api: Api) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path with invented ids, operation) for every /api/ route that needs a token."""
    document = api.client(None).get("/openapi.json").json()
    found = []
    for template, item in document["paths"].items():
        for method, operation in item.items():
            if template.startswith("/api/") and operation.get("security"):
                path = re.sub(r"\{(\w+)\}", lambda m: _invented(m.group(1)), template)
                found.append((method.upper(), path, operation))
    assert len(found) > 20, found
    return found


def _invented(name: str) -> str:
    return "99999999" if name.endswith("alert_id") else f"no-such-{name}"


def _send(client: httpx.Client, method: str, path: str) -> httpx.Response:
    if method == "GET":
        return client.get(path)
    headers = {"Content-Type": "application/json"}
    return client.request(method, path, content=MALFORMED, headers=headers)


def test_every_guarded_route_checks_the_token_before_the_body_or_any_lookup(api: Api) -> None:
    for token in (None, "garbage", "vt_garbage"):
        client = api.client(token)
        for method, path, _ in _guarded_operations(api):
            response = _send(client, method, path)
            assert response.status_code == 401, (token, method, path, response.text)
            assert response.headers["www-authenticate"] == "Bearer"


def test_a_viewer_on_a_mutating_route_is_403_before_the_body_or_any_lookup(api: Api) -> None:
    viewer = api.client_with_role(TokenRole.VIEWER)
    mutating = [
        (method, path)
        for method, path, operation in _guarded_operations(api)
        if method != "GET" and not path.startswith("/api/v2/callbacks/")
    ]
    assert len(mutating) >= 10
    for method, path in mutating:
        response = _send(viewer, method, path)
        assert response.status_code == 403, (method, path, response.text)
        assert response.json()["type"] == "/problems/forbidden"


def test_no_token_is_401_with_a_bearer_challenge(api: Api) -> None:
    response = api.client(None).get("/api/v2/runs")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["type"] == "/problems/unauthenticated"


def test_an_unknown_token_is_401(api: Api) -> None:
    assert api.client("vt_not-a-token").get("/api/v2/definitions").status_code == 401
    assert api.client("garbage").get("/api/v1/runs").status_code == 401


def test_a_viewer_reads_but_cannot_act(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    viewer = api.client_with_role(TokenRole.VIEWER)
    assert viewer.get(f"/api/v2/runs/{run_id}").status_code == 200
    assert viewer.get("/api/v1/definitions").status_code == 200
    cancel = viewer.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "no"})
    assert cancel.status_code == 403
    assert cancel.json()["type"] == "/problems/forbidden"
    assert viewer.post("/api/v2/definitions/hello/runs", json={}).status_code == 403
    assert viewer.post("/api/v2/definitions", json={"source": HELLO}).status_code == 403
    # Refused requests changed nothing.
    assert api.run(run_id)["execution_state"] == "RUNNING"


def test_an_operator_triggers_and_cancels_but_cannot_apply_or_mint_tokens(api: Api) -> None:
    api.apply(HELLO)
    operator = api.client_with_role(TokenRole.OPERATOR)
    triggered = operator.post("/api/v2/definitions/hello/runs", json={"trigger_kind": "manual"})
    assert triggered.status_code == 202
    run_id = triggered.json()["run_id"]
    assert operator.post(f"/api/v2/runs/{run_id}/cancel", json={}).status_code == 202
    assert operator.post("/api/v2/definitions", json={"source": HELLO}).status_code == 403
    assert operator.delete("/api/v2/definitions/hello").status_code == 403
    assert operator.post("/api/v2/tokens", json={"role": "viewer"}).status_code == 403
    # The manual trigger and the cancel name the operator as their actor.
    events = api.http.get(f"/api/v2/runs/{run_id}/events").json()["events"]
    actors = {e["kind"]: e["actor"] for e in events}
    assert actors["run_created"] == "operator:operator-user"
    assert actors["run_state_changed"] == "operator:operator-user"


def test_an_admin_creates_tokens_that_work_once_shown(api: Api) -> None:
    response = api.http.post("/api/v2/tokens", json={"role": "viewer", "name": "dashboards"})
    assert response.status_code == 201
    created = response.json()
    assert created["role"] == "viewer"
    assert created["name"] == "dashboards"
    assert created["token"].startswith("vt_")
    assert api.client(created["token"]).get("/api/v2/runs").status_code == 200


def test_an_api_token_is_not_an_attempt_token(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    response = api.http.post(
        "/api/v2/callbacks/commit",
        json={"instance_id": instance_id, "attempt_no": 1, "marker": "m"},
    )
    assert response.status_code == 401  # it names no attempt


def test_a_token_request_with_a_bad_role_is_422(api: Api) -> None:
    response = api.http.post("/api/v2/tokens", json={"role": "superuser"})
    assert response.status_code == 422


def test_an_admin_lists_and_revokes_tokens_but_not_the_last_admin(api: Api) -> None:
    created = api.http.post("/api/v2/tokens", json={"role": "operator", "name": "ci"}).json()
    listed = api.http.get("/api/v2/tokens").json()["items"]
    by_id = {t["id"]: t for t in listed}
    assert by_id[created["id"]] == {
        "id": created["id"],
        "name": "ci",
        "role": "operator",
        "created_at": created["created_at"],
        "revoked_at": None,
    }
    assert all("token" not in t and "token_hash" not in t for t in listed)
    client = api.client(created["token"])
    assert client.get("/api/v2/runs").status_code == 200
    revoked = api.http.post(f"/api/v2/tokens/{created['id']}/revoke")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    refused = client.get("/api/v2/runs")
    assert refused.status_code == 401
    assert "revoked" in refused.json()["detail"]
    again = api.http.post(f"/api/v2/tokens/{created['id']}/revoke").json()
    assert again["revoked_at"] == revoked.json()["revoked_at"]  # revoking twice changes nothing
    assert api.http.post("/api/v2/tokens/nope/revoke").status_code == 404
    admins = [t for t in listed if t["role"] == "admin" and t["revoked_at"] is None]
    assert len(admins) == 1
    last = api.http.post(f"/api/v2/tokens/{admins[0]['id']}/revoke")
    assert last.status_code == 409
    assert "last working admin" in last.json()["detail"]
    assert api.http.get("/api/v2/runs").status_code == 200


def test_only_admins_list_or_revoke_tokens(api: Api) -> None:
    operator = api.client_with_role(TokenRole.OPERATOR)
    assert operator.get("/api/v2/tokens").status_code == 403
    [mine] = [t for t in api.http.get("/api/v2/tokens").json()["items"] if t["role"] == "operator"]
    assert operator.post(f"/api/v2/tokens/{mine['id']}/revoke").status_code == 403

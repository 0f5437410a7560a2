"""``/api/v2/pools`` and the pool verbs of the CLI, over HTTP against a real database."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import Api, new_id, now
from veritask.cli import main
from veritask.core import admission, new_events
from veritask.core.events import OpenReason
from veritask.ledger import pools
from veritask.services.tokens import TokenRole

WAREHOUSE = """\
name: loads
tasks:
  load: {run: "true", pool: warehouse}
"""


def test_a_pool_is_created_resized_listed_and_deleted(api: Api) -> None:
    created = api.http.put("/api/v2/pools/warehouse", json={"slots": 3})
    assert created.status_code == 201, created.text
    assert created.json() | {"updated_at": None} == {
        "name": "warehouse",
        "slots": 3,
        "used": 0,
        "waiting": 0,
        "actor": "operator:admin",
        "updated_at": None,
    }
    resized = api.http.put("/api/v2/pools/warehouse", json={"slots": 5})
    assert resized.status_code == 200 and resized.json()["slots"] == 5
    listed = api.http.get("/api/v2/pools").json()["items"]
    assert [(p["name"], p["slots"]) for p in listed] == [("default", None), ("warehouse", 5)]
    assert api.http.get("/api/v2/pools/warehouse").json()["slots"] == 5
    assert api.http.delete("/api/v2/pools/warehouse").status_code == 204
    gone = api.http.get("/api/v2/pools/warehouse")
    assert gone.status_code == 404
    assert gone.headers["content-type"].startswith("application/problem+json")
    assert api.http.delete("/api/v2/pools/warehouse").status_code == 404


@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("warehouse", {"slots": -1}, "body.slots"),
        ("warehouse", {"slots": "many"}, "body.slots"),
        ("warehouse", {}, "body.slots"),
        ("Ware House", {"slots": 1}, "name"),
    ],
)
def test_a_bad_pool_is_refused_naming_the_field(
    api: Api, name: str, body: dict[str, object], field: str
) -> None:
    response = api.http.put(f"/api/v2/pools/{name}", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert [e["field"] for e in response.json()["errors"]] == [field]


@pytest.mark.parametrize("role", [TokenRole.VIEWER, TokenRole.OPERATOR])
def test_only_an_admin_sets_or_deletes_a_pool(api: Api, role: TokenRole) -> None:
    api.http.put("/api/v2/pools/warehouse", json={"slots": 1})
    client = api.client_with_role(role)
    assert client.put("/api/v2/pools/warehouse", json={"slots": 9}).status_code == 403
    assert client.delete("/api/v2/pools/warehouse").status_code == 403
    assert client.get("/api/v2/pools").status_code == 200
    assert api.http.get("/api/v2/pools/warehouse").json()["slots"] == 1


def test_a_waiting_instance_says_which_pool_it_waits_for(api: Api) -> None:
    api.http.put("/api/v2/pools/warehouse", json={"slots": 0})
    api.apply(WAREHOUSE)
    run_id = api.trigger("loads")
    instance_id = api.instance_ids(run_id)["load"]
    _try_to_open(api, run_id, instance_id)

    reason = (
        "waiting for pool warehouse (0 of 0 slots used; 1 wanted, after tasks ranked before it)"
    )
    [instance] = api.run(run_id)["instances"]
    assert (instance["state"], instance["reason"]) == ("CREATED", reason)
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["reason"] == reason
    assert api.http.get("/api/v2/pools/warehouse").json()["waiting"] == 1
    api.http.delete("/api/v2/pools/warehouse")
    [instance] = api.run(run_id)["instances"]
    assert instance["reason"] == (
        "waiting for pool warehouse, which is not defined (veritask pool set warehouse --slots N)"
    )


def _try_to_open(api: Api, run_id: str, instance_id: str) -> None:
    """What the scheduler does for an instance that may run: ask its pool to open it."""
    event = new_events.attempt_opened(
        event_id=new_id(),
        instance_id=instance_id,
        attempt_no=1,
        event_time=now(),
        token_hash="hash",
        reason=OpenReason.FIRST,
        retry_index=0,
        resubmit_index=0,
    )
    claim = admission.Claim(instance_id, "warehouse", 1, 0, None, now())
    [verdict] = api.platform.ledger.open_attempts(
        [(event, pools.Wanted(claim, run_id, "load"))], aging=None
    )
    assert isinstance(verdict, admission.Verdict) and not verdict.admitted


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:
    monkeypatch.setenv("VERITASK_URL", api.url)
    monkeypatch.setenv("VERITASK_TOKEN", api.admin_token)
    return api


def test_the_pool_verbs(cli: Api, capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["pool", "set", "warehouse", "--slots", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["slots"] == 3
    assert main.main(["pool", "set", "warehouse", "--slots", "4"]) == 0
    assert capsys.readouterr().out.split() == ["warehouse", "4", "0", "0"]
    assert main.main(["pools", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert [(p["name"], p["slots"], p["used"]) for p in items] == [
        ("default", None, 0),
        ("warehouse", 4, 0),
    ]
    assert main.main(["pools"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "SLOTS", "USED", "WAITING"]
    assert lines[1].split() == ["default", "unlimited", "0", "0"]
    assert main.main(["pool", "delete", "warehouse"]) == 0
    assert capsys.readouterr().out.strip() == "warehouse: deleted"
    assert main.main(["pool", "delete", "warehouse"]) == 3
    assert main.main(["pool", "set", "Bad Name", "--slots", "1"]) == 2
    assert main.main(["pool", "set", "warehouse", "--slots", "-1"]) == 2


def test_the_pool_verbs_refuse_a_viewer(
    cli: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    viewer = cli.client_with_role(TokenRole.VIEWER)
    monkeypatch.setenv("VERITASK_TOKEN", str(viewer.headers["Authorization"]).split()[1])
    assert main.main(["pool", "set", "warehouse", "--slots", "1"]) == 4
    assert main.main(["pools"]) == 0

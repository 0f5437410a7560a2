"""``explain`` over HTTP and the CLI, on SQLite and PostgreSQL: what was known at an instant
beside what is known now for it, the event and rule behind each state, the events refused by
then, and what changed afterwards (a late success, an override)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.integration.conftest import (
    Api,
    completed,
    hello_attempt,
    now,
    report,
    started,
)
from tests.integration.test_overrides import _failed_run
from veritask.cli import main as cli_main
from veritask.core import new_events
from veritask.core.events import Event
from veritask.core.judge import Outcome
from veritask.core.states import InstanceState


def _lost_then_late_success(api: Api) -> tuple[str, str, datetime, str]:
    """A worker starts, goes silent and is called LOST; it succeeds before ``as_of`` but its
    report is recorded only after it. Before ``as_of`` a second lease expiry was refused.
    (instance, run, as_of, the late event's id)."""
    instance_id, attempt_no, token = hello_attempt(api)
    assert report(api, started(instance_id, attempt_no, token), token).status_code == 200
    silent_since = now()

    def lease_expired() -> Event:
        return new_events.lease_expired(
            event_id=str(uuid.uuid4()),
            instance_id=instance_id,
            attempt_no=attempt_no,
            event_time=now(),
            last_report_seq=1,
            lease_expires_at=silent_since,
            last_report_at=silent_since,
            lease_seconds=60.0,
        )

    assert api.platform.ledger.apply(lease_expired()).state is InstanceState.LOST
    # A second monitor decides on a state it did not see: refused, kept with its reason.
    assert api.platform.ledger.apply(lease_expired()).outcome is Outcome.REJECTED
    success = completed(instance_id, attempt_no, token, seq=2)  # its event_time: now
    as_of = now()
    assert report(api, success, token).status_code == 200  # recorded after as_of
    run_id = str(api.http.get(f"/api/v2/instances/{instance_id}").json()["run_id"])
    return instance_id, run_id, as_of, str(success["event_id"])


def _explain(api: Api, path: str, **params: str) -> dict[str, Any]:
    response = api.http.get(f"/api/v2/{path}/explain", params=params)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def test_a_lost_worker_whose_success_arrived_late_is_lost_then_and_success_now(
    api: Api,
) -> None:
    instance_id, run_id, as_of, late_id = _lost_then_late_success(api)

    told = _explain(api, f"instances/{instance_id}", as_of=as_of.isoformat())

    then, now_for_then = told["known_then"], told["known_now"]
    assert then["state"] == "LOST"
    assert (then["made_by"]["kind"], then["made_by"]["actor"]) == ("lease_expired", "monitor")
    assert then["made_by"]["rule"] == "lease_expires"
    assert then["made_by"]["late"] is False
    assert now_for_then["state"] == "SUCCESS"
    made = now_for_then["made_by"]
    assert (made["event_id"], made["kind"], made["late"]) == (late_id, "completed", True)
    assert made["rule"] == "completion_decides"
    assert made["evidence"]["exit_code"] == 0
    assert datetime.fromisoformat(made["event_time"]) <= as_of
    assert datetime.fromisoformat(made["observed_at"]) > as_of
    assert [c["event_id"] for c in told["late"]] == [late_id]
    [change] = told["afterwards"]
    assert (change["kind"], change["from_state"], change["to_state"]) == (
        "late_evidence",
        "LOST",
        "SUCCESS",
    )
    assert change["cause"]["event_id"] == late_id
    [refused] = told["refused"]
    assert (refused["kind"], refused["actor"]) == ("lease_expired", "monitor")
    assert refused["rule"] == "illegal_lease"
    assert told["state_now"] == "SUCCESS"

    # One column on the asked axis; the present is the same in both.
    observed = _explain(api, f"instances/{instance_id}", as_of=as_of.isoformat(), axis="observed")
    assert observed["known_now"] is None and observed["known_then"]["state"] == "LOST"
    present = _explain(api, f"instances/{instance_id}")
    assert present["known_then"]["state"] == present["known_now"]["state"] == "SUCCESS"
    assert present["late"] == [] and present["afterwards"] == []

    # The run's answer covers its instance and its states.
    whole = _explain(api, f"runs/{run_id}", as_of=as_of.isoformat())
    [instance] = whole["instances"]
    assert instance["id"] == instance_id
    assert (instance["known_then"]["state"], instance["known_now"]["state"]) == ("LOST", "SUCCESS")
    assert whole["known_then"]["execution_state"] == "RUNNING"
    assert whole["known_then"]["publication_state"] == "NOT_REQUIRED"
    assert whole["known_then"]["execution_made_by"]["kind"] == "run_created"


def test_an_override_after_the_instant_shows_its_operator_and_reason(api: Api) -> None:
    run_id, instance_id = _failed_run(api)
    as_of = now()
    response = api.http.post(
        f"/api/v2/instances/{instance_id}/override",
        json={"state": "SUCCESS", "reason": "checked the table by hand", "scope": "instance"},
    )
    assert response.status_code == 200, response.text

    told = _explain(api, f"instances/{instance_id}", as_of=as_of.isoformat())

    assert told["known_then"]["state"] == told["known_now"]["state"] == "FAILED"
    assert told["known_then"]["made_by"]["rule"] == "completion_decides"
    [change] = told["afterwards"]
    assert (change["kind"], change["from_state"], change["to_state"]) == (
        "override",
        "FAILED",
        "SUCCESS",
    )
    assert change["operator"].startswith("operator:")
    assert change["why"] == "checked the table by hand"
    assert change["cause"]["rule"] == "operator_override"
    run = _explain(api, f"runs/{run_id}", as_of=as_of.isoformat())
    assert run["known_then"]["execution_state"] == "FAILED"
    assert run["execution_state_now"] == "SUCCESS"
    assert [c["to_state"] for c in run["afterwards"]] == ["SUCCESS"]


def test_a_bad_as_of_or_axis_is_a_problem_naming_it(api: Api) -> None:
    _, run_id = _failed_run(api)
    for path in (f"runs/{run_id}", "instances/nope"):
        response = api.http.get(f"/api/v2/{path}/explain", params={"as_of": "yesterday-ish"})
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        assert [e["field"] for e in problem["errors"]] == ["as_of"]
        assert "yesterday-ish" in problem["detail"]
    response = api.http.get(f"/api/v2/runs/{run_id}/explain", params={"axis": "sideways"})
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["query.axis"]
    assert api.http.get("/api/v2/runs/nope/explain").status_code == 404
    assert api.http.get("/api/v2/instances/nope/explain").status_code == 404


#: ``veritask explain ARGS…``: its exit code, stdout and stderr.
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    monkeypatch.setenv("VERITASK_URL", api.url)
    monkeypatch.setenv("VERITASK_TOKEN", api.admin_token)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli_main.main(["explain", *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_the_cli_prints_both_columns_and_the_apis_json(api: Api, cli: Cli) -> None:
    instance_id, run_id, as_of, late_id = _lost_then_late_success(api)
    # The CLI's usual form: ISO 8601 without an offset is UTC.
    written = as_of.replace(tzinfo=None).isoformat()

    code, out, err = cli(instance_id, "--as-of", written, "--json")

    assert code == 0, err
    shown = json.loads(out)
    assert shown["object"] == "instance"
    assert set(shown) >= {"id", "as_of", "axis", "known_then", "known_now", "state_now"}
    assert shown["axis"] == "both"
    assert (shown["known_then"]["state"], shown["known_now"]["state"]) == ("LOST", "SUCCESS")
    assert shown["known_now"]["made_by"]["late"] is True

    code, out, err = cli(run_id, "--as-of", written, "--axis", "event", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["object"], shown["axis"], shown["known_then"]) == ("run", "event", None)
    assert shown["instances"][0]["known_now"]["state"] == "SUCCESS"

    code, out, err = cli(instance_id, "--as-of", written)
    assert code == 0, err
    assert "LOST" in out and "SUCCESS" in out and "late" in out and late_id in out
    assert "illegal_lease" in out

    assert cli(instance_id, "--as-of", "soon")[0] == 2
    assert cli("nope")[0] == 3
    later = (as_of + timedelta(days=1)).isoformat()
    assert cli(run_id, "--as-of", later)[0] == 0

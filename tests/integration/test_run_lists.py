"""``GET /api/v2/runs``: every filter, the text search, keyset pages and refused values, over
HTTP on SQLite and PostgreSQL.

The runs are written straight into the ledger (as the scheduler writes them) so that their
trigger kinds, states, logical and creation times differ in known ways; each test asks for a
subset that no other filter would give, so a filter that is ignored makes its test fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.conftest import HELLO, PIPELINE, Api
from veritask.core.jsontypes import JSONObject
from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.ledger import queries
from veritask.ledger import runs as ledger_runs
from veritask.services.platform import Platform

T0 = datetime(2024, 3, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Seeded:
    scheduled: str  # hello, schedule, logical Jan 1, SUCCESS, created T0+1h
    backfilled: str  # hello, backfill, logical Jan 2, FAILED, created T0+2h
    manual: str  # pipeline, manual, no logical time, RUNNING, PENDING, created T0+3h
    api_run: str  # pipeline, api, logical Jan 3, SUCCESS, PUBLISHED, created T0+4h


def _run(
    platform: Platform,
    definition: str,
    *,
    key: str,
    kind: TriggerKind,
    execution: RunExecutionState,
    publication: PublicationState,
    created_at: datetime,
    logical_time: datetime | None = None,
    parameters: JSONObject | None = None,
) -> str:
    with platform.engine.begin() as connection:
        found = queries.get_definition(connection, name=definition)
        assert found is not None and found.current_version is not None
        run_id, created = ledger_runs.create_run(
            connection,
            idempotency_key=key,
            definition_id=found.id,
            definition_version=found.current_version,
            trigger_kind=kind,
            execution_state=execution,
            publication_state=publication,
            created_at=created_at,
            logical_time=logical_time,
            parameters=parameters,
        )
    assert created
    return run_id


@pytest.fixture
def seeded(api: Api) -> Seeded:
    api.apply(HELLO)
    api.apply(PIPELINE)
    return Seeded(
        scheduled=_run(
            api.platform,
            "hello",
            key="hello:2024-01-01",
            kind=TriggerKind.SCHEDULE,
            execution=RunExecutionState.SUCCESS,
            publication=PublicationState.NOT_REQUIRED,
            created_at=T0 + timedelta(hours=1),
            logical_time=datetime(2024, 1, 1, tzinfo=UTC),
        ),
        backfilled=_run(
            api.platform,
            "hello",
            key="hello:2024-01-02",
            kind=TriggerKind.BACKFILL,
            execution=RunExecutionState.FAILED,
            publication=PublicationState.NOT_REQUIRED,
            created_at=T0 + timedelta(hours=2),
            logical_time=datetime(2024, 1, 2, tzinfo=UTC),
        ),
        manual=_run(
            api.platform,
            "pipeline",
            key="Nightly-Orders",
            kind=TriggerKind.MANUAL,
            execution=RunExecutionState.RUNNING,
            publication=PublicationState.PENDING,
            created_at=T0 + timedelta(hours=3),
            parameters={"table": "orders_100%"},
        ),
        api_run=_run(
            api.platform,
            "pipeline",
            key="pipeline:2024-01-03",
            kind=TriggerKind.API,
            execution=RunExecutionState.SUCCESS,
            publication=PublicationState.PUBLISHED,
            created_at=T0 + timedelta(hours=4),
            logical_time=datetime(2024, 1, 3, tzinfo=UTC),
            parameters={"table": "users"},
        ),
    )


def _listed(api: Api, params: Any) -> list[str]:
    response = api.http.get("/api/v2/runs", params=params)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def test_without_filters_every_run_is_listed_newest_first(api: Api, seeded: Seeded) -> None:
    assert _listed(api, {}) == [seeded.api_run, seeded.manual, seeded.backfilled, seeded.scheduled]


def test_definition_and_the_older_state_parameter_still_work(api: Api, seeded: Seeded) -> None:
    assert _listed(api, {"definition": "hello"}) == [seeded.backfilled, seeded.scheduled]
    assert _listed(api, {"definition": "hello", "state": "FAILED"}) == [seeded.backfilled]
    assert api.http.get("/api/v2/runs", params={"definition": "nope"}).status_code == 404


def test_execution_state_keeps_any_of_the_states_given(api: Api, seeded: Seeded) -> None:
    assert _listed(api, {"execution_state": "SUCCESS"}) == [seeded.api_run, seeded.scheduled]
    both = [("execution_state", "FAILED"), ("execution_state", "RUNNING")]
    assert _listed(api, both) == [seeded.manual, seeded.backfilled]


def test_publication_state(api: Api, seeded: Seeded) -> None:
    assert _listed(api, {"publication_state": "PUBLISHED"}) == [seeded.api_run]
    assert _listed(api, {"publication_state": "PENDING"}) == [seeded.manual]


def test_trigger_kind(api: Api, seeded: Seeded) -> None:
    assert _listed(api, {"trigger_kind": "backfill"}) == [seeded.backfilled]
    kinds = [("trigger_kind", "schedule"), ("trigger_kind", "manual")]
    assert _listed(api, kinds) == [seeded.manual, seeded.scheduled]


def test_the_logical_time_range_is_half_open(api: Api, seeded: Seeded) -> None:
    window = {"logical_from": "2024-01-02T00:00:00Z", "logical_to": "2024-01-03T00:00:00Z"}
    assert _listed(api, window) == [seeded.backfilled]
    assert _listed(api, {"logical_from": "2024-01-02T00:00:00+00:00"}) == [
        seeded.api_run,
        seeded.backfilled,
    ]
    # A run without a logical time is outside every logical range.
    assert _listed(api, {"logical_to": "2024-01-02T00:00:00Z"}) == [seeded.scheduled]


def test_the_created_time_range_is_half_open(api: Api, seeded: Seeded) -> None:
    two, four = T0 + timedelta(hours=2), T0 + timedelta(hours=4)
    window = {"created_from": two.isoformat(), "created_to": four.isoformat()}
    assert _listed(api, window) == [seeded.manual, seeded.backfilled]
    # Another zone's offset names the same moment; without an offset it is UTC.
    shanghai = (T0 + timedelta(hours=11)).strftime("%Y-%m-%dT%H:%M:%S") + "+08:00"
    assert _listed(api, {"created_from": shanghai}) == [seeded.api_run, seeded.manual]
    naive = (T0 + timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%S")
    assert _listed(api, {"created_from": naive}) == [seeded.api_run]


def test_q_searches_the_id_the_key_and_the_parameters_in_any_case(api: Api, seeded: Seeded) -> None:
    assert _listed(api, {"q": "nightly-ORDERS"}) == [seeded.manual]
    assert _listed(api, {"q": "USERS"}) == [seeded.api_run]
    assert _listed(api, {"q": seeded.backfilled[-12:]}) == [seeded.backfilled]
    # LIKE's wildcards are searched as themselves.
    assert _listed(api, {"q": "100%"}) == [seeded.manual]
    assert _listed(api, {"q": "_2024"}) == []
    assert _listed(api, {"q": "no such thing"}) == []


def test_q_name_equals_value_finds_the_runs_whose_parameter_has_that_value(
    api: Api, seeded: Seeded
) -> None:
    assert _listed(api, {"q": "table=users"}) == [seeded.api_run]
    assert _listed(api, {"q": "table=Orders_100%"}) == [seeded.manual]  # the value in any case
    assert _listed(api, {"q": " table = users "}) == [seeded.api_run]
    assert _listed(api, {"q": "table=user"}) == []  # the whole value, not a part
    assert _listed(api, {"q": "region=users"}) == []
    for odd in ('a"b=1', "a'b=1", "$.x=1", "[0]=1", "a\\b=1", "=users", "table="):
        assert _listed(api, {"q": odd}) == [], odd  # never an error


def test_filters_combine(api: Api, seeded: Seeded) -> None:
    params = {"definition": "pipeline", "execution_state": "SUCCESS", "q": "users"}
    assert _listed(api, params) == [seeded.api_run]
    params = {"definition": "hello", "trigger_kind": "api"}
    assert _listed(api, params) == []


def test_cursor_pages_keep_the_filters_and_never_repeat_a_run(api: Api, seeded: Seeded) -> None:
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        # "o" is in the keys of three runs: hello:…, hello:…, Nightly-Orders.
        params: dict[str, Any] = {"limit": 1, "q": "o"}
        if cursor:
            params["cursor"] = cursor
        body = api.http.get("/api/v2/runs", params=params).json()
        seen += [item["id"] for item in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == _listed(api, {"q": "o"})
    assert seen == [seeded.manual, seeded.backfilled, seeded.scheduled]
    assert pages == 3


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"execution_state": "DONE"}, "query.execution_state"),
        ({"state": "done"}, "query.state"),
        ({"publication_state": "SHIPPED"}, "query.publication_state"),
        ({"trigger_kind": "cron"}, "query.trigger_kind"),
        ({"logical_from": "yesterday"}, "query.logical_from"),
        ({"created_to": "2024-13-01T00:00:00Z"}, "query.created_to"),
        ({"q": ""}, "query.q"),
        ({"q": "x" * 201}, "query.q"),
        ({"limit": 0}, "query.limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        (
            {"logical_from": "2024-01-02T00:00:00Z", "logical_to": "2024-01-02T00:00:00Z"},
            "logical_to",
        ),
        (
            {"created_from": "2024-01-02T00:00:00Z", "created_to": "2024-01-01T00:00:00Z"},
            "created_to",
        ),
        ({"created_from": "0001-01-01T00:00:00+01:00"}, "created_from"),
    ],
)
def test_a_bad_value_is_a_422_naming_its_parameter(
    api: Api, params: dict[str, Any], field: str
) -> None:
    response = api.http.get("/api/v2/runs", params=params)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    # A repeatable parameter is named with the position of the bad value: query.state.0.
    named = [problem["field"].removesuffix(".0") for problem in response.json()["errors"]]
    assert field in named, named

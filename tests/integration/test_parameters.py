"""Parameters, tags, nesting and unreadable bodies over HTTP: each refusal a problem that
names the field at fault, never a 500."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.integration.conftest import Api
from veritask.services import errors, runs
from veritask.services.tokens import TokenRole

TYPED = """\
name: typed
parameters:
  rows: {type: integer, default: 10}
  mode: {enum: [full, delta], default: delta}
  day: {type: date, default: "2024-01-31"}
tasks:
  work: {run: "echo {{ params.rows }} {{ params.mode }} {{ ds }}"}
"""


def fields(response_json: dict[str, object]) -> list[object]:
    found = response_json.get("errors")
    assert isinstance(found, list)
    return [e["field"] for e in found]


def test_a_value_of_the_wrong_type_or_outside_the_enum_is_422_naming_it(api: Api) -> None:
    api.apply(TYPED)
    operator = api.client_with_role(TokenRole.OPERATOR)
    refused = operator.post(
        "/api/v2/definitions/typed/runs",
        json={"parameters": {"rows": "many", "mode": "weekly", "table": "users; id"}},
    )
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    body = refused.json()
    assert fields(body) == ["parameters.rows", "parameters.mode", "parameters.table"]
    assert "parameters.rows: expected a whole number, got the string 'many'" in body["detail"]
    assert api.http.get("/api/v2/runs", params={"definition": "typed"}).json()["items"] == []


def test_values_are_stored_as_their_type_holds_them(api: Api) -> None:
    api.apply(TYPED)
    run_id = api.trigger("typed", parameters={"rows": "12", "mode": "full"})
    # The run records what it runs with: the default of ``day`` too.
    assert api.run(run_id)["parameters"] == {"rows": 12, "mode": "full", "day": "2024-01-31"}


def test_the_service_refuses_with_the_same_field_problems(api: Api) -> None:
    api.apply(TYPED)
    with pytest.raises(errors.InvalidInput) as refused:
        runs.trigger_run(api.platform, "typed", actor="test", parameters={"day": "yesterday"})
    assert [(p.field, p.message) for p in refused.value.problems] == [
        ("parameters.day", "expected a date (YYYY-MM-DD), got the string 'yesterday'")
    ]


def test_a_raw_parameter_must_be_declared_and_only_an_admin_applies_it(api: Api) -> None:
    source = (
        "name: rawish\nparameters: {cmd: {type: string, raw: true, default: 'true'}}\n"
        "tasks:\n  work: {run: '{{ params.cmd }}'}\n"
    )
    operator = api.client_with_role(TokenRole.OPERATOR)
    assert operator.post("/api/v2/definitions", json={"source": source}).status_code == 403
    assert api.http.post("/api/v2/definitions", json={"source": source}).status_code == 201


def test_a_placeholder_inside_quotes_is_refused_at_apply_with_field_and_line(api: Api) -> None:
    source = (
        "name: quoted\nparameters: {t: users}\ntasks:\n  work:\n    run: echo '{{ params.t }}'\n"
    )
    refused = api.http.post("/api/v2/definitions", json={"source": source})
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "tasks.work.run"
    assert refused.json()["errors"][0]["line"] == 5


@pytest.mark.parametrize(
    "value",
    ["!!python/object/apply:os.system [echo pwned]", "!foo {a: 1}", "!!set {a, b}"],
)
def test_custom_tags_on_lists_and_maps_are_refused_naming_field_and_line(
    api: Api, value: str
) -> None:
    source = f"name: tags\ntasks:\n  work: {{run: 'true'}}\nparameters:\n  p: {value}\n"
    refused = api.http.post("/api/v2/definitions", json={"source": source})
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"] == [
        {
            "field": "parameters.p",
            "line": 5,
            "message": refused.json()["errors"][0]["message"],
        }
    ]
    assert "YAML tag" in refused.json()["errors"][0]["message"]


@pytest.mark.parametrize("as_json", [False, True])
def test_a_definition_nested_a_thousand_levels_deep_is_a_4xx_naming_the_depth(
    api: Api, as_json: bool
) -> None:
    if as_json:
        source = '{"name": "deep", "tasks": {"w": {"run": "true"}}, "parameters": '
        source += '{"a": ' * 1000 + "1" + "}" * 1001
    else:
        source = "name: deep\ntasks: {w: {run: 'true'}}\nparameters: " + "[" * 1000 + "]" * 1000
    refused = api.http.post("/api/v2/definitions", json={"source": source})
    assert refused.status_code == 422, refused.text
    assert "nested too deeply (over 64 levels" in refused.json()["errors"][0]["message"]


def test_invalid_utf8_in_an_applied_definition_is_400(api: Api) -> None:
    refused = api.http.post(
        "/api/v2/definitions",
        content=b"name: bad\xff\ntasks: {w: {run: 'true'}}\n",
        headers={"content-type": "application/yaml"},
    )
    assert refused.status_code == 400, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"] == "/problems/bad-request"
    assert refused.json()["errors"] == [
        {"field": "body", "line": None, "message": "must be UTF-8 text"}
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"parameters": {"rows": "\xff"}}', "must be UTF-8 text"),
        (b'{"parameters": {"rows": ' + b"[" * 20_000 + b"]" * 20_000 + b"}}", "nested"),
    ],
)
def test_a_trigger_body_that_cannot_be_read_is_400_naming_the_body(
    api: Api, body: bytes, message: str
) -> None:
    api.apply(TYPED)
    refused = api.http.post(
        "/api/v2/definitions/typed/runs",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["errors"][0]["field"] == "body"
    assert message in refused.json()["errors"][0]["message"]


def test_trigger_parameters_that_are_not_an_object_are_named(api: Api) -> None:
    api.apply(TYPED)
    refused = api.http.post("/api/v2/definitions/typed/runs", json={"parameters": [1]})
    assert refused.status_code == 422
    assert fields(refused.json()) == ["body.parameters"]


DATED = """\
name: dated
parameters: {table: users, rows: {type: integer, default: 10}}
tasks:
  say: {run: "echo date={{ logical_date }} table={{ params.table }}"}
"""


def test_a_manual_run_has_a_logical_time_and_records_its_effective_parameters(api: Api) -> None:
    # Two runs, the first still active (no scheduler here): they must be allowed to overlap.
    api.apply(DATED + "concurrency: allow\n")
    before = api.platform.now()
    run = api.run(api.trigger("dated", trigger_kind="manual", parameters={"rows": 3}))
    assert run["parameters"] == {"table": "users", "rows": 3}
    logical = datetime.fromisoformat(run["logical_time"].replace("Z", "+00:00"))
    assert before <= logical <= api.platform.now()
    given = api.run(api.trigger("dated", logical_time="2024-01-31T02:00:00+08:00"))
    assert given["logical_time"].startswith("2024-01-30T18:00:00")
    naive = api.http.post("/api/v2/definitions/dated/runs", json={"logical_time": "2024-01-31"})
    assert naive.status_code == 422
    assert fields(naive.json()) == ["body.logical_time"]


def test_the_same_key_with_other_parameters_is_409_naming_them(api: Api) -> None:
    api.apply(DATED)
    path = "/api/v2/definitions/dated/runs"
    first = api.http.post(path, json={"idempotency_key": "k", "parameters": {"rows": 3}})
    assert first.status_code == 202
    # The defaults are part of the run: giving them again is the same request.
    same = api.http.post(
        path, json={"idempotency_key": "k", "parameters": {"rows": 3, "table": "users"}}
    )
    assert same.status_code == 200
    assert same.json()["run_id"] == first.json()["run_id"]
    other = api.http.post(
        path, json={"idempotency_key": "k", "parameters": {"rows": 4, "table": "orders"}}
    )
    assert other.status_code == 409, other.text
    assert other.headers["content-type"] == "application/problem+json"
    detail = other.json()["detail"]
    assert "'k'" in detail and first.json()["run_id"] in detail
    assert "rows, table differ" in detail


UNDECLARED = """\
name: undeclared
tasks:
  work: {run: "echo hi"}
"""


@pytest.mark.parametrize("name", ["a=b", "a b", "", "1st", "a-b", "é" * 3, "a" * 129])
def test_a_parameter_name_no_task_could_receive_is_422_at_trigger(api: Api, name: str) -> None:
    """Even where any parameter is taken (none declared), the name must be one a task's
    environment and a placeholder can hold: a run never reaches a worker that cannot start."""
    api.apply(UNDECLARED)
    operator = api.client_with_role(TokenRole.OPERATOR)
    refused = operator.post(
        "/api/v2/definitions/undeclared/runs", json={"parameters": {name: 1, "fine": 2}}
    )
    assert refused.status_code == 422, refused.text
    assert fields(refused.json()) == [f"parameters.{name[:128]}"]
    assert "is not a parameter name" in refused.json()["detail"]
    assert api.http.get("/api/v2/runs", params={"definition": "undeclared"}).json()["items"] == []
    # Dotted names of letters, digits and '_' are taken, as ever.
    assert api.trigger("undeclared", parameters={"fine": 2, "a.b_c": 3})


def test_a_definition_declaring_such_a_parameter_is_refused_at_apply(api: Api) -> None:
    source = 'name: eq\nparameters: {"a=b": 1}\ntasks:\n  work: {run: "true"}\n'
    refused = api.http.post("/api/v2/definitions", json={"source": source})
    assert refused.status_code == 422, refused.text
    assert fields(refused.json()) == ["parameters.a=b"]

"""The pages over HTTP: sign-in, CSRF, roles, escaping, the editor, deletes, diffs, live."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from tests.contract.test_audit import _story
from tests.integration.conftest import completed, open_attempt, started
from tests.scheduling.publications import published_run
from tests.ui.conftest import Ui, api_intervals, csrf_of, drawn_intervals
from veritask import ids
from veritask.core import new_events
from veritask.core.policy import TaskPolicy
from veritask.services import definitions, pools, runs, tokens
from veritask.services.tokens import TokenRole
from veritask.ui.pages import runs as run_pages


def test_the_address_up_prints_leads_to_sign_in(ui: Ui) -> None:
    http = ui.client()
    first = http.get("/")
    assert first.status_code == 303
    assert http.get(first.headers["location"]).headers["location"] == "/ui/sign-in"
    page = http.get("/ui/sign-in")
    assert page.status_code == 200
    assert 'name="token"' in page.text


def test_pages_need_a_session(ui: Ui) -> None:
    answer = ui.client().get("/ui/definitions")
    assert answer.status_code == 303
    assert answer.headers["location"].startswith("/ui/sign-in?next=/ui/definitions")


def test_the_session_cookie_is_httponly_lax_and_signed(ui: Ui) -> None:
    http = ui.client()
    page = http.get("/ui/sign-in")
    answer = http.post(
        "/ui/sign-in",
        data={"csrf": csrf_of(page.text), "token": ui.tokens[TokenRole.VIEWER], "next": "/ui/"},
    )
    cookie = answer.headers["set-cookie"]
    assert "veritask_session=" in cookie
    assert "httponly" in cookie.lower()
    assert "samesite=lax" in cookie.lower()
    assert ui.tokens[TokenRole.VIEWER] not in cookie  # the token itself never leaves
    http.cookies.set("veritask_session", http.cookies["veritask_session"][:-3] + "AAA")
    assert http.get("/ui/definitions").status_code == 303  # a forged signature signs nobody


def test_a_wrong_token_is_refused_with_a_message(ui: Ui) -> None:
    http = ui.client()
    csrf = csrf_of(http.get("/ui/sign-in").text)
    answer = http.post("/ui/sign-in", data={"csrf": csrf, "token": "vt_nobody", "next": "/ui/"})
    assert answer.status_code == 401
    assert "unknown or revoked" in answer.text


def test_sign_in_without_the_csrf_token_is_refused(ui: Ui) -> None:
    http = ui.client()
    http.get("/ui/sign-in")
    answer = http.post("/ui/sign-in", data={"token": ui.tokens[TokenRole.ADMIN]})
    assert answer.status_code == 403
    assert "veritask_session" not in answer.headers.get("set-cookie", "")


def test_a_form_without_the_sessions_csrf_token_records_nothing(ui: Ui) -> None:
    admin = ui.signed_in(TokenRole.ADMIN)
    for csrf in ("", "not-the-token"):
        answer = admin.http.post("/ui/definitions/pipeline/trigger", data={"csrf": csrf})
        assert answer.status_code == 403
        assert "security token" in answer.text
    assert runs.list_runs(ui.platform, definition="pipeline").items == ()


def test_a_viewer_sees_no_actions_and_a_forged_post_is_refused(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get("/ui/definitions/pipeline").text
    assert "trigger-form" not in page
    assert "/disable" not in page
    answer = viewer.http.post(
        "/ui/definitions/pipeline/trigger", data={"csrf": viewer.csrf, "param.table": "x"}
    )
    assert answer.status_code == 403
    assert "operator" in answer.text
    assert runs.list_runs(ui.platform, definition="pipeline").items == ()
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    run_page = viewer.http.get(f"/ui/runs/{run_id}").text
    assert "cancel-run" not in run_page
    refused = viewer.http.post(
        f"/ui/runs/{run_id}/cancel", data={"csrf": viewer.csrf, "reason": "forged"}
    )
    assert refused.status_code == 403
    assert runs.get_run(ui.platform, run_id).run.execution_state != "CANCELLING"


def test_an_operator_triggers_with_parameters_and_a_key(ui: Ui) -> None:
    operator = ui.signed_in(TokenRole.OPERATOR)
    answer = operator.http.post(
        "/ui/definitions/pipeline/trigger",
        data={"csrf": operator.csrf, "param.table": "orders", "idempotency_key": "k-1"},
    )
    assert answer.status_code == 303
    run_id = answer.headers["location"].rsplit("/", 1)[1]
    run = runs.get_run(ui.platform, run_id).run
    assert run.parameters == {"table": "orders"}
    assert run.idempotency_key == "pipeline:k-1"  # keys are scoped to their definition
    assert run.trigger_kind == "manual"


def test_a_refusal_for_an_active_run_links_that_run(ui: Ui) -> None:
    active = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id  # forbids a second
    operator = ui.signed_in(TokenRole.OPERATOR)
    answer = operator.http.post("/ui/definitions/pipeline/trigger", data={"csrf": operator.csrf})
    assert answer.status_code == 409
    assert f'<a href="/ui/runs/{active}"><code>{active[-8:]}</code></a>' in answer.text
    assert len(runs.list_runs(ui.platform, definition="pipeline").items) == 1


def test_an_unknown_ui_address_is_an_html_404_page_and_the_apis_stays_json(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    for path in ("/ui/nope", "/ui/runs/x/nope", "/ui/static/nope.css"):
        answer = viewer.http.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["content-type"].startswith("text/html"), path
        assert "There is no such page." in answer.text
        assert answer.headers["x-frame-options"] == "DENY"
    viewer.http.cookies.set("veritask_lang", "zh")
    assert "没有这个页面。" in viewer.http.get("/ui/nope").text
    api = viewer.http.get("/api/v2/nope")
    assert api.status_code == 404
    assert api.headers["content-type"] == "application/problem+json"


def test_user_text_is_escaped_everywhere(ui: Ui) -> None:
    admin = ui.signed_in(TokenRole.ADMIN)
    run_id = runs.trigger_run(
        ui.platform, "pipeline", actor="test", parameters={"table": "<img src=x onerror=alert(2)>"}
    ).run_id
    for path in ("/ui/definitions", "/ui/definitions/pipeline", f"/ui/runs/{run_id}"):
        page = admin.http.get(path).text
        assert "<script>alert(1)</script>" not in page
        assert "<img src=x" not in page
        assert "<b>data</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in admin.http.get("/ui/definitions").text


def test_the_editor_shows_each_problem_at_its_line(ui: Ui) -> None:
    admin = ui.signed_in(TokenRole.ADMIN)
    source = "name: broken\ntasks:\n  a: {run: echo a}\n  b: {run: echo b, after: [missing]}\n"
    answer = admin.http.post("/ui/definitions/new", data={"csrf": admin.csrf, "source": source})
    assert answer.status_code == 422
    lines = re.findall(r'class="editor-error" data-line="(\d+)"', answer.text)
    assert lines == ["4"]
    assert 'class="flagged"' in answer.text
    assert "missing" in answer.text
    fixed = source.replace("[missing]", "[a]")
    saved = admin.http.post("/ui/definitions/new", data={"csrf": admin.csrf, "source": fixed})
    assert saved.status_code == 303
    assert saved.headers["location"] == "/ui/definitions/broken"


def test_an_operator_cannot_apply_definitions(ui: Ui) -> None:
    operator = ui.signed_in(TokenRole.OPERATOR)
    assert operator.http.get("/ui/definitions/new").status_code == 403
    answer = operator.http.post(
        "/ui/definitions/new", data={"csrf": operator.csrf, "source": "name: x\ntasks: {}\n"}
    )
    assert answer.status_code == 403


def test_two_versions_show_their_difference(ui: Ui) -> None:
    changed = definitions.get_definition(ui.platform, "pipeline").source or ""
    definitions.apply_definition(
        ui.platform, changed.replace('"echo load"', '"echo loaded"'), actor="test"
    )
    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get("/ui/definitions/pipeline?from=1&to=2").text
    assert '<span class="d-del">-  load: {run: &#34;echo load&#34;' in page
    assert '<span class="d-add">+  load: {run: &#34;echo loaded&#34;' in page


def test_delete_shows_what_will_happen_before_it_happens(ui: Ui) -> None:
    admin = ui.signed_in(TokenRole.ADMIN)
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    preview = admin.http.get("/ui/definitions/pipeline/delete")
    assert preview.status_code == 200
    assert run_id in preview.text
    assert definitions.get_definition(ui.platform, "pipeline").definition.lifecycle == "active"
    answer = admin.http.post(
        "/ui/definitions/pipeline/delete", data={"csrf": admin.csrf, "purge": ""}
    )
    assert answer.status_code == 303
    lifecycle = definitions.get_definition(ui.platform, "pipeline").definition.lifecycle
    assert lifecycle in ("deleting", "deleted")


def test_a_run_page_draws_the_graph_and_both_states(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    page = viewer.http.get(f"/ui/runs/{run_id}").text
    assert page.count('class="node"') == len(runs.get_run(ui.platform, run_id).instances)
    assert page.count('class="edge"') == 2
    assert 'class="run-execution"' in page and 'class="run-publication"' in page
    assert f"/ui/live?run={run_id}" in page


def test_the_health_panel_answers(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get("/ui/health")
    assert page.status_code == 200
    assert 'id="queue-depth"' in page.text


def test_the_language_switches_by_cookie(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    answer = viewer.http.post(
        "/ui/language", data={"csrf": viewer.csrf, "language": "zh", "next": "/ui/definitions"}
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/definitions"
    page = viewer.http.get("/ui/definitions").text
    assert '<html lang="zh-CN" ' in page
    assert "定义" in page


def test_the_theme_is_chosen_by_a_form_and_kept_in_a_cookie(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    assert 'data-theme="auto"' in viewer.http.get("/ui/definitions").text  # follow the system

    answer = viewer.http.post(
        "/ui/theme", data={"csrf": viewer.csrf, "theme": "dark", "next": "/ui/runs"}
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/runs"
    assert 'data-theme="dark"' in viewer.http.get("/ui/runs").text

    viewer.http.post("/ui/theme", data={"csrf": viewer.csrf, "theme": "neon", "next": "/ui/"})
    assert 'data-theme="auto"' in viewer.http.get("/ui/runs").text  # an unknown one is auto
    forged = viewer.http.post("/ui/theme", data={"csrf": "forged", "theme": "dark"})
    assert forged.status_code == 403
    assert 'data-theme="auto"' in viewer.http.get("/ui/runs").text


def test_language_switch_never_leaves_the_ui(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    answer = viewer.http.post(
        "/ui/language", data={"csrf": viewer.csrf, "language": "en", "next": "//evil.example"}
    )
    assert answer.headers["location"] == "/ui/"


def test_dates_are_in_the_viewers_zone_with_utc_on_hover(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    runs.trigger_run(ui.platform, "pipeline", actor="test")
    viewer.http.cookies.set("veritask_tz", "Asia%2FShanghai")  # as the page's script writes it
    page = viewer.http.get("/ui/definitions/pipeline").text
    found = re.search(r'<time datetime="[^"]+" title="([^"]+ UTC)">([^<]+)</time>', page)
    assert found is not None
    assert found.group(2).endswith("CST")


def test_the_live_stream_says_when_the_run_changed(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    with viewer.http.stream("GET", f"/ui/live?run={run_id}&since=0") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        seen = ""
        for chunk in stream.iter_text():
            seen += chunk
            if "event: changed" in seen:
                break
    assert "retry: 1000" in seen
    assert re.search(r"id: \d+\nevent: changed", seen)


def test_the_gantt_draws_the_same_intervals_as_the_durations_api(ui: Ui) -> None:
    # A run as the ledger records it: extract succeeded, load failed once and waits to retry.
    run_id = _story(ui.platform.ledger)
    viewer = ui.signed_in(TokenRole.VIEWER)
    drawn = drawn_intervals(viewer.http.get(f"/ui/runs/{run_id}").text)
    api = ui.client().get(
        f"/api/v2/runs/{run_id}/durations",
        headers={"Authorization": f"Bearer {ui.tokens[TokenRole.VIEWER]}"},
    )
    assert api.status_code == 200, api.text
    expected = api_intervals(api.json())
    assert {phase for _, phase, *_ in expected} == {"dependency_wait", "queue", "execution"}
    assert drawn == expected


def test_revoking_the_token_ends_a_signed_in_session(ui: Ui) -> None:
    made = tokens.create_token(ui.platform, role=TokenRole.OPERATOR, name="leaving")
    ui.tokens[TokenRole.OPERATOR] = made.token
    operator = ui.signed_in(TokenRole.OPERATOR)
    cookie = operator.http.cookies["veritask_session"]
    assert operator.http.get("/ui/definitions").status_code == 200

    tokens.revoke_token(ui.platform, made.id)

    page = operator.http.get("/ui/definitions")
    assert page.status_code == 303  # the cookie is still validly signed; its token is not
    assert page.headers["location"].startswith("/ui/sign-in")
    assert operator.http.cookies["veritask_session"] == cookie
    trigger = operator.http.post(
        "/ui/definitions/pipeline/trigger", data={"csrf": operator.csrf, "param.table": "x"}
    )
    assert trigger.status_code == 303
    assert trigger.headers["location"].startswith("/ui/sign-in")
    assert runs.list_runs(ui.platform, definition="pipeline").items == ()
    assert operator.http.get("/ui/live?since=0").status_code == 303
    csrf = csrf_of(operator.http.get("/ui/sign-in").text)
    again = operator.http.post(
        "/ui/sign-in", data={"csrf": csrf, "token": made.token, "next": "/ui/"}
    )
    assert again.status_code == 401  # and it cannot sign in again


def test_platform_vocabulary_is_translated_and_user_data_is_not(ui: Ui) -> None:
    definitions.apply_definition(
        ui.platform,
        "name: nightly\nowner: ops\nschedule: {cron: '0 6 * * 1-5', timezone: UTC}\n"
        "tasks:\n  work: {run: 'true'}\n",
        actor="test",
    )
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="operator:ann").run_id
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    viewer = ui.signed_in(TokenRole.VIEWER)
    english = viewer.http.get("/ui/definitions").text
    assert "every weekday (Monday to Friday) at 06:00 (UTC)" in english
    viewer.http.cookies.set("veritask_lang", "zh")
    chinese = viewer.http.get("/ui/definitions").text
    assert "每个工作日（周一至周五）06:00（UTC）" in chinese
    assert "every weekday" not in chinese
    history = viewer.http.get(f"/ui/instances/{instance_id}").text
    assert 'title="instance_created">实例已创建</span>' in history  # the recorded name on hover
    assert "已应用" in history  # the outcome
    assert "→ 已创建" in history  # the state change
    api = ui.client().get(
        "/api/v2/definitions/nightly",
        headers={"Authorization": f"Bearer {ui.tokens[TokenRole.VIEWER]}"},
    )
    assert "every weekday (Monday to Friday) at 06:00 (UTC)" in api.text  # the API stays English


def test_a_parameter_line_without_equals_is_refused_and_starts_nothing(ui: Ui) -> None:
    definitions.apply_definition(
        ui.platform, "name: open\ntasks:\n  greet: {run: echo hello}\n", actor="test"
    )
    operator = ui.signed_in(TokenRole.OPERATOR)
    typed = "day=2024-01-01\n\nregion eu"
    answer = operator.http.post(
        "/ui/definitions/open/trigger", data={"csrf": operator.csrf, "extra": typed}
    )
    assert answer.status_code == 422
    page = answer.text
    assert 'id="trigger-form"' in page
    [problem] = re.findall(r'<li class="trigger-error">(.*?)</li>', page)
    assert "line 3" in problem
    assert "region eu" in problem
    # The form comes back with what was typed, to correct it.
    assert ">day=2024-01-01\n\nregion eu</textarea>" in page
    assert runs.list_runs(ui.platform, definition="open").items == ()


def test_the_instance_page_shows_each_attempts_last_error_and_cost(ui: Ui) -> None:
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="operator:ann").run_id
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(ui.platform, instance_id, token)
    worker = httpx.Client(base_url=ui.url, headers={"Authorization": f"Bearer {token}"})
    with worker:
        assert worker.post("/api/v2/callbacks/events", json=started(instance_id, 1, token))
        event = completed(instance_id, attempt_no, token, seq=2, exit_code=1)
        assert isinstance(event["evidence"], dict)
        event["evidence"].update(
            error_message="Traceback (most recent call last):\nKeyError: '<users>'",
            cpu_user_seconds=1.25,
            cpu_system_seconds=0.5,
            peak_rss_bytes=50 * 2**20,
        )
        assert worker.post("/api/v2/callbacks/events", json=event).status_code == 200

    page = ui.signed_in(TokenRole.VIEWER).http.get(f"/ui/instances/{instance_id}").text

    assert "Last error of attempt 1" in page
    assert "KeyError: &#39;&lt;users&gt;&#39;" in page  # the task's text, escaped
    assert "CPU 1.25s user, 0.50s system; peak RSS 50.0 MiB" in page


def test_the_instance_page_shows_the_output_that_flows_and_each_attempts_own(ui: Ui) -> None:
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="operator:ann").run_id
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(ui.platform, instance_id, token)
    worker = httpx.Client(base_url=ui.url, headers={"Authorization": f"Bearer {token}"})
    with worker:
        assert worker.post("/api/v2/callbacks/events", json=started(instance_id, 1, token))
        event = completed(instance_id, attempt_no, token, seq=2, exit_code=0)
        assert isinstance(event["evidence"], dict)
        event["evidence"]["output"] = ["<b>a.csv</b>", 2]
        assert worker.post("/api/v2/callbacks/events", json=event).status_code == 200

    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get(f"/ui/instances/{instance_id}").text
    assert "Output (what flows downstream)" in page
    assert "Output of attempt 1" in page
    # The JSON as text: nothing in it is markup.
    assert page.count('["\\u003cb\\u003ea.csv\\u003c/b\\u003e", 2]') == 2
    assert "<b>a.csv" not in page
    viewer.http.post("/ui/language", data={"csrf": viewer.csrf, "language": "zh", "next": "/ui"})
    chinese = viewer.http.get(f"/ui/instances/{instance_id}").text
    assert "输出（传给下游任务的值）" in chinese and "第 1 次尝试的输出" in chinese


MAPPED = """\
name: mapped
tasks:
  list_files: {run: "true"}
  each:
    run: echo {{ map.item }}
    map: {over: "{{ outputs.list_files }}"}
    after: [list_files]
"""


def test_a_mapped_task_is_one_row_with_counts_that_opens_into_its_instances(ui: Ui) -> None:
    definitions.apply_definition(ui.platform, MAPPED, actor="test")
    run_id = runs.trigger_run(ui.platform, "mapped", actor="operator:ann").run_id
    parent = next(i for i in runs.get_run(ui.platform, run_id).instances if i.task == "each")
    ledger = ui.platform.ledger
    loaded = ledger.snapshot(parent.id)
    assert loaded is not None
    expanded = new_events.map_expanded(
        event_id=ids.time_ordered_id(),
        instance_id=parent.id,
        epoch=0,
        event_time=ui.platform.now(),
        over="list_files",
        upstream_instance_id="",
        upstream_attempt_no=1,
        items=["a", "b", "c"],
    )
    ledger.expand_map(
        expanded,
        expected_version=loaded[1],
        run_id=run_id,
        task_key="each",
        policy=TaskPolicy(),
        new_id=ids.time_ordered_id,
    )
    viewer = ui.signed_in(TokenRole.VIEWER)

    page = viewer.http.get(f"/ui/runs/{run_id}").text
    group = re.search(
        r'<tr data-instance="each" class="mapped-group" id="mapped-each">(.*?)</tr>', page, re.S
    )
    assert group is not None
    assert "3 instances" in group.group(1)
    assert re.findall(r'class="mapped-count" data-state="(\w+)"', group.group(1)) == ["CREATED"]
    assert "×3" in group.group(1)
    assert "expanded into 3 instances, one per item of the output of list_files" in group.group(1)
    opened = re.search(
        r'<tr class="mapped-instances" data-group="each">(.*?)</details>', page, re.S
    )
    assert opened is not None
    assert re.findall(r'data-instance="(each\[\d\])"', opened.group(1)) == [
        "each[0]",
        "each[1]",
        "each[2]",
    ]
    # The graph draws the group as one box that leads to its row.
    assert 'href="#mapped-each" class="node" data-task="each ×3"' in page
    # The grid: one cell for the task, its counts on hover, opening the run's row.
    grid = viewer.http.get("/ui/definitions/mapped/grid").text
    cell = re.search(
        r'<tr data-task="each">.*?<a href="([^"]*)"[^>]*data-mapped="3" title="([^"]*)"', grid, re.S
    )
    assert cell is not None
    assert cell.group(1) == f"/ui/runs/{run_id}#mapped-each"
    assert "3 mapped instances (created 3)" in cell.group(2)
    chinese = viewer.http.post(
        "/ui/language", data={"csrf": viewer.csrf, "language": "zh", "next": "/ui"}
    )
    assert chinese.status_code == 303
    assert "3 个实例" in viewer.http.get(f"/ui/runs/{run_id}").text


def test_the_pools_page_lists_each_pool_with_its_slots_in_use(ui: Ui) -> None:
    pools.set_pool(ui.platform, "warehouse", slots=3, actor="operator:test")
    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get("/ui/pools")
    assert page.status_code == 200
    assert 'data-pool="warehouse"' in page.text and "0 of 3" in page.text
    assert 'data-pool="default"' in page.text and "0 (unlimited)" in page.text
    assert 'href="/ui/pools"' in viewer.http.get("/ui/definitions").text


PUBLISHED = """\
name: published_graph
tasks:
  extract: {run: "true"}
  load: {run: "true", after: [extract]}
  audit: {run: "true", after: [extract]}
publish:
  checks:
    - {name: row_count, run: "true"}
    - {name: freshness, run: "true"}
  commit: {run: "true"}
"""


def _graph_of(page: str) -> tuple[list[str], int]:
    drawing = re.search(r'<svg class="dag".*?</section>', page, re.S)
    assert drawing is not None
    return re.findall(r'class="node" data-task="([^"]+)"', drawing.group(0)), drawing.group(
        0
    ).count('<path class="edge"')


def test_a_definitions_graph_is_drawn_before_any_run_with_its_publish_steps(ui: Ui) -> None:
    definitions.apply_definition(ui.platform, PUBLISHED, actor="test")
    viewer = ui.signed_in(TokenRole.VIEWER)

    page = viewer.http.get("/ui/definitions/published_graph").text
    boxes, edges = _graph_of(page)
    assert sorted(boxes) == ["audit", "commit", "extract", "freshness", "load", "row_count"]
    # extract→load, extract→audit; each check after both leaves (load, audit); commit after each.
    assert edges == 2 + 2 * 2 + 2
    assert "publish check" in page and "publish commit" in page
    viewer.http.post("/ui/language", data={"csrf": viewer.csrf, "language": "zh", "next": "/ui"})
    assert "发布检查" in viewer.http.get("/ui/definitions/published_graph").text


def test_a_runs_graph_joins_its_publish_steps_after_its_leaf_tasks(ui: Ui) -> None:
    definitions.apply_definition(ui.platform, PUBLISHED, actor="test")
    run_id = runs.trigger_run(ui.platform, "published_graph", actor="operator:ann").run_id
    viewer = ui.signed_in(TokenRole.VIEWER)

    page = viewer.http.get(f"/ui/runs/{run_id}").text
    boxes, edges = _graph_of(page)
    # The run's publish steps are instances of their own: joined after the leaves, not drawn
    # twice.
    steps = ["publish.check.freshness", "publish.check.row_count", "publish.commit"]
    assert sorted(boxes) == ["audit", "extract", "load", *steps]
    assert edges == 8


def test_a_big_runs_tasks_come_in_pages_and_its_graph_gives_way_to_a_note(
    ui: Ui, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = "\n".join(f"  t{n:03d}: {{run: 'true'}}" for n in range(450))
    definitions.apply_definition(ui.platform, f"name: wide\ntasks:\n{tasks}\n", actor="test")
    run_id = runs.trigger_run(ui.platform, "wide", actor="test").run_id
    viewer = ui.signed_in(TokenRole.VIEWER)

    first = viewer.http.get(f"/ui/runs/{run_id}").text
    last = viewer.http.get(f"/ui/runs/{run_id}", params={"page": 3}).text
    beyond = viewer.http.get(f"/ui/runs/{run_id}", params={"page": 99}).text
    monkeypatch.setattr(run_pages, "GRAPH_MAX_BOXES", 449)
    too_big = viewer.http.get(f"/ui/runs/{run_id}").text

    def listed(page: str) -> list[str]:
        return re.findall(r'<tr data-instance="(t\d{3})"', page)

    assert listed(first) == [f"t{n:03d}" for n in range(200)]
    assert "Tasks 1–200 of 450" in first and 'rel="next"' in first
    assert first.count('class="node"') == 450, "the graph draws every task"
    assert listed(last) == [f"t{n:03d}" for n in range(400, 450)]
    assert "Tasks 401–450 of 450" in last and 'rel="next"' not in last
    assert listed(beyond) == listed(last), "a page past the last is the last"
    assert 'id="run-graph-too-big"' in too_big and 'class="node"' not in too_big
    assert "This run has 450 tasks" in too_big
    assert viewer.http.get(f"/ui/runs/{run_id}", params={"page": 0}).status_code == 422


def test_a_published_runs_page_shows_its_attestations_key_and_links_the_json(ui: Ui) -> None:
    definitions.apply_definition(ui.platform, PUBLISHED, actor="test")
    run_id = published_run(ui.platform.ledger, "published_graph", datetime(2026, 12, 5, tzinfo=UTC))
    waiting = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    viewer = ui.signed_in(TokenRole.VIEWER)

    page = viewer.http.get(f"/ui/runs/{run_id}").text
    document = viewer.http.get(f"/ui/runs/{run_id}/attestation.json").json()
    key_id = document["signature"]["key_id"]
    assert f'<code class="id" title="{document["signature"]["public_key"]}">{key_id}</code>' in page
    assert f'href="/ui/runs/{run_id}/attestation.json"' in page
    assert document["attestation"]["run_id"] == run_id
    assert "No attestation" in viewer.http.get(f"/ui/runs/{waiting}").text

"""The run page's *Clear failed*, *Clear this task* and *Rerun…* over HTTP: the form asks for
a reason, the confirm step shows the scope, only the confirmation acts; operators only,
CSRF-checked; a refusal shows the form again with its message."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime

from tests.contract.test_apply_ledger import FAILURE, SUCCESS, acked, opened, report
from tests.ui.conftest import SignedIn, Ui
from veritask.core import new_events
from veritask.core.events import EventKind
from veritask.core.jsontypes import JSONObject
from veritask.core.states import InstanceState, RunExecutionState
from veritask.ledger import run_store
from veritask.scheduling.dispatch import new_event_id
from veritask.services import definitions, runs
from veritask.services.tokens import TokenRole

CHAIN = """\
name: chain
parameters: {table: users, limit: 10}
defaults: {retry: {max_retries: 0}}
tasks:
  first: {run: "true"}
  second: {run: "false", after: [first]}
  third: {run: "true", after: [second]}
  aside: {run: "true", after: [first]}
"""
PREVIEW_ROW = re.compile(r'<tr data-instance="([^"]+)">')


def _finish(ui: Ui, instance_id: str, evidence: JSONObject) -> None:
    ledger = ui.platform.ledger
    ledger.apply(opened(instance_id))
    ledger.apply(acked(instance_id))
    ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"}))
    ledger.apply(report(instance_id, EventKind.COMPLETED, 2, evidence))


def _set_run(ui: Ui, run_id: str, state: RunExecutionState) -> None:
    with ui.platform.engine.begin() as connection:
        version, previous = run_store.run_version(connection, run_id)
        run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=state,
            reason="set by the test",
            previous=previous,
            actor="scheduler",
            event_id=new_event_id(),
            now=ui.platform.now(),
            evidence={"by": "the test"},
        )


def _failed_run(ui: Ui) -> tuple[str, dict[str, str]]:
    """A FAILED run of ``chain``: first and aside succeeded, second failed, third upstream."""
    definitions.apply_definition(ui.platform, CHAIN, actor="test")
    run_id = runs.trigger_run(ui.platform, "chain", actor="test").run_id
    ids = {i.task: i.id for i in runs.get_run(ui.platform, run_id).instances}
    _finish(ui, ids["first"], SUCCESS)
    _finish(ui, ids["aside"], SUCCESS)
    _finish(ui, ids["second"], FAILURE)
    ui.platform.ledger.apply(
        new_events.trigger_rule_decided(
            EventKind.UPSTREAM_FAILED,
            event_id=new_event_id(),
            instance_id=ids["third"],
            event_time=datetime.now(UTC),
            rule="all_success",
            upstream={"second": InstanceState.FAILED},
        )
    )
    _set_run(ui, run_id, RunExecutionState.FAILED)
    return run_id, ids


def _states(ui: Ui, run_id: str) -> dict[str, InstanceState]:
    return {i.task: i.state for i in runs.get_run(ui.platform, run_id).instances}


def _confirm_form(page: str, form_id: str) -> dict[str, list[str]]:
    """The fields of the confirm step's form, as the browser would post them."""
    form = re.search(rf'<form[^>]*id="{form_id}".*?</form>', page, re.S)
    assert form is not None, page
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(
        r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)
    ):
        fields.setdefault(name, []).append(html.unescape(value))
    return fields


def _preview_clear(operator: SignedIn, run_id: str, **fields: str | list[str]) -> str:
    data = {"csrf": operator.csrf, **fields}
    answer = operator.http.post(f"/ui/runs/{run_id}/clear/preview", data=data)
    assert answer.status_code == 200, answer.text
    return answer.text


def test_clear_failed_shows_its_scope_and_only_the_confirmation_clears(ui: Ui) -> None:
    run_id, ids = _failed_run(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    run_page = operator.http.get(f"/ui/runs/{run_id}").text
    assert f'href="/ui/runs/{run_id}/clear?failed=yes"' in run_page
    form = operator.http.get(f"/ui/runs/{run_id}/clear?failed=yes")
    assert form.status_code == 200 and 'id="clear-reason"' in form.text
    preview = _preview_clear(operator, run_id, failed="yes", downstream="yes", reason="disk fixed")
    # The failed instance and what it holds up, nothing that succeeded; nothing cleared yet.
    assert PREVIEW_ROW.findall(preview) == ["second", "third"]
    assert _states(ui, run_id)["second"] is InstanceState.FAILED
    fields = _confirm_form(preview, "clear-confirm")
    assert ids["second"] in fields["instance"] and fields["reason"] == ["disk fixed"]
    done = operator.http.post(f"/ui/runs/{run_id}/clear", data=fields)
    assert done.status_code == 303
    assert done.headers["location"] == f"/ui/runs/{run_id}"
    assert _states(ui, run_id) == {
        "first": InstanceState.SUCCESS,
        "aside": InstanceState.SUCCESS,
        "second": InstanceState.CREATED,
        "third": InstanceState.CREATED,
    }
    run = runs.get_run(ui.platform, run_id).run
    assert run.execution_state == "RUNNING"
    assert "disk fixed" in (run.execution_reason or "")


def test_clear_this_task_with_and_without_downstream(ui: Ui) -> None:
    run_id, _ = _failed_run(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    run_page = operator.http.get(f"/ui/runs/{run_id}").text
    assert f'href="/ui/runs/{run_id}/clear?task=first"' in run_page
    alone = _preview_clear(operator, run_id, task="first", reason="again")
    assert PREVIEW_ROW.findall(alone) == ["first"]
    down = _preview_clear(operator, run_id, task="first", downstream="yes", reason="again")
    assert PREVIEW_ROW.findall(down) == ["first", "second", "third", "aside"]
    done = operator.http.post(
        f"/ui/runs/{run_id}/clear", data=_confirm_form(alone, "clear-confirm")
    )
    assert done.status_code == 303
    states = _states(ui, run_id)
    assert states["first"] is InstanceState.CREATED
    assert states["second"] is InstanceState.FAILED  # downstream left as it was
    assert states["aside"] is InstanceState.SUCCESS


def test_a_clear_whose_scope_moved_since_the_preview_is_refused(ui: Ui) -> None:
    run_id, ids = _failed_run(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    preview = _preview_clear(operator, run_id, task="second", downstream="yes", reason="x")
    fields = _confirm_form(preview, "clear-confirm")
    fields["instance"].remove(ids["third"])
    answer = operator.http.post(f"/ui/runs/{run_id}/clear", data=fields)
    assert answer.status_code == 409
    assert "changed since the preview" in html.unescape(answer.text)
    assert _states(ui, run_id)["second"] is InstanceState.FAILED


def test_clearing_an_active_instance_shows_the_form_again_with_the_409(ui: Ui) -> None:
    run_id, ids = _failed_run(ui)
    ledger = ui.platform.ledger
    operator = ui.signed_in(TokenRole.OPERATOR)
    preview = _preview_clear(operator, run_id, task="second", reason="x")
    fields = _confirm_form(preview, "clear-confirm")
    # Meanwhile a clear from elsewhere sends `second` on, and it starts again.
    runs_api = operator.http.post(
        f"/ui/runs/{run_id}/clear",
        data={k: v for k, v in fields.items() if k != "previewed"},
    )
    assert runs_api.status_code == 303
    for event in (opened(ids["second"], 2, reason="rerun"), acked(ids["second"], 2)):
        assert ledger.apply(event).state is not InstanceState.CREATED
    refused = operator.http.post(f"/ui/runs/{run_id}/clear", data=fields)
    assert refused.status_code == 409
    text = html.unescape(refused.text)
    assert 'id="clear-problems"' in text and ids["second"] in text and "QUEUED" in text
    assert 'id="clear-form"' in text and 'value="x"' in text  # the form again, as typed
    again = operator.http.post(
        f"/ui/runs/{run_id}/clear/preview",
        data={"csrf": operator.csrf, "task": "second", "reason": "x"},
    )
    assert again.status_code == 409 and ids["second"] in html.unescape(again.text)
    missing = operator.http.post(
        f"/ui/runs/{run_id}/clear/preview",
        data={"csrf": operator.csrf, "task": "second", "reason": " "},
    )
    assert missing.status_code == 422 and "a clear needs a reason" in missing.text


def test_rerun_is_prefilled_previews_the_merge_and_leads_to_the_new_run(ui: Ui) -> None:
    run_id, _ = _failed_run(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    assert f'href="/ui/runs/{run_id}/rerun"' in operator.http.get(f"/ui/runs/{run_id}").text
    form = operator.http.get(f"/ui/runs/{run_id}/rerun").text
    typed = re.search(r'<textarea id="rerun-parameters"[^>]*>(.*?)</textarea>', form, re.S)
    assert typed is not None and typed.group(1).splitlines() == ["table=users", "limit=10"]
    preview = operator.http.post(
        f"/ui/runs/{run_id}/rerun/preview",
        data={
            "csrf": operator.csrf,
            "parameters": "limit=10\ntable=orders",
            "version": "same",
            "reason": "orders too",
        },
    )
    assert preview.status_code == 200, preview.text
    shown = re.search(
        r'<pre class="json parameters" id="rerun-shown-parameters">(.*?)</pre>', preview.text, re.S
    )
    assert shown is not None
    assert json.loads(html.unescape(shown.group(1))) == {"limit": 10, "table": "orders"}
    assert runs.list_runs(ui.platform, definition="chain").items[0].id == run_id  # none yet
    done = operator.http.post(
        f"/ui/runs/{run_id}/rerun", data=_confirm_form(preview.text, "rerun-confirm")
    )
    assert done.status_code == 303
    new_id = done.headers["location"].rsplit("/", 1)[1]
    new = runs.get_run(ui.platform, new_id).run
    assert (new.trigger_kind, new.rerun_of) == ("rerun", run_id)
    assert new.parameters == {"limit": 10, "table": "orders"}
    assert runs.get_run(ui.platform, run_id).run.parameters == {"limit": 10, "table": "users"}


def test_rerun_refusals_show_the_form_again_with_their_message(ui: Ui) -> None:
    run_id, _ = _failed_run(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    path = f"/ui/runs/{run_id}/rerun/preview"
    malformed = operator.http.post(
        path, data={"csrf": operator.csrf, "parameters": "table=orders\noops", "reason": "x"}
    )
    assert malformed.status_code == 422
    assert "line 2 of the parameters" in html.unescape(malformed.text)
    assert "table=orders\noops" in malformed.text  # what was typed, kept
    unknown = operator.http.post(
        path, data={"csrf": operator.csrf, "parameters": "nope=1", "reason": "x"}
    )
    assert unknown.status_code == 422 and "<code>parameters.nope</code>" in unknown.text
    assert "parameters.parameters" not in unknown.text  # the field is named once
    no_reason = operator.http.post(path, data={"csrf": operator.csrf, "parameters": ""})
    assert no_reason.status_code == 422 and "needs a reason" in no_reason.text
    before = len(runs.list_runs(ui.platform, definition="chain").items)
    moved = operator.http.post(
        f"/ui/runs/{run_id}/rerun",
        data={
            "csrf": operator.csrf,
            "given": "{}",
            "version": "latest",
            "definition_version": "7",
            "reason": "x",
        },
    )
    assert moved.status_code == 409 and "the preview showed version 7" in moved.text
    assert len(runs.list_runs(ui.platform, definition="chain").items) == before


def test_a_viewer_sees_no_buttons_and_every_step_is_refused(ui: Ui) -> None:
    run_id, _ = _failed_run(ui)
    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get(f"/ui/runs/{run_id}").text
    for mark in ("clear-failed", "clear-task", "rerun-run", "/clear", "/rerun"):
        assert mark not in page
    for path in (f"/ui/runs/{run_id}/clear?failed=yes", f"/ui/runs/{run_id}/rerun"):
        assert viewer.http.get(path).status_code == 403
    posts = {
        f"/ui/runs/{run_id}/clear/preview": {"failed": "yes", "reason": "x"},
        f"/ui/runs/{run_id}/clear": {"failed": "yes", "downstream": "yes", "reason": "x"},
        f"/ui/runs/{run_id}/rerun/preview": {"parameters": "", "reason": "x"},
        f"/ui/runs/{run_id}/rerun": {"given": "{}", "reason": "x"},
    }
    for path, data in posts.items():
        refused = viewer.http.post(path, data={"csrf": viewer.csrf, **data})
        assert refused.status_code == 403, path
        assert "operator" in refused.text
    assert _states(ui, run_id)["second"] is InstanceState.FAILED
    assert len(runs.list_runs(ui.platform, definition="chain").items) == 1


def test_every_step_without_the_sessions_csrf_token_is_refused(ui: Ui) -> None:
    run_id, _ = _failed_run(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    posts = {
        f"/ui/runs/{run_id}/clear/preview": {"failed": "yes", "reason": "x"},
        f"/ui/runs/{run_id}/clear": {"failed": "yes", "downstream": "yes", "reason": "x"},
        f"/ui/runs/{run_id}/rerun/preview": {"parameters": "", "reason": "x"},
        f"/ui/runs/{run_id}/rerun": {"given": "{}", "reason": "x"},
    }
    for path, data in posts.items():
        for csrf in ({}, {"csrf": "not-the-token"}):
            refused = operator.http.post(path, data={**csrf, **data})
            assert refused.status_code == 403, path
            assert "security token" in refused.text
    assert _states(ui, run_id)["second"] is InstanceState.FAILED
    assert len(runs.list_runs(ui.platform, definition="chain").items) == 1


def test_a_clear_of_one_instance_says_this_instance(ui: Ui) -> None:
    run_id, _ = _failed_run(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    answer = operator.http.post(
        f"/ui/runs/{run_id}/clear/preview",
        data={"csrf": operator.csrf, "task": "third", "downstream": "no", "reason": "again"},
    )
    assert answer.status_code == 200, answer.text
    assert len(PREVIEW_ROW.findall(answer.text)) == 1
    assert "This instance will be cleared" in answer.text
    assert "Clear this instance" in answer.text
    assert "These 1" not in answer.text and "these 1" not in answer.text


def test_a_rerun_refused_for_an_active_run_links_that_run(ui: Ui) -> None:
    run_id, _ = _failed_run(ui)
    active = runs.trigger_run(ui.platform, "chain", actor="test").run_id  # forbids another
    operator = ui.signed_in(TokenRole.OPERATOR)
    answer = operator.http.post(
        f"/ui/runs/{run_id}/rerun",
        data={"csrf": operator.csrf, "given": "{}", "version": "same", "reason": "again"},
    )
    assert answer.status_code == 409
    assert f'<a href="/ui/runs/{active}"><code>{active[-8:]}</code></a>' in answer.text

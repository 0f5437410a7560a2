"""Recorded reasons, validator messages and refusals in the viewer's language (issue 9).

The ledger keeps the English sentence; a page viewed in Chinese recognises the phrase that
wrote it and shows it in Chinese, with its fields (states, durations, nested sentences)
translated too.
"""

from __future__ import annotations

import html
import itertools
import re
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from tests.contract.test_apply_ledger import SUCCESS, acked, opened, report
from tests.ui.conftest import Ui
from veritask.core import alert_messages, decide, reasons, run_state
from veritask.core.events import EventKind, OverrideScope
from veritask.core.states import InstanceState, RunExecutionState
from veritask.ledger import alerts as ledger_alerts
from veritask.ledger import run_store, schema
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling.dispatch import new_event_id
from veritask.services import alerts, overrides, runs
from veritask.services.tokens import TokenRole
from veritask.ui import i18n, rendering

_ids = itertools.count(1)


def _next_id() -> str:
    return f"reasons-{next(_ids)}"


def _fence(ui: Ui, instance_id: str) -> None:
    """Open, start, lose and fence the instance's first attempt, as the loops would."""
    ledger = ui.platform.ledger
    ledger.apply(opened(instance_id))
    ledger.apply(acked(instance_id))
    ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"}))
    policy = ledger.policy_of(instance_id)
    assert policy is not None
    later = datetime.now(UTC) + timedelta(days=1)
    for now in (later, later + timedelta(days=1)):
        loaded = ledger.snapshot(instance_id)
        assert loaded is not None
        snapshot, _ = loaded
        if now == later:
            events = decide.monitor(snapshot, policy, now=now, next_id=_next_id)
        else:
            events = list(
                decide.reconcile(snapshot, policy, None, now=now, next_id=_next_id).events
            )
        assert events
        for event in events:
            ledger.apply(event)


def _deadlock(ui: Ui, run_id: str) -> str:
    """Record the run as FAILED for a deadlock, with the reason the scheduler writes."""
    graph = run_state.RunGraph(
        (
            run_state.TaskNode("extract", ("load",)),
            run_state.TaskNode("transform", ("extract",)),
            run_state.TaskNode("load", ("transform",)),
        )
    )
    verdict = run_state.execution_state(graph, {})
    reason = reasons.BLOCKING.format(reason=verdict.reason, tasks=", ".join(verdict.blocking))
    with ui.platform.engine.begin() as connection:
        version = connection.execute(
            sa.select(schema.runs.c.version).where(schema.runs.c.id == run_id)
        ).scalar_one()
        run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=verdict.state,
            reason=reason,
            previous=RunExecutionState.RUNNING,
            actor="scheduler",
            event_id=new_event_id(),
            now=datetime.now(UTC),
            evidence={"by": "the test"},
        )
    return reason


def _shown(page: str) -> str:
    """The page's text, without the recorded evidence (JSON, shown as recorded)."""
    without_evidence = re.sub(r"<pre[^>]*>.*?</pre>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", without_evidence))


def test_a_deadlock_a_fence_and_an_override_read_in_chinese(ui: Ui) -> None:
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="operator:ann").run_id
    instances = {i.task: i.id for i in runs.get_run(ui.platform, run_id).instances}
    _fence(ui, instances["extract"])
    overrides.override(
        ui.platform,
        instances["extract"],
        to_state=InstanceState.SUCCESS,
        scope=OverrideScope.INSTANCE,
        reason="checked the output by hand",
        actor="operator:ann",
    )
    ui.platform.ledger.apply(opened(instances["transform"]))
    ui.platform.ledger.apply(acked(instances["transform"]))
    ui.platform.ledger.apply(report(instances["transform"], EventKind.COMPLETED, 1, SUCCESS))
    deadlock = _deadlock(ui, run_id)
    extract = runs.get_instance(ui.platform, instances["extract"]).instance
    assert extract.reason.startswith("overridden to SUCCESS by operator:ann")
    assert "fenced: fate unknown after the 0:05:00 evidence window" in extract.reason

    viewer = ui.signed_in(TokenRole.VIEWER)
    english = _shown(viewer.http.get(f"/ui/runs/{run_id}").text)
    assert deadlock in english  # English readers see the sentence as stored

    viewer.http.cookies.set("veritask_lang", "zh")
    run_page = _shown(viewer.http.get(f"/ui/runs/{run_id}").text)
    assert "死锁：extract 等待 load；transform 等待 extract；load 等待 transform" in run_page
    assert "（阻塞：extract, transform, load）" in run_page
    assert "deadlock" not in run_page
    assert "已由 操作员:ann 人工覆盖为成功（checked the output by hand）" in run_page
    assert "overridden to" not in run_page
    assert "工作进程报告退出码 0" in run_page  # transform: "the worker reported exit 0"

    instance_page = _shown(viewer.http.get(f"/ui/instances/{instances['extract']}").text)
    assert "已隔离：证据窗口 5分 过后结果仍未知" in instance_page  # the attempt's reason
    assert "fenced:" not in instance_page
    assert "fate unknown" not in instance_page
    assert "the evidence alone says" not in instance_page


def test_an_invalid_definition_shows_the_chinese_message_at_its_line(ui: Ui) -> None:
    admin = ui.signed_in(TokenRole.ADMIN)
    admin.http.cookies.set("veritask_lang", "zh")
    source = "name: broken\ntasks:\n  a: {run: echo a}\n  b: {run: echo b, after: [aa]}\n"
    answer = admin.http.post("/ui/definitions/new", data={"csrf": admin.csrf, "source": source})
    assert answer.status_code == 422
    [line] = re.findall(
        r'<li class="editor-error" data-line="4">(.*?)</li>', answer.text, flags=re.S
    )
    assert "没有名为 'aa' 的任务（是否想写 'a'？）" in html.unescape(line)
    assert "no task named" not in html.unescape(answer.text)
    api = ui.client().post(
        "/api/v2/definitions",
        content=source,
        headers={
            "Authorization": f"Bearer {ui.tokens[TokenRole.ADMIN]}",
            "Content-Type": "application/yaml",
        },
    )
    assert "no task named 'aa' (did you mean 'a'?)" in api.text  # the API stays English


def test_a_refusal_reads_in_chinese(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    viewer.http.cookies.set("veritask_lang", "zh")
    page = viewer.http.get("/ui/runs/no-such-run")
    assert page.status_code == 404
    assert "没有运行 'no-such-run'" in html.unescape(page.text)
    assert "no run" not in page.text


def test_alert_messages_and_their_refusals_read_in_chinese(ui: Ui) -> None:
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="operator:ann").run_id
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    raised = {
        AlertCategory.RECONCILIATION: alert_messages.LOST.format(attempt_no=1, seconds=30.0),
        AlertCategory.ENGINE: alert_messages.FENCED_STILL_RUNNING.format(
            attempt_no=2, seconds=3.0, engine=alert_messages.UNREACHABLE.format(), next_no=3
        ),
        AlertCategory.QUEUE_QUOTA: alert_messages.STILL_PENDING.format(
            attempt_no=1, since=alert_messages.UNKNOWN_TIME.format(), source="describe"
        ),
        AlertCategory.DEADLINE: alert_messages.DEADLINE.format(due="2026-03-01T04:00:00+00:00"),
    }
    for category, message in raised.items():
        assert ledger_alerts.raise_alert(
            ui.platform.ledger,
            category=category,
            dedup_key=f"reasons:{category}",
            message=message,
            evidence={},
            run_id=run_id,
            instance_id=instance_id,
        )
    # The stored English is what the sweeps wrote before their messages were phrases.
    assert "attempt 1 is LOST: no report within its lease (30 s); reconciling with the engine" in (
        raised.values()
    )

    operator = ui.signed_in(TokenRole.OPERATOR)
    operator.http.cookies.set("veritask_tz", "Asia%2FShanghai")  # as the page's script writes it
    english = _shown(operator.http.get("/ui/alerts").text)
    due = raised.pop(AlertCategory.DEADLINE)
    assert all(message in english for message in raised.values())
    # A recorded time reads in the viewer's zone, in English too.
    assert due not in english
    assert "expected to finish by 2026-03-01 12:00:00 CST and is still active" in english

    operator.http.cookies.set("veritask_lang", "zh")
    page = _shown(operator.http.get("/ui/alerts").text)
    assert "第 1 次尝试已失联：租约期（30 秒）内没有报告；正在与执行引擎对账" in page
    assert (
        "第 2 次尝试已隔离，但执行引擎未在 3 秒内确认其已停止（引擎：无法连接）；"
        "第 3 次尝试将等到引擎报告它已结束"
    ) in page
    assert "第 1 次尝试自 未知时间 起一直排队中；执行引擎仍将其挂起（describe）" in page
    assert "此运行本应在 2026-03-01 12:00:00 CST 前结束，但仍在进行中" in page
    for message in raised.values():
        assert message not in page
    for english_word in ("attempt", "engine", "unreachable", "unknown time", "expected to"):
        assert english_word not in page

    # Resolving twice is refused by the ledger; the refusal reads in Chinese too.
    alert_id = max(alert.id for alert in alerts.list_alerts(ui.platform))
    for _ in range(2):
        answer = operator.http.post(f"/ui/alerts/{alert_id}/resolve", data={"csrf": operator.csrf})
    assert answer.status_code == 409
    assert f"告警 {alert_id} 已解决" in _shown(answer.text)
    assert "already resolved" not in answer.text
    missing = operator.http.post("/ui/alerts/999999/acknowledge", data={"csrf": operator.csrf})
    assert missing.status_code == 404
    assert "没有告警 999999" in _shown(missing.text)
    assert "no alert" not in missing.text


def test_a_run_decided_again_after_an_override_reads_in_chinese() -> None:
    graph = run_state.RunGraph((run_state.TaskNode("extract", ()),))
    verdict = run_state.execution_state(graph, {"extract": InstanceState.SUCCESS})
    stored = reasons.AFTER_OVERRIDE.format(verdict=verdict.reason, actor="operator:ann")
    assert stored == f"{verdict.reason} (after an override by operator:ann)"  # as stored before

    chinese = rendering.translate_sentence(i18n.Translator(i18n.Language.ZH), stored)

    assert chinese.endswith("（在操作员:ann人工覆盖之后）")
    assert "override" not in chinese
    assert verdict.reason not in chinese  # the verdict inside is translated too

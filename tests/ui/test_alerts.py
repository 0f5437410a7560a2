"""The alerts page over HTTP: grouping and filters, acknowledge and resolve with who and when,
roles and CSRF refused, messages escaped, the count in the header, and the live stream."""

from __future__ import annotations

import re

from tests.ui.conftest import Ui
from veritask.ledger import alerts as ledger_alerts
from veritask.services import alerts, runs
from veritask.services.alerts import AlertCategory, AlertStatus
from veritask.services.tokens import TokenRole


def raise_alert(
    ui: Ui,
    category: AlertCategory,
    message: str,
    *,
    run_id: str | None = None,
    instance_id: str | None = None,
) -> int:
    """An alert as the scheduler raises one; its id."""
    assert ledger_alerts.raise_alert(
        ui.platform.ledger,
        category=category,
        dedup_key=f"test:{category}:{message}",
        message=message,
        evidence={"seen": "in a test"},
        run_id=run_id,
        instance_id=instance_id,
        attempt_no=1 if instance_id else None,
    )
    return max(alert.id for alert in alerts.list_alerts(ui.platform))


def alert_row(page: str, alert_id: int) -> str:
    found = re.search(rf'<tr class="alert" id="alert-{alert_id}".*?</tr>', page, re.S)
    assert found is not None, f"alert {alert_id} is not on the page"
    return found.group(0)


def test_alerts_are_grouped_by_owner_category_with_links_and_times(ui: Ui) -> None:
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    lost = raise_alert(
        ui, AlertCategory.RECONCILIATION, "lost", run_id=run_id, instance_id=instance_id
    )
    late = raise_alert(ui, AlertCategory.DEADLINE, "the run is late", run_id=run_id)
    viewer = ui.signed_in(TokenRole.VIEWER)
    viewer.http.cookies.set("veritask_tz", "Asia%2FShanghai")  # as the page's script writes it
    page = viewer.http.get("/ui/alerts").text
    groups = re.findall(r'<section class="alert-group" data-category="([a-z_]+)"', page)
    assert groups == ["reconciliation", "deadline"]  # in AlertCategory's order
    row = alert_row(page, lost)
    assert f'href="/ui/runs/{run_id}"' in row
    assert f'href="/ui/instances/{instance_id}"' in row
    assert 'href="/ui/definitions/pipeline"' in row
    assert "&lt;b&gt;data&lt;/b&gt;" in row  # the owner it is routed to, escaped
    opened = re.search(r'<time datetime="[^"]+" title="([^"]+ UTC)">([^<]+)</time>', row)
    assert opened is not None and opened.group(2).endswith("CST")
    assert '<div class="message">lost</div>' in row
    assert "the run is late" in alert_row(page, late)


def test_the_filters_choose_status_category_and_owner(ui: Ui) -> None:
    engine = raise_alert(ui, AlertCategory.ENGINE, "the engine did not confirm the stop")
    platform = raise_alert(ui, AlertCategory.PLATFORM, "conflicting evidence")
    alerts.resolve(ui.platform, platform, actor="operator:someone")
    viewer = ui.signed_in(TokenRole.VIEWER)
    unresolved = viewer.http.get("/ui/alerts").text
    assert f'id="alert-{engine}"' in unresolved
    assert f'id="alert-{platform}"' not in unresolved  # unresolved ones by default, as the API
    resolved = viewer.http.get("/ui/alerts?status=resolved").text
    assert f'id="alert-{platform}"' in resolved and f'id="alert-{engine}"' not in resolved
    every = viewer.http.get("/ui/alerts?status=all&category=engine").text
    assert f'id="alert-{engine}"' in every and f'id="alert-{platform}"' not in every
    nobody = viewer.http.get("/ui/alerts?status=all&owner=nobody").text
    assert 'id="no-alerts"' in nobody


def test_an_operator_acknowledges_then_resolves_and_who_and_when_are_shown(ui: Ui) -> None:
    alert_id = raise_alert(ui, AlertCategory.QUEUE_QUOTA, "queued for 40 minutes")
    operator = ui.signed_in(TokenRole.OPERATOR)
    page = operator.http.get("/ui/alerts?category=queue_quota").text
    assert f'action="/ui/alerts/{alert_id}/acknowledge"' in alert_row(page, alert_id)
    answer = operator.http.post(
        f"/ui/alerts/{alert_id}/acknowledge",
        data={"csrf": operator.csrf, "next": "/ui/alerts?category=queue_quota"},
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/alerts?category=queue_quota"
    taken = alerts.get_alert(ui.platform, alert_id)
    assert taken.status is AlertStatus.ACKNOWLEDGED
    assert taken.acknowledged_by == "operator:operator-user"
    row = alert_row(operator.http.get("/ui/alerts").text, alert_id)
    assert 'data-status="acknowledged"' in row
    assert "by operator:operator-user" in row
    assert "/acknowledge" not in row  # taken: only resolving is left
    answer = operator.http.post(
        f"/ui/alerts/{alert_id}/resolve", data={"csrf": operator.csrf, "next": "//evil.example"}
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/alerts"  # never back outside the alerts
    closed = alerts.get_alert(ui.platform, alert_id)
    assert closed.status is AlertStatus.RESOLVED
    assert closed.resolved_by == "operator:operator-user"
    row = alert_row(operator.http.get("/ui/alerts?status=resolved").text, alert_id)
    assert row.count("<time ") == 3  # opened, acknowledged, resolved
    assert "<form" not in row
    again = operator.http.post(f"/ui/alerts/{alert_id}/resolve", data={"csrf": operator.csrf})
    assert again.status_code == 409  # a resolved alert stays resolved


def test_a_viewer_sees_no_buttons_and_a_forged_post_is_refused(ui: Ui) -> None:
    alert_id = raise_alert(ui, AlertCategory.RETRY_TIMING, "retry is overdue")
    viewer = ui.signed_in(TokenRole.VIEWER)
    row = alert_row(viewer.http.get("/ui/alerts").text, alert_id)
    assert "<form" not in row and "<button" not in row
    for action in ("acknowledge", "resolve"):
        answer = viewer.http.post(f"/ui/alerts/{alert_id}/{action}", data={"csrf": viewer.csrf})
        assert answer.status_code == 403
        assert "operator" in answer.text
    assert alerts.get_alert(ui.platform, alert_id).status is AlertStatus.OPEN


def test_an_alert_form_without_the_sessions_csrf_token_changes_nothing(ui: Ui) -> None:
    alert_id = raise_alert(ui, AlertCategory.SCHEDULER_EXECUTOR, "scheduled, never submitted")
    operator = ui.signed_in(TokenRole.OPERATOR)
    for action in ("acknowledge", "resolve"):
        for csrf in ("", "not-the-token"):
            answer = operator.http.post(f"/ui/alerts/{alert_id}/{action}", data={"csrf": csrf})
            assert answer.status_code == 403
            assert "security token" in answer.text
    assert alerts.get_alert(ui.platform, alert_id).status is AlertStatus.OPEN


def test_a_script_in_an_alert_message_is_shown_as_text(ui: Ui) -> None:
    alert_id = raise_alert(ui, AlertCategory.PLATFORM, "<script>alert(1)</script> conflict")
    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get("/ui/alerts").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; conflict" in alert_row(page, alert_id)


def test_the_header_counts_open_alerts_on_every_page(ui: Ui) -> None:
    first = raise_alert(ui, AlertCategory.ENGINE, "one")
    raise_alert(ui, AlertCategory.ENGINE, "two")
    viewer = ui.signed_in(TokenRole.VIEWER)

    def counted() -> str:
        page = viewer.http.get("/ui/definitions").text
        found = re.search(r'id="nav-open-alerts"[^>]*>(\d+)</span>', page)
        assert found is not None
        return found.group(1)

    assert counted() == "2"
    alerts.acknowledge(ui.platform, first, actor="operator:someone")
    assert counted() == "1"  # acknowledged is no longer open


def test_the_category_names_are_translated(ui: Ui) -> None:
    raise_alert(ui, AlertCategory.QUEUE_QUOTA, "queued for an hour")
    viewer = ui.signed_in(TokenRole.VIEWER)
    viewer.http.cookies.set("veritask_lang", "zh")
    page = viewer.http.get("/ui/alerts").text
    assert "<h2>队列与配额" in page
    assert "未处理" in page
    assert "queued for an hour" in page  # the message is data: shown as raised


def test_the_alert_stream_says_when_an_alert_changed(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    page = viewer.http.get("/ui/alerts").text
    live = re.search(r'data-live-stream="(/ui/live\?alerts=1&amp;since=(\d+))"', page)
    assert live is not None
    since = int(live.group(2))
    alert_id = raise_alert(ui, AlertCategory.ENGINE, "the engine is silent")
    raised = alerts.count_alerts(ui.platform).changes
    assert raised > since
    alerts.acknowledge(ui.platform, alert_id, actor="operator:someone")
    assert alerts.count_alerts(ui.platform).changes > raised  # acknowledging is a change too
    with viewer.http.stream("GET", f"/ui/live?alerts=1&since={since}") as stream:
        seen = ""
        for chunk in stream.iter_text():
            seen += chunk
            if "event: changed" in seen:
                break
    assert re.search(r"id: (\d+)\nevent: changed", seen)
    assert f"id: {alerts.count_alerts(ui.platform).changes}\n" in seen

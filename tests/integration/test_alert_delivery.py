"""Webhook delivery to a real local HTTP server: signed, retried after a 500, every attempt
recorded; routed by owner (on SQLite and PostgreSQL)."""

from __future__ import annotations

import hmac
import json
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from veritask.core import alert_messages, phrasebook
from veritask.core.states import TriggerKind
from veritask.ledger import alerts, dialects, schema
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import triggers
from veritask.services import alert_delivery
from veritask.services.platform import Platform

SECRET = "s3cret"
OWNED = """
name: owned
owner: data-platform
tasks:
  greet: {run: "true"}
"""


class Receiver(ThreadingHTTPServer):
    """Answers the statuses in ``answers`` in turn (then 200) and keeps what it got."""

    def __init__(self, answers: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers
        self.received: list[tuple[dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((dict(self.headers.items()), body))
        status = self.server.answers.pop(0) if self.server.answers else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver([500])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def platform(database_url: str, tmp_path: Path) -> Iterator[Platform]:
    opened = Platform.open(database_url, tmp_path)
    try:
        yield opened
    finally:
        opened.close()


def _alert(platform: Platform) -> None:
    triggers.apply_definition(platform.ledger, OWNED)
    run_id = triggers.trigger(
        platform.ledger, name="owned", kind=TriggerKind.MANUAL, actor="api"
    ).run_id
    alerts.raise_alert(
        platform.ledger,
        category=AlertCategory.RECONCILIATION,
        dedup_key="lost:1",
        message="attempt 1 is LOST",
        evidence={"state": "LOST"},
        run_id=run_id,
    )


def test_a_failed_delivery_is_retried_and_every_attempt_recorded(
    platform: Platform, receiver: Receiver
) -> None:
    _alert(platform)
    settings = alert_delivery.WebhookSettings(
        owner_urls={"DATA_PLATFORM": receiver.url}, secret=SECRET, first_backoff=timedelta()
    )
    with httpx.Client() as http:
        assert alert_delivery.deliver_due(platform, settings, http) == 1  # the receiver says 500
        assert alert_delivery.deliver_due(platform, settings, http) == 1  # then 200
        assert alert_delivery.deliver_due(platform, settings, http) == 0  # delivered: done

    assert len(receiver.received) == 2
    for headers, body in receiver.received:
        timestamp = headers["X-Veritask-Timestamp"]
        expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, "sha256")
        assert hmac.compare_digest(
            headers["X-Veritask-Signature"], "sha256=" + expected.hexdigest()
        )
    sent = json.loads(receiver.received[-1][1])
    assert sent["alert"]["owner"] == "data-platform"
    assert sent["alert"]["category"] == "reconciliation"
    assert sent["delivery_attempt"] == 2
    d = schema.alert_deliveries.c
    with dialects.read_transaction(platform.engine) as connection:
        attempts = connection.execute(
            sa.select(d.attempt_no, d.status_code, d.delivered, d.target).order_by(d.attempt_no)
        ).all()
        state = connection.execute(sa.select(schema.alerts.c.delivery_state)).scalar_one()
    assert [tuple(row) for row in attempts] == [
        (1, 500, False, receiver.url),
        (2, 200, True, receiver.url),
    ]
    assert state == "delivered"


def test_a_tampered_body_does_not_match_its_signature() -> None:
    signature = alert_delivery.sign(SECRET, "1700000000", b'{"alert": 1}')
    assert signature != alert_delivery.sign(SECRET, "1700000000", b'{"alert": 2}')
    assert signature != alert_delivery.sign("other", "1700000000", b'{"alert": 1}')


def test_delivery_gives_up_after_its_attempts_and_unrouted_alerts_are_marked(
    platform: Platform, receiver: Receiver
) -> None:
    _alert(platform)
    receiver.answers[:] = [500, 500, 500]
    failing = alert_delivery.WebhookSettings(
        default_url=receiver.url, max_attempts=2, first_backoff=timedelta()
    )
    with httpx.Client() as http:
        alert_delivery.deliver_due(platform, failing, http)
        alert_delivery.deliver_due(platform, failing, http)
        assert alert_delivery.deliver_due(platform, failing, http) == 0
    with dialects.read_transaction(platform.engine) as connection:
        assert connection.execute(sa.select(schema.alerts.c.delivery_state)).scalar_one() == (
            "failed"
        )
    assert "X-Veritask-Signature" not in receiver.received[0][0], "no secret: unsigned"

    alerts.raise_alert(
        platform.ledger,
        category=AlertCategory.PLATFORM,
        dedup_key="platform:other",
        message="no owner",
        evidence={},
    )
    with httpx.Client() as http:
        alert_delivery.deliver_due(platform, alert_delivery.WebhookSettings(), http)
    with dialects.read_transaction(platform.engine) as connection:
        states = connection.execute(
            sa.select(schema.alerts.c.delivery_state).order_by(schema.alerts.c.id)
        ).scalars()
        assert list(states) == ["failed", "unrouted"]


def test_owner_variables_and_backoff() -> None:
    settings = alert_delivery.WebhookSettings.from_environment(
        {
            "VERITASK_ALERT_WEBHOOK_URL": "http://all",
            "VERITASK_ALERT_WEBHOOK_URL_DATA_PLATFORM": "http://dp",
        }
    )
    assert settings.target_for("data-platform") == "http://dp"
    assert settings.target_for("finance") == "http://all"
    assert settings.target_for(None) == "http://all"
    assert settings.backoff(1) == timedelta(seconds=10)
    assert settings.backoff(3) == timedelta(seconds=40)
    assert settings.backoff(20) == timedelta(minutes=10)


def test_a_run_late_for_its_expected_finish_raises_one_deadline_alert(
    platform: Platform,
) -> None:
    from veritask.ledger.ledger import Ledger
    from veritask.services import deadlines

    triggers.apply_definition(platform.ledger, OWNED + "expected_finish: 2h\n")
    triggers.trigger(platform.ledger, name="owned", kind=TriggerKind.MANUAL, actor="api")
    assert deadlines.alert_late_runs(platform) == 0, "not late yet"

    later = platform.now() + timedelta(hours=2, seconds=1)
    late = Platform(Ledger(platform.engine, clock=lambda: later), platform.home)
    assert deadlines.alert_late_runs(late) == 1
    assert deadlines.alert_late_runs(late) == 0, "deduplicated per run"
    a = schema.alerts.c
    with dialects.read_transaction(platform.engine) as connection:
        row = connection.execute(sa.select(a.category, a.owner, a.message, a.evidence)).one()
    assert (row.category, row.owner) == ("deadline", "data-platform")
    # Stored in English as before; the web UI reads it back by its phrase.
    due = row.evidence["due"]
    assert row.message == f"the run was expected to finish by {due} and is still active"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", due)
    assert phrasebook.match(row.message) == (alert_messages.DEADLINE, {"due": due})

"""``/metrics`` over HTTP: it parses, needs no token, and agrees with a history just recorded
(on SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.contract.test_apply_ledger import SUCCESS, acked, opened, report
from tests.integration.conftest import Api
from veritask.core.events import EventKind
from veritask.core.states import TriggerKind
from veritask.ledger import alerts, metric_values
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import triggers
from veritask.services import metrics

TWO_TASKS = """
name: measured
tasks:
  extract: {run: "true"}
  load: {run: "true", after: [extract]}
"""


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_a_scrape_parses_and_agrees_with_the_run_just_recorded(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "POSTGRES_SETTLE", timedelta())
    metric_values.PROCESS_TALLY.take()  # counts of earlier tests belong to their databases
    ledger = api.platform.ledger
    triggers.apply_definition(ledger, TWO_TASKS)
    run_id = triggers.trigger(ledger, name="measured", kind=TriggerKind.MANUAL, actor="api").run_id
    ids = api.instance_ids(run_id)
    for instance_id in ids.values():
        ledger.apply(opened(instance_id))
        ledger.apply(acked(instance_id))
        ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"}))
        ledger.apply(report(instance_id, EventKind.COMPLETED, 3, SUCCESS))
    last = report(ids["load"], EventKind.HEARTBEAT, 2, event_id="heartbeat-once")
    ledger.apply(last)
    ledger.apply(last)  # the same id again: a duplicate
    alerts.raise_alert(
        ledger,
        category=AlertCategory.ENGINE,
        dedup_key="engine:x",
        message="the engine did not confirm a stop",
        evidence={},
        run_id=run_id,
    )

    response = api.client(None).get("/metrics")

    assert response.status_code == 200, "no token is needed"
    assert response.headers["content-type"].startswith("text/plain")
    found = _samples(response.text)
    queue = (("definition", "measured"), ("phase", "queue"))
    assert found[("veritask_phase_seconds_count", queue)] == 2, "both instances ran"
    assert found[("veritask_phase_seconds_sum", queue)] == 2.0, "1 s queued each"

    def execution_bucket(bound: str) -> float:
        labels = (("definition", "measured"), ("le", bound), ("phase", "execution"))
        return found[("veritask_phase_seconds_bucket", labels)]

    assert execution_bucket("1.0") == 0, "2 s each"
    assert execution_bucket("5.0") == 2
    completed = (("kind", "completed"), ("outcome", "applied"))
    assert found[("veritask_events_total", completed)] == 2
    duplicate = (("kind", "heartbeat"), ("outcome", "duplicate"))
    assert found[("veritask_events_total", duplicate)] == 1
    assert found[("veritask_alerts_open", (("category", "engine"), ("status", "open")))] == 1
    assert found[("veritask_instances", (("state", "RUNNING"),))] == 0
    assert found[("veritask_schedulers_alive", ())] == 0
    # No label anywhere names a run, an instance or an attempt.
    assert run_id not in response.text
    assert all(instance_id not in response.text for instance_id in ids.values())

    again = _samples(api.client(None).get("/metrics").text)
    assert again[("veritask_phase_seconds_count", queue)] == 2, "an instance is observed once"
    assert again[("veritask_events_total", completed)] == 2

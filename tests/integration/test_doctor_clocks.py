"""``doctor``'s clock check per worker host: a host whose reports claim to happen after the
platform learned of them has a clock ahead, and it is named."""

from __future__ import annotations

import uuid
from datetime import timedelta

from tests.integration.conftest import (
    HELLO,
    Api,
    now,
    open_attempt,
    report,
    worker_event,
)
from veritask.core.jsontypes import JSONObject
from veritask.execution import wire
from veritask.services import doctor

OVERLAPPING = HELLO + "concurrency: allow\n"


def _reports_from(api: Api, host: str, *, clock_offset: timedelta) -> None:
    """An attempt started on ``host`` and two heartbeats stamped by its (offset) clock."""
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    identity: JSONObject = {
        "worker": f"{host}:4242",
        "host": host,
        "pid": 4242,
        "pid_start_time": 1,
        "pgid": 4242,
    }
    reports: list[tuple[wire.WorkerEventKind, JSONObject]] = [
        ("started", identity),
        ("heartbeat", {}),
        ("heartbeat", {}),
    ]
    for seq, (kind, evidence) in enumerate(reports, start=1):
        event = worker_event(instance_id, attempt_no, token, seq, kind, evidence)
        # Seconds apart, as a worker beats (heartbeats closer than a second are coalesced).
        earlier = timedelta(seconds=2 * (len(reports) - seq))
        event["event_time"] = wire.format_time(now() + clock_offset - earlier)
        assert report(api, event, token).status_code == 200


def test_a_host_with_a_clock_ahead_is_named_and_fails_the_check(api: Api) -> None:
    api.apply(OVERLAPPING)
    _reports_from(api, "good-host", clock_offset=timedelta(0))
    _reports_from(api, "fast-host", clock_offset=timedelta(minutes=5))

    check = doctor.clock_skew(api.platform)

    assert check.status is doctor.Status.FAIL
    assert "fast-host" in check.detail
    hosts = check.figures["hosts"]
    assert isinstance(hosts, dict)
    assert set(hosts) == {"good-host", "fast-host"}
    fast, good = hosts["fast-host"], hosts["good-host"]
    assert isinstance(fast, dict) and isinstance(good, dict)
    assert (fast["reports"], good["reports"]) == (3, 3)
    assert isinstance(fast["max_ahead_seconds"], float)
    assert 290 < fast["max_ahead_seconds"] < 310
    assert isinstance(good["max_ahead_seconds"], float)
    assert good["max_ahead_seconds"] < 5


def test_hosts_with_sane_clocks_pass(api: Api) -> None:
    api.apply(OVERLAPPING)
    _reports_from(api, "host-a", clock_offset=timedelta(0))
    _reports_from(api, "host-b", clock_offset=timedelta(seconds=-1))

    check = doctor.clock_skew(api.platform)

    assert check.status is doctor.Status.OK, check.detail
    assert "2 host(s)" in check.detail

"""What an ``http`` wait may reach: the wait executor's GETs against real local HTTP servers.

An operator chooses a run's parameters, never a URL: a value fills a path segment or a query
value, percent-encoded, and the scheduler refuses to GET its own loopback, a link-local or a
metadata address (or to follow a redirect there) unless the platform allows it.
"""

from __future__ import annotations

import http.server
import ipaddress
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from veritask.definitions.model import WaitKind, WaitSpec
from veritask.execution import port, wait_http, waits, wire
from veritask.scheduling import dispatch, templates

EVERY = timedelta(seconds=1)  # the least a definition may write; the first check is at once


class _Server:
    """A real HTTP server on 127.0.0.1 that records the paths it was asked for."""

    def __init__(self, *, status: int = 200, location: str | None = None) -> None:
        self.paths: list[str] = []
        seen, answer, where = self.paths, status, location

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                self.send_response(answer)
                if where is not None:
                    self.send_header("Location", where)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    made: list[_Server] = []
    yield made
    for server in made:
        server.close()


def _serve(servers: list[_Server], **kwargs: str | int | None) -> _Server:
    server = _Server(**kwargs)  # type: ignore[arg-type]
    servers.append(server)
    return server


def _completed(outbox: Path, timeout: float = 10.0) -> wire.CompletedEvidence:
    give_up_at = time.monotonic() + timeout
    while time.monotonic() < give_up_at:
        for path in sorted(outbox.glob("*.json")):
            event = wire.decode(path.read_bytes())
            if event["kind"] == "completed":
                return event["evidence"]
        time.sleep(0.01)
    raise AssertionError(f"no completed report within {timeout}s")


def _check(
    tmp_path: Path, condition: port.WaitCondition, allow: wait_http.HttpAllow
) -> wire.CompletedEvidence:
    checker = waits.WaitExecutor(servers={}, http_allow=allow)
    outbox = tmp_path / "outbox"
    try:
        checker.submit(
            spec=port.AttemptSpec(
                instance_id="i-wait",
                attempt_no=1,
                attempt_token="token-1",
                task=condition,
                callback=port.OutboxCallback(outbox),
            )
        )
        return _completed(outbox)
    finally:
        checker.close()


def _condition(url: str, params: dict[str, str] | None = None) -> port.WaitCondition:
    """The condition the scheduler hands the checker for a wait written as ``url``."""
    values = templates.context(run_id="r-1", logical_time=None, params=params or {})
    spec = WaitSpec(kind=WaitKind.HTTP, target=url, every=EVERY, timeout=timedelta(seconds=5))
    return dispatch._wait_condition(spec, {}, values)


LOOPBACK = wait_http.HttpAllow.parse("127.0.0.1")


def test_a_value_fills_only_its_path_segment_and_its_query_value(
    tmp_path: Path, servers: list[_Server]
) -> None:
    server = _serve(servers)
    url = f"http://127.0.0.1:{server.port}/exports/{{{{ params.name }}}}/ready?day={{{{ ds }}}}"
    evil = {"name": "../../admin/token?x=1#", "ds": "1&admin=true"}
    condition = _condition(url.replace("{{ ds }}", "{{ params.ds }}"), evil)
    evidence = _check(tmp_path, condition, LOOPBACK)
    assert evidence["exit_code"] == 0
    assert server.paths == [
        "/exports/..%2F..%2Fadmin%2Ftoken%3Fx%3D1%23/ready?day=1%26admin%3Dtrue"
    ]


@pytest.mark.parametrize("value", ["..", "."])
def test_a_value_that_would_step_up_the_path_is_refused_before_any_get(value: str) -> None:
    with pytest.raises(ValueError, match="never a step up"):
        _condition("http://127.0.0.1:9/exports/{{ params.name }}/ready", {"name": value})


def test_a_wait_to_the_schedulers_loopback_fails_at_once_unless_the_platform_allows_it(
    tmp_path: Path, servers: list[_Server]
) -> None:
    server = _serve(servers)
    url = f"http://127.0.0.1:{server.port}/api/admin"
    evidence = _check(tmp_path / "refused", _condition(url), wait_http.HttpAllow())
    assert evidence["error_category"] == "task_error"
    message = evidence.get("error_message", "")
    assert "loopback" in message and wait_http.ENV in message, message
    assert server.paths == []  # not one request
    allowed = _check(tmp_path / "allowed", _condition(url), LOOPBACK)
    assert allowed["exit_code"] == 0
    assert server.paths == ["/api/admin"]


def test_a_redirect_to_a_refused_address_is_not_followed(
    tmp_path: Path, servers: list[_Server]
) -> None:
    inside = _serve(servers)
    outside = _serve(servers, status=302, location=f"http://127.0.0.1:{inside.port}/secret")
    # The wait's own host is allowed by its name; the redirect's address is not.
    allow = wait_http.HttpAllow.parse("localhost")
    evidence = _check(tmp_path, _condition(f"http://localhost:{outside.port}/ready"), allow)
    assert evidence["error_category"] == "task_error"
    assert "a redirect from" in evidence.get("error_message", "")
    assert outside.paths == ["/ready"]
    assert inside.paths == []


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
    ],
)
def test_loopback_link_local_and_metadata_addresses_are_refused(address: str, why: str) -> None:
    def resolve(host: str, port: int) -> list[str]:
        return [address]

    with pytest.raises(wait_http.Refused, match=why):
        wait_http.check("http://status.example/ready", wait_http.HttpAllow(), resolve)
    network = wait_http.HttpAllow.parse(f"{address}/128" if ":" in address else f"{address}/32")
    wait_http.check("http://status.example/ready", network, resolve)
    wait_http.check(
        "http://status.example/ready", wait_http.HttpAllow.parse("Status.Example"), resolve
    )


@pytest.mark.parametrize("address", ["10.1.2.3", "192.168.1.10", "93.184.216.34", "2001:db8::1"])
def test_other_addresses_are_reached_without_a_setting(address: str) -> None:
    def resolve(host: str, port: int) -> list[str]:
        return [address]

    wait_http.check("https://x.example/", wait_http.HttpAllow(), resolve)


def test_the_allow_setting_is_hosts_addresses_and_networks_comma_separated() -> None:
    allow = wait_http.HttpAllow.from_environment(
        {wait_http.ENV: " localhost, 127.0.0.1 ,::1,[fe80::1], 10.0.0.0/8,,"}
    )
    assert allow.hosts == frozenset({"localhost"})
    assert ipaddress.ip_address("10.9.9.9") in allow.networks[-1]
    assert len(allow.networks) == 4
    with pytest.raises(ValueError, match=f"{wait_http.ENV}: 'http://x' is not a host name"):
        wait_http.HttpAllow.parse("localhost,http://x")


def test_a_scheduler_with_a_bad_allow_setting_refuses_to_start(tmp_path: Path) -> None:
    # Read once when the scheduler starts, before the database is touched: a usage error.
    environ = {**os.environ, wait_http.ENV: "localhost,not a host"}
    started = subprocess.run(
        [sys.executable, "-m", "veritask.scheduling", "--home", str(tmp_path)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2
    assert f"{wait_http.ENV}: 'not a host' is not a host name" in started.stderr
    assert not (tmp_path / "veritask.db").exists()

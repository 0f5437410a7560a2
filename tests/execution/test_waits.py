"""The wait executor on its own: conditions checked on a heap, reports in an outbox.

Every condition is real (a file, a local HTTP server, a PostgreSQL database, a callable); the
reports are the files the scheduler would read. Intervals are short so that checks play out in
a fraction of a second; nothing sleeps to wait, the tests poll with a deadline.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from tests.conftest import PostgresServer
from veritask.execution import port, wait_http, waits, wire
from veritask.execution.sql import connections

_T = TypeVar("_T")
FAST = timedelta(milliseconds=20)
#: Flipped by tests: what ``ready`` answers.
READY: dict[str, bool] = {}


def ready(table: str) -> bool:
    """The callable a ``call`` wait checks."""
    return READY.get(table, False)


#: Set by a test to let ``stuck`` return.
UNSTUCK = threading.Event()


def stuck() -> bool:
    """A callable that does not answer until the test lets it."""
    UNSTUCK.wait(30)
    return True


def eventually(condition: Callable[[], _T | None], timeout: float = 10.0) -> _T:
    give_up_at = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > give_up_at:
            raise AssertionError(f"not reached within {timeout}s")
        time.sleep(0.01)


def spec(
    outbox: Path,
    condition: port.WaitCondition,
    *,
    instance_id: str = "i-wait",
    beat: timedelta = timedelta(seconds=60),
) -> port.AttemptSpec:
    return port.AttemptSpec(
        instance_id=instance_id,
        attempt_no=1,
        attempt_token="token-1",
        task=condition,
        callback=port.OutboxCallback(outbox),
        env={"VERITASK_RUN_ID": "r-1", "VERITASK_TASK": "arrive", "VERITASK_DEFINITION": "d"},
        heartbeat_interval=beat,
    )


def path_wait(
    path: Path,
    *,
    timeout: timedelta = timedelta(seconds=30),
    every: timedelta = FAST,
    skip_on_timeout: bool = False,
    expected: timedelta | None = None,
    since: datetime | None = None,
) -> port.WaitCondition:
    return port.WaitCondition(
        port.Condition.PATH,
        str(path),
        every,
        timeout,
        skip_on_timeout=skip_on_timeout,
        expected=expected,
        since=since,
    )


def reports(outbox: Path) -> list[wire.WorkerEvent]:
    found = [wire.decode(p.read_bytes()) for p in sorted(outbox.glob("*.json"))]
    return sorted(found, key=lambda e: e["seq"])


def completed(outbox: Path) -> wire.CompletedEvidence | None:
    for event in reports(outbox):
        if event["kind"] == "completed":
            return event["evidence"]
    return None


def seen(outbox: Path) -> list[str]:
    return [str(e["evidence"].get("seen")) for e in reports(outbox) if e["kind"] == "progress"]


def checks(executor: waits.WaitExecutor, external_id: str) -> int:
    count = executor.describe(external_id=external_id).details["checks"]
    return count if isinstance(count, int) else 0


@pytest.fixture
def executor() -> Iterator[waits.WaitExecutor]:
    # The HTTP servers of these tests listen on loopback, which a wait reaches only when the
    # platform allows it (tests/execution/test_wait_http.py).
    checker = waits.WaitExecutor(servers={}, http_allow=wait_http.HttpAllow.parse("127.0.0.1"))
    yield checker
    checker.close()


def test_a_path_wait_succeeds_when_the_file_appears(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox, target = tmp_path / "outbox", tmp_path / "data" / "_SUCCESS"
    submission = executor.submit(spec=spec(outbox, path_wait(target)))
    assert submission.created
    assert not executor.submit(spec=spec(outbox, path_wait(target))).created
    eventually(lambda: seen(outbox))
    running = executor.describe(external_id=submission.external_id)
    assert running.engine_state is port.EngineState.RUNNING
    target.parent.mkdir()
    target.write_text("")
    evidence = eventually(lambda: completed(outbox))
    assert evidence["exit_code"] == 0 and evidence["error_category"] == "none"
    output = evidence["output"]
    assert isinstance(output, dict) and "exists (file)" in str(output["seen"])
    kinds = [e["kind"] for e in reports(outbox)]
    assert kinds[0] == "started" and kinds[-1] == "completed"
    assert seen(outbox)[0] == f"no such file or directory {target}"
    ended = executor.describe(external_id=submission.external_id)
    assert ended.engine_state is port.EngineState.SUCCEEDED
    assert ended.details["checks"] == output["checks"]
    assert executor.held() == 0


def test_checks_that_see_the_same_are_recorded_once_with_their_count(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox, target = tmp_path / "outbox", tmp_path / "flag"
    submission = executor.submit(spec=spec(outbox, path_wait(target)))
    eventually(lambda: checks(executor, submission.external_id) >= 20)
    assert seen(outbox) == [f"no such file or directory {target}"]  # 20 checks, one record
    target.mkdir()
    evidence = eventually(lambda: completed(outbox))
    progress = [e["evidence"] for e in reports(outbox) if e["kind"] == "progress"]
    assert len(progress) == 2
    last = progress[-1]
    assert last.get("seen") == f"{target} exists (directory)"
    checks_since = last.get("checks_since")
    assert isinstance(checks_since, int) and checks_since >= 20
    assert evidence["exit_code"] == 0


def test_a_wait_fails_at_its_timeout_saying_what_it_saw(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox, target = tmp_path / "outbox", tmp_path / "never"
    wait = path_wait(target, timeout=timedelta(milliseconds=200))
    submission = executor.submit(spec=spec(outbox, wait))
    evidence = eventually(lambda: completed(outbox))
    assert evidence["error_category"] == "task_error" and evidence["exit_code"] is None
    message = evidence.get("error_message", "")
    assert "did not hold within 0:00:00.200000" in message
    assert f"no such file or directory {target}" in message
    observed = executor.describe(external_id=submission.external_id)
    assert observed.engine_state is port.EngineState.FAILED
    assert observed.error_category is port.ErrorCategory.TASK_ERROR


def test_a_wait_that_skips_on_timeout_completes_skipped(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox = tmp_path / "outbox"
    wait = path_wait(tmp_path / "never", timeout=timedelta(milliseconds=100), skip_on_timeout=True)
    executor.submit(spec=spec(outbox, wait))
    evidence = eventually(lambda: completed(outbox))
    assert evidence["error_category"] == "skipped" and evidence["exit_code"] == 99
    assert "error_message" not in evidence


def test_a_cancelled_wait_stops_checking_and_says_it_ended(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox, target = tmp_path / "outbox", tmp_path / "flag"
    submission = executor.submit(spec=spec(outbox, path_wait(target)))
    eventually(lambda: seen(outbox))
    executor.cancel(external_id=submission.external_id)
    observed = executor.describe(external_id=submission.external_id)
    assert observed.ended and observed.error_category is port.ErrorCategory.CANCELLED
    checks = observed.details["checks"]
    evidence = completed(outbox)
    assert evidence is not None and evidence["error_category"] == "cancelled"
    target.write_text("")
    time.sleep(0.2)  # a check that still ran would have reported the file
    assert executor.describe(external_id=submission.external_id).details["checks"] == checks
    assert [e["kind"] for e in reports(outbox)].count("completed") == 1
    executor.cleanup(external_id=submission.external_id)


def test_an_unknown_wait_is_running_so_that_it_is_resumed_from_its_start(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox = tmp_path / "outbox"
    unknown = executor.describe(external_id="wait:i-wait/1")
    assert unknown.engine_state is port.EngineState.RUNNING and not unknown.details["held"]
    began = datetime.now(UTC) - timedelta(hours=1)
    wait = path_wait(tmp_path / "never", timeout=timedelta(minutes=30), since=began)
    assert executor.resume(spec=spec(outbox, wait))
    evidence = eventually(lambda: completed(outbox))
    assert not executor.resume(spec=spec(outbox, wait))  # ended here: describe says how
    # Its timeout counted from an hour ago: the first check after the restart ends it.
    assert "did not hold within 0:30:00" in evidence.get("error_message", "")
    assert "started" not in [e["kind"] for e in reports(outbox)]  # it had started before


def test_heartbeats_keep_the_lease_while_nothing_changes(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox = tmp_path / "outbox"
    wait = path_wait(tmp_path / "never", every=timedelta(seconds=30))
    executor.submit(spec=spec(outbox, wait, beat=timedelta(milliseconds=50)))
    eventually(lambda: [e for e in reports(outbox) if e["kind"] == "heartbeat"][2:])
    assert len(seen(outbox)) == 1  # one check in all that time


def test_progress_and_heartbeats_are_handed_over_and_the_rest_written_to_the_outbox(
    tmp_path: Path,
) -> None:
    handed: list[wire.WorkerEvent] = []
    checker = waits.WaitExecutor(servers={}, hand_over=handed.append)
    outbox, target = tmp_path / "outbox", tmp_path / "flag"
    try:
        checker.submit(spec=spec(outbox, path_wait(target), beat=timedelta(milliseconds=50)))
        eventually(lambda: [e for e in handed if e["kind"] == "heartbeat"][2:])
        target.write_text("")
        eventually(lambda: completed(outbox))
    finally:
        checker.close()
    assert [e["kind"] for e in reports(outbox)] == ["started", "completed"]
    assert {e["kind"] for e in handed} == {"progress", "heartbeat"}
    progress = [e["evidence"] for e in handed if e["kind"] == "progress"]
    assert progress[0].get("seen") == f"no such file or directory {target}"
    assert progress[-1].get("seen") == f"{target} exists (file)"
    # Numbered like the files, so that the ledger orders them among the started and completed.
    numbers = [e["seq"] for e in reports(outbox)[:1] + handed + reports(outbox)[1:]]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert all(e["attempt_token"] == "token-1" for e in handed)


def test_a_closed_checker_lets_go_of_its_waits_and_resumes_them_when_asked(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox, target = tmp_path / "outbox", tmp_path / "flag"
    submission = executor.submit(spec=spec(outbox, path_wait(target)))
    eventually(lambda: seen(outbox))
    executor.close()
    assert executor.held() == 0
    let_go = executor.describe(external_id=submission.external_id)
    assert let_go.engine_state is port.EngineState.RUNNING and not let_go.details["held"]
    # Closed is not dead: a loop started again resumes the wait on the same executor.
    began = datetime.now(UTC)
    assert executor.resume(spec=spec(outbox, path_wait(target, since=began)))
    target.write_text("")
    evidence = eventually(lambda: completed(outbox))
    assert evidence["exit_code"] == 0


def test_a_wait_past_its_expected_duration_is_told_once(tmp_path: Path) -> None:
    told: list[waits.Overdue] = []
    checker = waits.WaitExecutor(servers={}, overdue=told.append)
    try:
        wait = path_wait(tmp_path / "never", expected=timedelta(milliseconds=100))
        submission = checker.submit(spec=spec(tmp_path / "outbox", wait))
        eventually(lambda: told)
        eventually(lambda: checks(checker, submission.external_id) > 10)
        assert len(told) == 1
        assert (told[0].run_id, told[0].task, told[0].expected) == (
            "r-1",
            "arrive",
            timedelta(milliseconds=100),
        )
        assert "no such file" in told[0].seen
    finally:
        checker.close()


class _Answers(http.server.BaseHTTPRequestHandler):
    status = 503

    def do_GET(self) -> None:
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_http_wait_holds_when_the_url_answers_2xx(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    class Answers(_Answers):
        status = 503

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ready"
        outbox = tmp_path / "outbox"
        every = timedelta(milliseconds=200)  # also the check's time limit
        condition = port.WaitCondition(port.Condition.HTTP, url, every, timedelta(seconds=30))
        executor.submit(spec=spec(outbox, condition))
        eventually(lambda: seen(outbox))
        assert seen(outbox)[0] == f"HTTP 503 from {url}"
        Answers.status = 204
        evidence = eventually(lambda: completed(outbox))
        assert evidence["exit_code"] == 0
        assert seen(outbox)[-1] == f"HTTP 204 from {url}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_call_wait_holds_when_the_callable_returns_something_truthy(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox = tmp_path / "outbox"
    condition = port.WaitCondition(
        port.Condition.CALL,
        f"{__name__}:ready",
        FAST,
        timedelta(seconds=30),
        params={"table": "orders"},
    )
    executor.submit(spec=spec(outbox, condition))
    eventually(lambda: seen(outbox))
    assert seen(outbox)[0] == f"{__name__}:ready returned False"
    READY["orders"] = True
    try:
        evidence = eventually(lambda: completed(outbox))
    finally:
        READY.clear()
    assert evidence["exit_code"] == 0
    assert seen(outbox)[-1] == f"{__name__}:ready returned True"


@pytest.mark.postgres
def test_an_sql_wait_holds_when_the_statement_returns_a_row(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    name = postgres_server.create_database("vt_wait")
    url = connections.libpq_url(postgres_server.url_for(name))
    checker = waits.WaitExecutor(servers={"warehouse": url})
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE loads (day date)")
        outbox = tmp_path / "outbox"
        condition = port.WaitCondition(
            port.Condition.SQL,
            "SELECT 1 FROM loads WHERE day = $1",
            timedelta(milliseconds=200),  # also the check's time limit: room to connect
            timedelta(seconds=30),
            connection="warehouse",
            parameters=("2026-12-01",),
        )
        checker.submit(spec=spec(outbox, condition))
        eventually(lambda: seen(outbox))
        assert seen(outbox)[0] == "0 rows from warehouse"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO loads VALUES ('2026-12-01')")
        evidence = eventually(lambda: completed(outbox))
        assert evidence["exit_code"] == 0
        assert seen(outbox)[-1] == "1 row from warehouse"
    finally:
        checker.close()
        postgres_server.drop_database(name)


def test_a_condition_that_cannot_be_checked_is_seen_as_not_holding(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox = tmp_path / "outbox"
    condition = port.WaitCondition(
        port.Condition.SQL, "SELECT 1", FAST, timedelta(seconds=30), connection="nowhere"
    )
    executor.submit(spec=spec(outbox, condition))
    eventually(lambda: seen(outbox))
    assert "no SQL connection named 'nowhere'" in str(seen(outbox)[0])


def test_a_check_that_does_not_answer_is_recorded_and_does_not_hold_off_the_timeout(
    tmp_path: Path, executor: waits.WaitExecutor
) -> None:
    outbox = tmp_path / "outbox"
    every = timedelta(milliseconds=100)  # also the check's time limit
    condition = port.WaitCondition(
        port.Condition.CALL, f"{__name__}:stuck", every, timedelta(milliseconds=400)
    )
    UNSTUCK.clear()
    try:
        executor.submit(spec=spec(outbox, condition))
        evidence = eventually(lambda: completed(outbox), timeout=5)
    finally:
        UNSTUCK.set()
    assert evidence["error_category"] == "task_error"
    assert seen(outbox)[0] == "check 1 has not answered in 0.1s"
    assert "did not hold within 0:00:00.400000 (0 checks)" in evidence.get("error_message", "")

"""An attempt's log over HTTP: tail, follow by offset, search; only the attempt's own log."""

from __future__ import annotations

import uuid
from pathlib import Path

import sqlalchemy as sa

from tests.integration.conftest import HELLO, Api, completed, open_attempt, report, started
from veritask.execution import layout
from veritask.ledger import schema
from veritask.services.tokens import TokenRole

LINES = "".join(f"line {n} {'needle' if n % 10 == 0 else 'hay'}\n" for n in range(1, 101))


def _own_log(api: Api, instance_id: str, attempt_no: int) -> Path:
    """Where the worker writes the attempt's log, below the server's VERITASK_HOME."""
    executor = layout.ExecutorHome(api.platform.home / "executor")
    return executor.attempt(instance_id, attempt_no).log


def _finished_with_log(api: Api, text: str, source: str = HELLO) -> str:
    """An instance whose attempt 1 wrote ``text`` to its own log and completed."""
    api.apply(source)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    log = _own_log(api, instance_id, attempt_no)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(text)
    report(api, started(instance_id, attempt_no, token), token)
    event = completed(instance_id, attempt_no, token, seq=2, log_path=str(log))
    assert report(api, event, token).status_code == 200
    return instance_id


def test_the_tail_of_an_ended_attempt(api: Api) -> None:
    instance_id = _finished_with_log(api, LINES)
    log = _own_log(api, instance_id, 1)
    chunk = api.http.get(f"/api/v2/instances/{instance_id}/logs", params={"tail": 20}).json()
    assert chunk["text"] == LINES[-20:]
    assert chunk["size"] == len(LINES)
    assert chunk["offset"] == len(LINES) - 20
    assert chunk["ended"] is True
    assert chunk["attempt_no"] == 1
    assert chunk["log_location"] == str(log.resolve())
    whole = api.http.get(f"/api/v2/instances/{instance_id}/logs").json()
    assert whole["text"] == LINES
    assert whole["truncated"] is False


def test_following_by_offset_and_searching(api: Api) -> None:
    instance_id = _finished_with_log(api, LINES)
    path = f"/api/v2/instances/{instance_id}/logs"
    first = api.http.get(path, params={"offset": 0, "limit": 100}).json()
    assert first["text"] == LINES[:100]
    assert first["truncated"] is True
    second = api.http.get(path, params={"offset": first["next_offset"]}).json()
    assert first["text"] + second["text"] == LINES
    assert second["next_offset"] == len(LINES)
    found = api.http.get(path, params={"search": "NEEDLE"}).json()
    assert found["text"].splitlines() == [f"line {n} needle" for n in range(10, 101, 10)]
    capped = api.http.get(path, params={"search": "needle", "limit": 30}).json()
    assert capped["truncated"] is True
    assert capped["text"].count("\n") == 2


def test_a_running_local_attempt_is_read_from_its_attempt_directory(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token, executor="local")
    path = f"/api/v2/instances/{instance_id}/logs"
    nothing_yet = api.http.get(path).json()
    assert (nothing_yet["text"], nothing_yet["size"], nothing_yet["ended"]) == ("", 0, False)
    attempt = layout.ExecutorHome(api.platform.home / "executor").attempt(instance_id, attempt_no)
    attempt.log.parent.mkdir(parents=True)
    attempt.log.write_text("started\n")
    assert api.http.get(path).json()["text"] == "started\n"


def test_an_executor_folder_linked_to_another_file_system_is_served(
    api: Api, tmp_path: Path
) -> None:
    # Operators may keep VERITASK_HOME/executor on a tmpfs, as a symlink (operations.md).
    target = tmp_path / "on-tmpfs"
    target.mkdir()
    (api.platform.home / "executor").symlink_to(target, target_is_directory=True)
    instance_id = _finished_with_log(api, LINES)
    assert _own_log(api, instance_id, 1).resolve().is_relative_to(target)
    chunk = api.http.get(f"/api/v2/instances/{instance_id}/logs", params={"tail": 10}).json()
    assert chunk["text"] == LINES[-10:]


def test_a_report_naming_another_file_is_refused_alerted_and_never_served(api: Api) -> None:
    admin_file = api.platform.home / "token"
    admin_file.write_text(f"{api.admin_token}\n")
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    forged = completed(instance_id, attempt_no, token, seq=2, log_path=str(admin_file))
    refused = report(api, forged, token)
    assert refused.status_code == 422
    assert "log_path" in refused.json()["detail"]
    with api.platform.engine.connect() as connection:
        kept = connection.execute(
            sa.select(schema.rejected_events.c.reason).where(
                schema.rejected_events.c.event_id == forged["event_id"]
            )
        ).scalar_one()
    assert "is not the log of attempt 1" in kept
    alerts = api.http.get("/api/v2/alerts").json()["items"]
    assert [a["instance_id"] for a in alerts if "log_path" in a["message"]] == [instance_id]
    viewer = api.client_with_role(TokenRole.VIEWER)
    chunk = viewer.get(f"/api/v2/instances/{instance_id}/logs").json()
    assert api.admin_token not in chunk["text"]
    searched = viewer.get(
        "/api/v2/logs/search", params={"text": api.admin_token[:12], "instance": instance_id}
    ).json()
    assert searched["matches"] == []


def test_a_link_planted_in_the_attempt_directory_is_not_followed(api: Api) -> None:
    admin_file = api.platform.home / "token"
    admin_file.write_text(f"{api.admin_token}\n")
    instance_id = _finished_with_log(api, "")
    log = _own_log(api, instance_id, 1)
    log.unlink()
    log.symlink_to(admin_file)
    chunk = api.http.get(f"/api/v2/instances/{instance_id}/logs").json()
    assert (chunk["text"], chunk["log_location"]) == ("", None)


def test_logs_of_unknown_things_are_404_and_bad_ranges_422(api: Api) -> None:
    assert api.http.get("/api/v2/instances/nope/logs").status_code == 404
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    assert api.http.get(f"/api/v2/instances/{instance_id}/logs").status_code == 404  # no attempt
    bad = api.http.get(f"/api/v2/instances/{instance_id}/logs", params={"offset": -1})
    assert bad.status_code == 422


def test_a_search_across_a_definition_names_run_task_attempt_and_line(api: Api) -> None:
    overlapping = HELLO + "concurrency: allow\n"
    one = _finished_with_log(api, LINES, overlapping)
    two = _finished_with_log(api, "nothing here\nthe NEEDLE again\n", overlapping)
    found = api.http.get(
        "/api/v2/logs/search", params={"text": "needle", "definition": "hello"}
    ).json()
    assert found["attempts_searched"] == 2
    assert found["truncated"] is False
    by_instance: dict[str, list[tuple[int, str]]] = {}
    for match in found["matches"]:
        assert (match["task"], match["attempt_no"]) == ("greet", 1)
        by_instance.setdefault(match["instance_id"], []).append((match["line_no"], match["line"]))
    assert by_instance[one] == [(n, f"line {n} needle") for n in range(10, 101, 10)]
    assert by_instance[two] == [(2, "the NEEDLE again")]
    run_of_two = api.http.get(f"/api/v2/instances/{two}").json()["run_id"]
    only_run = api.http.get(
        "/api/v2/logs/search", params={"text": "needle", "run": run_of_two}
    ).json()
    assert [m["instance_id"] for m in only_run["matches"]] == [two]
    capped = api.http.get(
        "/api/v2/logs/search", params={"text": "needle", "instance": one, "limit": 3}
    ).json()
    assert (len(capped["matches"]), capped["truncated"]) == (3, True)


def test_a_search_needs_exactly_one_known_scope(api: Api) -> None:
    api.apply(HELLO)
    path = "/api/v2/logs/search"
    neither = api.http.get(path, params={"text": "x"})
    assert neither.status_code == 422
    assert neither.json()["errors"][0]["field"] == "definition"
    both = api.http.get(path, params={"text": "x", "definition": "hello", "run": "r"})
    assert both.status_code == 422
    assert api.http.get(path, params={"text": "x", "definition": "nope"}).status_code == 404
    assert api.http.get(path, params={"text": "x", "run": "nope"}).status_code == 404
    assert api.http.get(path, params={"definition": "hello"}).status_code == 422  # no text

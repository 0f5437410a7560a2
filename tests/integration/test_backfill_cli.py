"""The backfill verbs and ``trigger`` under forbid, through the real CLI against the API."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import HELLO, Api
from tests.integration.test_backfills import DAILY, _finish
from veritask.cli import main
from veritask.core.states import RunExecutionState


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch) -> Api:
    monkeypatch.setenv("VERITASK_URL", api.url)
    monkeypatch.setenv("VERITASK_TOKEN", api.admin_token)
    return api


def test_backfill_dry_run_then_create_then_list_and_cancel(
    cli: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.apply(DAILY)
    span = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-04T00:00:00Z"]
    assert main.main(["backfill", "daily", *span, "--dry-run"]) == 0
    preview = capsys.readouterr().out
    assert preview.count("  create") == 3 and "(dry run)" in preview
    assert main.main(["backfill", "daily", *span, "--max-active", "3", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["created"] is True and made["backfill"]["progress"]["created"] == 3
    assert main.main(["backfill", "daily", *span, "--dry-run"]) == 0
    assert capsys.readouterr().out.count("skip: exists as ") == 3
    assert main.main(["backfills", "daily", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)["items"]
    assert listed["id"] == made["backfill"]["id"]
    assert main.main(["backfill-cancel", listed["id"]]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert main.main(["backfill-cancel", listed["id"]]) == 4


def test_backfill_takes_bare_dates_as_midnight_utc(
    cli: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.apply(DAILY)
    span = ["--from", "2026-01-01", "--to", "2026-01-03"]
    assert main.main(["backfill", "daily", *span, "--json"]) == 0
    made = json.loads(capsys.readouterr().out)["backfill"]
    assert (made["from"], made["to"]) == ("2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z")
    assert made["progress"]["intervals"] == 2


def test_backfill_dry_run_says_clear_for_a_failed_run(
    cli: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.apply(DAILY)
    span = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"]
    assert main.main(["backfill", "daily", *span, "--json"]) == 0
    [interval] = json.loads(capsys.readouterr().out)["backfill"]["intervals"]
    _finish(cli, interval["run_id"], RunExecutionState.FAILED)
    assert main.main(["backfill", "daily", *span, "--existing", "failed", "--dry-run"]) == 0
    assert f"clear: {interval['run_id']} (FAILED)" in capsys.readouterr().out


def test_backfill_refusals_have_their_exit_codes(
    cli: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.apply(HELLO)
    span = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-04T00:00:00Z"]
    assert main.main(["backfill", "hello", *span]) == 2
    assert "hello has no schedule" in capsys.readouterr().err
    assert main.main(["backfill", "nope", *span]) == 3
    assert main.main(["backfill", "hello", "--from", "2026-01-01", "--to", "x"]) == 2
    assert main.main(["backfill-cancel", "nope"]) == 3


def test_trigger_refused_by_forbid_exits_4_naming_the_active_run(
    cli: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.apply(HELLO)
    first = cli.trigger("hello")
    assert main.main(["trigger", "hello"]) == 4
    error = capsys.readouterr().err
    assert first in error and "forbid" in error and "409" in error
    runs = cli.http.get("/api/v2/runs", params={"definition": "hello"}).json()["items"]
    assert [r["id"] for r in runs] == [first]  # nothing CANCELLED left behind

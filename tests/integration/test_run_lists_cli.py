"""``veritask runs`` and its filters, through the CLI's own entry point against the API over
HTTP, on SQLite and PostgreSQL: the flags reach the API, ``--json`` prints its items, a bad
value exits 2 naming the parameter, an unknown definition exits 3."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.integration.conftest import Api
from tests.integration.test_run_lists import T0, Seeded, seeded
from veritask.cli import main as cli_main

__all__ = ["seeded"]  # the fixture, shared with the API's tests

#: ``veritask runs ARGS…``: its exit code, stdout and stderr.
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    monkeypatch.setenv("VERITASK_URL", api.url)
    monkeypatch.setenv("VERITASK_TOKEN", api.admin_token)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli_main.main(["runs", *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def _ids(out: str) -> list[str]:
    return [item["id"] for item in json.loads(out)]


def test_every_filter_flag_reaches_the_api(cli: Cli, seeded: Seeded) -> None:
    cases = [
        (["hello", "--state", "failed"], [seeded.backfilled]),
        (["--execution-state", "SUCCESS"], [seeded.api_run, seeded.scheduled]),
        (["--publication-state", "published"], [seeded.api_run]),
        (
            ["--trigger-kind", "BACKFILL", "--trigger-kind", "manual"],
            [seeded.manual, seeded.backfilled],
        ),
        (
            ["--logical-from", "2024-01-02T00:00:00Z", "--logical-to", "2024-01-03T00:00:00Z"],
            [seeded.backfilled],
        ),
        (["--created-from", (T0.replace(hour=3)).isoformat()], [seeded.api_run, seeded.manual]),
        (["--created-to", (T0.replace(hour=2)).isoformat()], [seeded.scheduled]),
        (["-q", "nightly"], [seeded.manual]),
        (["--search", "USERS"], [seeded.api_run]),
    ]
    for flags, expected in cases:
        code, out, err = cli(*flags, "--json")
        assert code == 0, (flags, err)
        assert _ids(out) == expected, flags


def test_limit_and_cursor_page_through_the_runs(cli: Cli, seeded: Seeded) -> None:
    code, out, err = cli("--limit", "3", "--json")
    assert code == 0
    assert _ids(out) == [seeded.api_run, seeded.manual, seeded.backfilled]
    hint = err.strip().splitlines()[-1]
    assert hint.startswith("more: --cursor ")
    code, out, err = cli("--limit", "3", "--cursor", hint.removeprefix("more: --cursor "), "--json")
    assert code == 0
    assert _ids(out) == [seeded.scheduled]
    assert "more:" not in err


def test_the_table_shows_the_filtered_runs(cli: Cli, seeded: Seeded) -> None:
    code, out, _ = cli("--trigger-kind", "schedule")
    assert code == 0
    assert seeded.scheduled in out
    assert seeded.backfilled not in out


def test_the_table_has_a_logical_time_column(cli: Cli, seeded: Seeded) -> None:
    code, out, _ = cli("hello")
    assert code == 0
    header = next(line for line in out.splitlines() if "DEFINITION" in line)
    assert "LOGICAL TIME (UTC)" in header
    row = next(line for line in out.splitlines() if seeded.backfilled in line)
    assert "2024-01-02 00:00:00" in row  # its logical time, beside its created time
    assert "2024-03-01 02:00:00" in row


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--state", "DONE"], "execution_state"),
        (["--publication-state", "shipped"], "publication_state"),
        (["--trigger-kind", "cron"], "trigger_kind"),
        (["--logical-from", "yesterday"], "logical_from"),
        (
            ["--created-from", "2024-01-02T00:00:00Z", "--created-to", "2024-01-01T00:00:00Z"],
            "created_to",
        ),
        (["--cursor", "nope"], "cursor"),
    ],
)
def test_a_bad_value_exits_2_naming_the_parameter(
    cli: Cli, seeded: Seeded, flags: list[str], named: str
) -> None:
    code, out, err = cli(*flags)
    assert code == 2, err
    assert named in err
    assert out == ""


def test_an_unknown_definition_exits_3(cli: Cli, seeded: Seeded) -> None:
    code, _, err = cli("no-such-definition", "--state", "SUCCESS")
    assert code == 3
    assert "no-such-definition" in err

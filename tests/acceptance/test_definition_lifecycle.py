"""``veritask disable``, ``enable`` and ``delete`` against a real ``veritask up``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.acceptance.conftest import Veritask, eventually

LONG = """\
name: retiring
tasks:
  nap: {run: "sleep 30"}
"""

SHORT = """\
name: retiring
tasks:
  say: {run: "echo new life"}
"""


def _lifecycles(veritask: Veritask, name: str) -> list[str]:
    return [d["lifecycle"] for d in veritask.cli_json("definitions") if d["name"] == name]


def _run(veritask: Veritask, run_id: str) -> Any:
    return veritask.cli_json("show", run_id)


def test_disable_enable_and_delete_with_their_exit_codes(
    veritask: Veritask, tmp_path: Path
) -> None:
    source = tmp_path / "retiring.yaml"
    source.write_text(LONG)
    assert veritask.cli("apply", "-f", str(source)).returncode == 0
    run_id = veritask.cli("trigger", "retiring").stdout.strip()
    eventually(
        lambda: _run(veritask, run_id)["instances"][0]["state"] == "RUNNING",
        what="the task to run",
    )

    disabled = veritask.cli("disable", "retiring")
    assert (disabled.returncode, disabled.stdout.strip()) == (0, "retiring: disabled")
    refused = veritask.cli("trigger", "retiring")
    assert refused.returncode == 4
    assert "retiring is disabled" in refused.stderr
    assert _run(veritask, run_id)["execution_state"] == "RUNNING"  # it goes on
    assert veritask.cli_json("enable", "retiring")["lifecycle"] == "active"

    deletion = veritask.cli_json("delete", "retiring")

    assert deletion["lifecycle"] == "deleting"
    assert deletion["cancelling_runs"] == [run_id]
    assert deletion["purge"] is False
    eventually(lambda: _lifecycles(veritask, "retiring") == ["deleted"], what="the soft delete")
    old = _run(veritask, run_id)
    assert old["execution_state"] == "CANCELLED"
    assert old["instances"][0]["attempts"][0]["state"] == "CANCELLED"
    assert veritask.cli("enable", "retiring").returncode == 4
    assert veritask.cli("disable", "nothing-by-this-name").returncode == 3
    assert veritask.cli("delete", "nothing-by-this-name").returncode == 3

    # The name is free again: a new definition; the old run stays readable.
    source.write_text(SHORT)
    applied = veritask.cli_json("apply", "-f", str(source))
    assert (applied["version"], applied["created"]) == (1, True)
    assert _lifecycles(veritask, "retiring") == ["active", "deleted"]
    purged = veritask.cli("delete", "retiring", "--purge-now")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == "retiring: purging; purge at once"
    eventually(lambda: _lifecycles(veritask, "retiring") == ["purged", "deleted"], what="the purge")
    assert _run(veritask, run_id)["execution_state"] == "CANCELLED"

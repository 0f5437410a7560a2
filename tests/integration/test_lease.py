"""The scheduler process of ``up`` and ``scheduler``: one per SQLite database, many on
PostgreSQL, and a clean stop that lets the next one start at once."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from veritask.ledger import errors, schema
from veritask.services import operations, runtime
from veritask.services.errors import SchedulerRefused
from veritask.services.platform import Platform
from veritask.services.runtime import SchedulerRuntime


def _rows(platform: Platform) -> int:
    with platform.engine.connect() as connection:
        count: int = connection.execute(
            sa.select(sa.func.count()).select_from(schema.schedulers)
        ).scalar_one()
    return count


def test_one_scheduler_per_sqlite_database_many_on_postgresql(
    database_url: str, database_kind: str, tmp_path: Path
) -> None:
    platform = Platform.open(database_url, tmp_path)
    first = SchedulerRuntime(platform, commit_base_url=None)
    second = SchedulerRuntime(platform, commit_base_url=None)
    first.start()
    try:
        assert _rows(platform) == 1
        if database_kind == "sqlite":
            with pytest.raises(SchedulerRefused, match="SQLite supports one scheduler"):
                second.start()
        else:
            second.start()
            assert _rows(platform) == 2
            second.stop()
    finally:
        first.stop()
    assert _rows(platform) == 0
    # Stopped cleanly: the next one starts at once.
    third = SchedulerRuntime(platform, commit_base_url=None)
    third.start()
    third.stop()
    platform.close()


@pytest.mark.parametrize(
    ("configured", "expected"),
    [(None, timedelta(days=90)), ("30d", timedelta(days=30)), ("off", None), ("OFF", None)],
)
def test_retention_is_on_by_default_and_can_be_turned_off(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    configured: str | None,
    expected: timedelta | None,
) -> None:
    if configured is None:
        monkeypatch.delenv(runtime.RETENTION_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(runtime.RETENTION_VARIABLE, configured)
    platform = Platform.open(database_url, tmp_path)
    try:
        assert SchedulerRuntime(platform, commit_base_url=None).retention == expected
    finally:
        platform.close()


def test_a_failed_retention_purge_is_tried_again_an_hour_later_not_every_pass(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(runtime.RETENTION_VARIABLE, raising=False)
    tries: list[bool] = []

    def refused(*_: object, **__: object) -> None:
        tries.append(True)
        raise errors.LedgerError("the purge permit does not match the enrolled one")

    monkeypatch.setattr(operations, "purge", refused)
    platform = Platform.open(database_url, tmp_path)
    try:
        keeper = SchedulerRuntime(platform, commit_base_url=None)
        keeper._purge_when_due()
        keeper._purge_when_due()  # the next housekeeping pass, seconds later
        assert len(tries) == 1
        assert keeper._purge_failed_at is not None
        keeper._purge_failed_at -= runtime.PURGE_RETRY
        keeper._purge_when_due()
        assert len(tries) == 2
    finally:
        platform.close()


def test_housekeeping_seals_the_chains_once_an_interval_with_a_key_it_makes(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.contract.test_audit import _story
    from veritask.ledger import audit, signing

    monkeypatch.delenv(runtime.SEAL_VARIABLE, raising=False)
    monkeypatch.delenv(signing.KEY_FILE_ENV, raising=False)
    platform = Platform.open(database_url, tmp_path)
    try:
        _story(platform.ledger)
        keeper = SchedulerRuntime(platform, commit_base_url=None)
        assert keeper.seal_interval == runtime.DEFAULT_SEAL_INTERVAL
        keeper._seal_when_due()
        _story(platform.ledger)
        keeper._seal_when_due()  # the next pass, seconds later: not yet
        key = tmp_path / signing.KEY_FILE
        assert key.stat().st_mode & 0o777 == 0o600
        found = audit.verify(platform.ledger, trusted_keys=operations.trusted_keys(platform))
        assert found.ok and found.chains.checkpoints == 1
        assert keeper._sealed_at is not None
        keeper._sealed_at -= runtime.DEFAULT_SEAL_INTERVAL
        keeper._seal_when_due()
        again = audit.verify(platform.ledger, trusted_keys=operations.trusted_keys(platform))
        assert again.ok and again.chains.checkpoints == 2
        monkeypatch.setenv(runtime.SEAL_VARIABLE, "off")
        assert SchedulerRuntime(platform, commit_base_url=None).seal_interval is None
        monkeypatch.setenv(runtime.SEAL_VARIABLE, "0s")
        with pytest.raises(ValueError, match="VERITASK_SEAL_INTERVAL: must be more than 0"):
            SchedulerRuntime(platform, commit_base_url=None)
        key.chmod(0o644)
        with pytest.raises(errors.LedgerError, match=f"signing key {key}: mode 0644"):
            signing.load_signer(tmp_path)
    finally:
        platform.close()

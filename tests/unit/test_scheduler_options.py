"""The scheduler's command line refuses bad timings before it starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from veritask.scheduling.__main__ import main


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--gather-from", "0", "gather_from: must be 1 or more, got 0"),
        ("--gather-window", "-1", "gather_window: must not be negative"),
        ("--idle-sleep", "-0.5", "idle_sleep: must not be negative"),
    ],
)
def test_a_bad_timing_is_a_usage_error_that_names_its_field(
    option: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    with pytest.raises(SystemExit) as ended:
        main(["--home", str(home), option, value])
    assert ended.value.code == 2
    assert message in capsys.readouterr().err
    assert not home.exists()  # nothing was created: no database, no lease

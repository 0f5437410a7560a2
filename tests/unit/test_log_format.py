"""The JSON log format carries the ids a call site knew."""

from __future__ import annotations

import json
import logging

import pytest

from veritask.services import log_format


def test_a_json_line_has_the_ids_given_as_extra() -> None:
    record = logging.LogRecord("veritask.x", logging.WARNING, __file__, 1, "lost %s", ("a",), None)
    record.__dict__.update({"run_id": "run-1", "instance_id": "i-1", "attempt_no": 2})

    line = json.loads(log_format.formatter("json").format(record))

    assert line["message"] == "lost a"
    assert line["level"] == "WARNING"
    assert (line["run_id"], line["instance_id"], line["attempt_no"]) == ("run-1", "i-1", 2)
    assert "definition" not in line


def test_an_unknown_format_names_the_variable() -> None:
    with pytest.raises(ValueError, match="VERITASK_LOG_FORMAT"):
        log_format.formatter("xml")

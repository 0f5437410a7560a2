"""An attempt's log keeps as much output as the operator allows: the definition's
``log_limit``, else the executor's ``VERITASK_LOG_LIMIT[_<EXECUTOR>]``, else 10 MiB; and a
real 100 MB log is viewable and searchable, quickly, at its end."""

from __future__ import annotations

import time

import pytest

from tests.conftest import SQLITE
from tests.scheduling.harness import Harness
from tests.ui.conftest import served_ui
from veritask.core.states import RunExecutionState
from veritask.services import log_pages, logs
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole

#: 10 KiB of output, then a line that says the task went on past the limit.
TEN_KIB = "head -c 10240 /dev/zero | tr '\\\\0' x; echo; echo went on"


def log_of(harness: Harness, run_id: str, task: str) -> bytes:
    instance_id = harness.instances(run_id)[task].id
    path = logs.attempt_log(Platform(harness.ledger, harness.home.resolve()), instance_id, 1)
    assert path is not None
    return path.read_bytes()


def run(harness: Harness, definition: str, name: str) -> str:
    harness.apply(definition)
    run_id = harness.trigger(name)
    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    return run_id


def test_the_definitions_log_limit_caps_the_log(harness: Harness) -> None:
    definition = (
        "name: capped\ndefaults:\n  log_limit: 4KiB\ntasks:\n"
        f'  talk: {{run: "{TEN_KIB}"}}\n'
        f'  more: {{run: "{TEN_KIB}", log_limit: 6KiB}}\n'
    )
    run_id = run(harness, definition, "capped")

    talk, more = log_of(harness, run_id, "talk"), log_of(harness, run_id, "more")

    assert talk.startswith(b"x" * 4096) and b"x" * 4097 not in talk
    assert b"log cap of 4096 bytes reached" in talk
    assert more.startswith(b"x" * 6144) and b"log cap of 6144 bytes reached" in more


def test_the_executors_setting_is_the_limit_of_a_definition_that_names_none(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERITASK_LOG_LIMIT", "2KiB")
    monkeypatch.setenv("VERITASK_LOG_LIMIT_LOCAL", "8KiB")  # the local executor's own wins
    run_id = run(harness, f'name: chatty\ntasks:\n  talk: {{run: "{TEN_KIB}"}}\n', "chatty")

    talk = log_of(harness, run_id, "talk")

    assert talk.startswith(b"x" * 8192)
    assert b"log cap of 8192 bytes reached" in talk


#: 100 MiB in 100 writes of 1 MiB (lines of 1 KiB), then the line the search looks for.
HUNDRED_MB = """\
name: huge
defaults:
  log_limit: 200MiB
tasks:
  talk:
    run: >-
      python3 -c "import sys; w = sys.stdout.buffer.write;
      [w((b'x' * 1023 + b'\\\\n') * 1024) for _ in range(100)];
      w(b'the needle at the end\\\\n')"
"""


@pytest.mark.parametrize("database_kind", [SQLITE], indirect=True)
def test_a_100_mb_log_is_kept_whole_and_its_end_is_viewed_and_searched_quickly(
    harness: Harness,
) -> None:
    run_id = run(harness, HUNDRED_MB, "huge")
    instance_id = harness.instances(run_id)["talk"].id
    platform = Platform(harness.ledger, harness.home.resolve())
    path = logs.attempt_log(platform, instance_id, 1)
    assert path is not None
    assert path.stat().st_size >= 100 * 1024 * 1024
    held = log_pages.attempt_log(platform, instance_id, 1)

    began = time.monotonic()
    last = log_pages.page(held)  # the viewer opens at the last page
    viewed = time.monotonic() - began
    began = time.monotonic()
    found = log_pages.page(held, query="needle")
    searched = time.monotonic() - began

    assert last.lines[-1].text == "the needle at the end"
    assert last.lines[-1].number == 100 * 1024 + 1
    assert found.hits == (100 * 1024 + 1,)
    assert viewed < 5.0, viewed
    assert searched < 5.0, searched

    # The same through the log viewer's page, over HTTP.
    with served_ui(harness.url, harness.home) as ui:
        viewer = ui.signed_in(TokenRole.VIEWER).http
        began = time.monotonic()
        page = viewer.get(f"/ui/instances/{instance_id}/log?attempt=1")
        hit = viewer.get(f"/ui/instances/{instance_id}/log?attempt=1&q=needle")
        took = time.monotonic() - began
    assert page.status_code == 200 and hit.status_code == 200
    last_line = 100 * 1024 + 1
    assert f'id="L{last_line}"' in page.text and "the needle at the end" in page.text
    assert f'id="L{last_line}"' in hit.text
    assert took < 10.0, took

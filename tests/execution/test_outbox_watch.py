"""The outbox watch says when reports may have arrived, so that an idle loop lists nothing."""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path

import pytest

from veritask.execution import outbox_watch
from veritask.execution.outbox_watch import OutboxWatch

needs_inotify = pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")


@needs_inotify
def test_news_comes_with_a_new_entry_and_goes_once_taken(tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    watch = OutboxWatch(outbox)
    try:
        assert watch.watching
        assert watch.take()  # the first look lists what may already be there
        assert not watch.news()
        assert not watch.take()

        spooled = tmp_path / "spooled.json"
        spooled.write_text("{}")
        os.link(spooled, outbox / "i.1.1.json")  # how a worker delivers a report
        assert watch.news()
        assert watch.news(), "news() must not forget what it saw"
        assert watch.take()
        assert not watch.take()

        (outbox / "i.1.1.json").rename(outbox / "i.1.1.json.invalid")  # moved in
        assert watch.take()
        (outbox / "i.1.1.json.invalid").unlink()  # an acknowledgement is no news
        assert not watch.take()
    finally:
        watch.close()


@needs_inotify
def test_reports_left_behind_are_listed_again(tmp_path: Path) -> None:
    watch = OutboxWatch(tmp_path)
    try:
        assert watch.take()
        watch.keep()
        assert watch.take()
        assert not watch.take()
    finally:
        watch.close()


@needs_inotify
def test_the_outbox_is_listed_once_a_second_whatever_inotify_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = OutboxWatch(tmp_path)
    try:
        assert watch.take()
        assert not watch.take()
        monkeypatch.setattr(outbox_watch, "LIST_ANYWAY_SECONDS", 0.0)
        assert watch.take()
    finally:
        watch.close()


def test_without_inotify_the_outbox_is_looked_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_watch, "_watch", lambda directory: None)
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    watch = OutboxWatch(outbox)
    assert not watch.watching
    assert not watch.take()
    (outbox / "i.1.1.json").write_text("{}")
    assert watch.take()
    assert watch.take(), "a report still there is news until it is acknowledged"


def test_a_wake_is_readable_until_cleared_and_closes_once() -> None:
    wake = outbox_watch.Wake()
    try:
        assert not wake.is_set()
        assert select.select([wake.fileno()], [], [], 0)[0] == []
        wake.set()
        wake.set()  # raised twice: still one thing to say
        assert wake.is_set()
        assert select.select([wake.fileno()], [], [], 0)[0] == [wake.fileno()]
        wake.clear()
        assert not wake.is_set()
        assert select.select([wake.fileno()], [], [], 0)[0] == []
    finally:
        wake.close()
    wake.close()
    wake.set()  # after close: nothing written anywhere
    assert not wake.is_set()
    wake.clear()  # nor read
    assert wake.closed

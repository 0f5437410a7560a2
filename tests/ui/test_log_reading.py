"""Beneath the log viewer: the line index that finds a line's start without reading the whole
log, the search by chunks, and the ANSI colours read as classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from veritask.services import log_pages
from veritask.ui import ansi


def test_the_line_index_finds_every_lines_start_across_steps_and_as_the_log_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_pages, "INDEX_STEP", 64)
    monkeypatch.setattr(log_pages, "PAGE_LINES", 7)
    log = tmp_path / "task.log"
    lines = [f"{'x' * (n % 13)} {n}" for n in range(1, 101)]
    log.write_text("\n".join(lines[:60]) + "\n")
    found = log_pages.AttemptLog("i", 1, log_pages.FileSource(log), ended=False)

    for line in (1, 2, 7, 8, 29, 55, 60):
        shown = log_pages.page(found, line=line)
        assert shown.first_line == (line - 1) // 7 * 7 + 1
        assert [each.text for each in shown.lines] == lines[shown.first_line - 1 : shown.last_line]
    with log.open("a") as growing:
        growing.write("\n".join(lines[60:]))  # the last line not finished yet
    tail = log_pages.page(found)
    assert (tail.total_lines, tail.last_line, tail.lines[-1].text) == (100, 100, lines[99])
    assert tail.follow_line == 100
    assert log.read_bytes()[tail.follow_offset :].decode() == lines[99]


def test_a_search_reads_by_chunks_and_numbers_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_pages, "INDEX_STEP", 50)
    log = tmp_path / "task.log"
    lines = [f"row {n} {'Needle' if n % 17 == 0 else 'hay'} 日志" for n in range(1, 301)]
    log.write_text("\n".join(lines) + "\n")
    source = log_pages.FileSource(log)

    expected = tuple(n for n in range(1, 301) if n % 17 == 0)
    assert log_pages.search(source, source.size(), "NEEDLE") == (expected, False)
    assert log_pages.search(source, source.size(), "needle 日志") == (expected, False)
    monkeypatch.setattr(log_pages, "MAX_HITS", 3)
    assert log_pages.search(source, source.size(), "needle") == (expected[:3], True)


def test_sgr_codes_become_classes_and_other_escapes_vanish() -> None:
    parts, style = ansi.segments("\x1b[1;31mbad\x1b[22m still red \x1b[0mplain\x1b]0;title\x07!")
    assert parts == [("a-f1 a-bold", "bad"), ("a-f1", " still red "), ("", "plain!")]
    assert style == ansi.PLAIN
    carried, style = ansi.segments("\x1b[44;97mblue ground")
    assert carried == [("a-f15 a-b4", "blue ground")]
    assert ansi.segments("goes on", style)[0] == [("a-f15 a-b4", "goes on")]
    assert ansi.segments("\x1b[38;5;2mgreen\x1b[38;2;1;2;3m true\x1b[39m")[0] == [
        ("a-f2", "green"),
        ("", " true"),
    ]
    assert ansi.plain("\x1b[31mred\x1b[0m\x07") == "red"


def test_a_follower_far_behind_goes_on_from_the_tail_with_the_right_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_pages, "INDEX_STEP", 256)
    monkeypatch.setattr(log_pages, "FOLLOW_BYTES", 100)
    monkeypatch.setattr(log_pages, "MAX_BEHIND", 1000)
    log = tmp_path / "task.log"
    log.write_text("".join(f"line {n}\n" for n in range(1, 31)))
    found = log_pages.AttemptLog("i", 1, log_pages.FileSource(log), ended=False)

    near = log_pages.follow(found, offset=0, line=1)
    assert (near.skipped, near.more, near.lines[0].text) == (False, True, "line 1")
    with log.open("a") as growing:
        growing.write("".join(f"line {n}\n" for n in range(31, 501)))
    far = log_pages.follow(found, offset=near.next_offset, line=near.next_line)
    assert far.skipped and not far.more
    assert far.lines[-1] == log_pages.LogLine(500, "line 500", False)
    assert all(each.text == f"line {each.number}" for each in far.lines)
    assert far.next_offset == log.stat().st_size and far.next_line == 501

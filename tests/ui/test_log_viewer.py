"""The log viewer over HTTP: pages of numbered lines read by byte ranges, search, colours,
the follower's lines, the download, the empty states and the attempt chooser."""

from __future__ import annotations

import html
import uuid
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import completed, open_attempt, started
from tests.ui.conftest import Ui
from veritask.services import definitions, logs, runs
from veritask.services.tokens import TokenRole

RETRIED = "name: retried\ntasks:\n  work: {run: 'true', retry: {max_retries: 2, delay: 0s}}\n"


def _attempt(ui: Ui, definition: str = "pipeline") -> tuple[str, str]:
    """An instance with an open attempt; its id and the attempt's token."""
    run_id = runs.trigger_run(ui.platform, definition, actor="test").run_id
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    token = "token-" + uuid.uuid4().hex
    open_attempt(ui.platform, instance_id, token)
    return instance_id, token


def _finish(ui: Ui, instance_id: str, attempt_no: int, token: str, exit_code: int = 0) -> None:
    worker = httpx.Client(base_url=ui.url, headers={"Authorization": f"Bearer {token}"})
    with worker:
        worker.post("/api/v2/callbacks/events", json=started(instance_id, attempt_no, token))
        event = completed(instance_id, attempt_no, token, seq=2, exit_code=exit_code)
        assert worker.post("/api/v2/callbacks/events", json=event).status_code == 200


def _write(ui: Ui, instance_id: str, attempt_no: int, data: bytes) -> Path:
    path = logs.attempt_log(ui.platform, instance_id, attempt_no)
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _numbered(count: int, word: str = "line") -> bytes:
    return b"".join(f"{word} {n}\n".encode() for n in range(1, count + 1))


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_viewer_opens_at_the_last_page_with_numbered_linked_lines(
    ui: Ui, language: str
) -> None:
    instance_id, _ = _attempt(ui)
    _write(ui, instance_id, 1, _numbered(2500))
    viewer = ui.signed_in(TokenRole.VIEWER).http
    viewer.cookies.set("veritask_lang", language)

    page = viewer.get(f"/ui/instances/{instance_id}/log?attempt=1")

    assert page.status_code == 200
    text = html.unescape(page.text)
    assert 'id="L2001"' in text and 'id="L2500"' in text and 'id="L2000"' not in text
    assert f'href="/ui/instances/{instance_id}/log?attempt=1&line=2500#L2500"' in text
    assert 'data-last="yes"' in text and "data-follow=" in text  # running: it follows
    if language == "en":
        assert "Lines 2001–2500 of 2500" in text
        assert "Following: new lines appear at the bottom." in text
        assert "Download the whole log" in text
    else:
        assert "第 2001–2500 行，共 2500 行" in text
        assert "正在跟随：新行出现在底部。" in text
        assert "下载完整日志" in text


def test_a_line_link_opens_the_page_that_holds_it_and_pages_link_to_each_other(ui: Ui) -> None:
    instance_id, _ = _attempt(ui)
    _write(ui, instance_id, 1, _numbered(2500))
    viewer = ui.signed_in(TokenRole.VIEWER).http

    text = html.unescape(viewer.get(f"/ui/instances/{instance_id}/log?attempt=1&line=1500").text)

    assert 'id="L1001"' in text and 'id="L2000"' in text and 'id="L2001"' not in text
    assert '<span class="tx">line 1500</span>' in text
    base = f"/ui/instances/{instance_id}/log?attempt=1"
    for link in (f"{base}&line=1", f"{base}&line=1", f"{base}&line=2001", f'"{base}"'):
        assert link in text
    assert "data-follow=" not in text and 'data-last="yes"' not in text  # an older page


def test_colours_become_classes_and_log_text_is_never_markup(ui: Ui) -> None:
    instance_id, _ = _attempt(ui)
    _write(
        ui,
        instance_id,
        1,
        b"\x1b[1;31mERROR\x1b[0m <script>alert(1)</script>\n\x1b[2K\x1b[32mok\x1b[0m\n",
    )
    viewer = ui.signed_in(TokenRole.VIEWER).http

    text = viewer.get(f"/ui/instances/{instance_id}/log?attempt=1").text

    assert '<span class="a-f1 a-bold">ERROR</span>' in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>alert" not in text
    assert '<span class="a-f2">ok</span>' in text
    assert "\x1b" not in text and "[2K" not in text


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_search_marks_the_matching_lines_and_links_to_the_next_page_with_one(
    ui: Ui, language: str
) -> None:
    instance_id, _ = _attempt(ui)
    data = _numbered(2500).replace(b"line 7\n", b"line 7 NEEDLE\n")
    _write(ui, instance_id, 1, data.replace(b"line 2222\n", b"line 2222 needle\n"))
    viewer = ui.signed_in(TokenRole.VIEWER).http
    viewer.cookies.set("veritask_lang", language)
    base = f"/ui/instances/{instance_id}/log?attempt=1&q=needle"

    first = html.unescape(viewer.get(f"{base}&line=1").text)

    assert '<div class="line hit" id="L7">' in first
    assert first.count('class="line hit"') == 1
    assert 'data-query="needle"' in first
    assert f'id="hit-next-page" href="{base}&line=2222#L2222"' in first
    assert "hit-prev-page" not in first
    assert ("2 matching lines" if language == "en" else "2 行匹配") in first
    last = html.unescape(viewer.get(base).text)
    assert '<div class="line hit" id="L2222">' in last
    assert f'id="hit-prev-page" href="{base}&line=7#L7"' in last
    nothing = viewer.get(f"/ui/instances/{instance_id}/log?attempt=1&q=absent").text
    assert ("No line matches." if language == "en" else "没有匹配的行。") in nothing


@pytest.mark.parametrize("language", ["en", "zh"])
def test_an_empty_log_says_so_while_running_and_after(ui: Ui, language: str) -> None:
    instance_id, token = _attempt(ui)
    viewer = ui.signed_in(TokenRole.VIEWER).http
    viewer.cookies.set("veritask_lang", language)
    path = f"/ui/instances/{instance_id}/log?attempt=1"

    running = viewer.get(path).text
    assert 'id="log-empty"' in running
    assert ("No output yet." if language == "en" else "尚无输出。") in running
    assert "data-follow=" in running  # the first lines will appear by themselves

    _write(ui, instance_id, 1, b"")
    _finish(ui, instance_id, 1, token)
    ended = viewer.get(path).text
    assert ("This attempt wrote no output." if language == "en" else "这次尝试没有任何输出。") in (
        ended
    )
    assert "data-follow=" not in ended


def test_the_follower_gets_whole_lines_as_classed_segments(ui: Ui) -> None:
    instance_id, token = _attempt(ui)
    log = _write(ui, instance_id, 1, b"one\n\x1b[33mtwo\x1b[0m\nthr")
    viewer = ui.signed_in(TokenRole.VIEWER).http
    more = f"/ui/instances/{instance_id}/log/more?attempt=1"

    first = viewer.get(f"{more}&offset=0&line=1").json()
    assert [line["n"] for line in first["lines"]] == [1, 2, 3]
    assert first["lines"][1]["s"] == [["a-f3", "two"]]
    assert first["lines"][2]["s"] == [["", "thr"]]  # incomplete: asked again from its start
    assert (first["next_line"], first["ended"]) == (3, False)

    with log.open("ab") as growing:
        growing.write(b"ee\nfour\n")
    second = viewer.get(f"{more}&offset={first['next_offset']}&line=3").json()
    assert [(line["n"], line["s"]) for line in second["lines"]] == [
        (3, [["", "three"]]),
        (4, [["", "four"]]),
    ]
    assert second["next_line"] == 5
    _finish(ui, instance_id, 1, token)
    last = viewer.get(f"{more}&offset={second['next_offset']}&line=5").json()
    assert (last["lines"], last["ended"]) == ([], True)


def test_the_download_is_the_whole_file_as_a_text_attachment(ui: Ui) -> None:
    instance_id, _ = _attempt(ui)
    data = _numbered(50_000, "a longer line of output") + b"\xff\x1b[31mraw bytes\n"
    _write(ui, instance_id, 1, data)
    viewer = ui.signed_in(TokenRole.VIEWER).http

    answer = viewer.get(f"/ui/instances/{instance_id}/log/download?attempt=1")

    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert answer.headers["content-disposition"] == (
        f'attachment; filename="{instance_id}-attempt-1.log"'
    )
    assert answer.content == data


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_attempt_chooser_lists_every_attempt_and_shows_the_one_chosen(
    ui: Ui, language: str
) -> None:
    definitions.apply_definition(ui.platform, RETRIED, actor="test")
    instance_id, token = _attempt(ui, "retried")
    _write(ui, instance_id, 1, b"first attempt output\n")
    _finish(ui, instance_id, 1, token, exit_code=1)
    second_token = "token-" + uuid.uuid4().hex
    assert open_attempt(ui.platform, instance_id, second_token) == 2
    _write(ui, instance_id, 2, b"second attempt output\n")
    viewer = ui.signed_in(TokenRole.VIEWER).http
    viewer.cookies.set("veritask_lang", language)

    current = viewer.get(f"/ui/instances/{instance_id}/log").text
    assert "second attempt output" in current
    assert '<option value="2" selected>' in current
    assert '<option value="1">' in current
    assert ("Attempt 1 · failed" if language == "en" else "第 1 次尝试 · 失败") in current
    chosen = viewer.get(f"/ui/instances/{instance_id}/log?attempt=1").text
    assert "first attempt output" in chosen and "second attempt output" not in chosen
    assert '<option value="1" selected>' in chosen
    instance_page = viewer.get(f"/ui/instances/{instance_id}").text
    assert f'href="/ui/instances/{instance_id}/log?attempt=2" id="open-log-viewer"' in instance_page


def test_an_unknown_attempt_is_not_found(ui: Ui) -> None:
    instance_id, _ = _attempt(ui)
    viewer = ui.signed_in(TokenRole.VIEWER).http
    assert viewer.get(f"/ui/instances/{instance_id}/log?attempt=9").status_code == 404
    assert viewer.get(f"/ui/instances/{instance_id}/log/download?attempt=9").status_code == 404

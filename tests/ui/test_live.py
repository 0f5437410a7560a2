"""The live stream (``ui/pages/live.py``) ends with its session: at once on sign-out or a
revoked token in this process, within a few seconds when another process ended it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.ui.conftest import PIPELINE, SignedIn, Ui, served_ui
from veritask.ledger import ui_sessions
from veritask.services import tokens
from veritask.services.tokens import TokenRole
from veritask.ui.pages import live

#: Far below the stream's own 25 s: the stream ended because the session did.
AT_ONCE = 2.0


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[Ui]:
    with served_ui(database_url, tmp_path / "home", PIPELINE) as found:
        yield found


def seconds_until_closed(stream: httpx.Response, since: float) -> float:
    """Read the stream to its end (or give up well before its 25 s); seconds since ``since``."""
    for _ in stream.iter_text():
        if time.monotonic() - since > live.STREAM_SECONDS / 2:
            break
    return time.monotonic() - since


def open_stream(signed: SignedIn) -> httpx.Response:
    stream = signed.http.send(signed.http.build_request("GET", "/ui/live?since=0"), stream=True)
    assert stream.status_code == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    return stream


def test_signing_out_ends_the_open_stream_at_once(served: Ui) -> None:
    viewer = served.signed_in(TokenRole.VIEWER)
    stream = open_stream(viewer)
    try:
        out = viewer.http.post("/ui/sign-out", data={"csrf": viewer.csrf})
        assert out.status_code == 303
        assert seconds_until_closed(stream, time.monotonic()) < AT_ONCE
    finally:
        stream.close()


def test_revoking_the_token_ends_the_open_stream_at_once(served: Ui) -> None:
    made = tokens.create_token(served.platform, role=TokenRole.VIEWER, name="leaving")
    served.tokens[TokenRole.VIEWER] = made.token
    viewer = served.signed_in(TokenRole.VIEWER)
    admin = served.client()
    admin.headers["Authorization"] = f"Bearer {served.tokens[TokenRole.ADMIN]}"
    stream = open_stream(viewer)
    try:
        revoked = admin.post(f"/api/v2/tokens/{made.id}/revoke")
        assert revoked.status_code == 200, revoked.text
        assert seconds_until_closed(stream, time.monotonic()) < AT_ONCE
    finally:
        stream.close()


def test_a_session_ended_by_another_process_ends_the_stream_within_the_recheck(
    served: Ui,
) -> None:
    viewer = served.signed_in(TokenRole.VIEWER)
    token_id = next(t.id for t in tokens.list_tokens(served.platform) if t.name == "viewer-user")
    stream = open_stream(viewer)
    try:
        # Only the table changes, as when another API process revoked the token: nothing in
        # this process is told.
        with served.platform.engine.begin() as connection:
            ui_sessions.end_sessions_of_token(connection, token_id, served.platform.now())
        took = seconds_until_closed(stream, time.monotonic())
        assert took < live.RECHECK_SECONDS + AT_ONCE
    finally:
        stream.close()


def test_signing_out_leaves_another_browsers_stream_open(served: Ui) -> None:
    """Sign-out ends one session: a stream of the same token in another browser goes on."""
    leaving, staying = served.signed_in(TokenRole.VIEWER), served.signed_in(TokenRole.VIEWER)
    stream = open_stream(staying)
    try:
        assert leaving.http.post("/ui/sign-out", data={"csrf": leaving.csrf}).status_code == 303
        began, went_on = time.monotonic(), False
        for _ in stream.iter_text():  # an idle comment a second while it stays open
            if time.monotonic() - began > AT_ONCE:
                went_on = True
                break
        assert went_on
    finally:
        stream.close()

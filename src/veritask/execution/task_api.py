"""The API for task code: report progress, commit output through the fencing check, skip.

Task code imports this module into its own process, so it depends on the standard library
only, and it does nothing at import. It reads what the worker puts in the environment:

==========================  ===============================================================
VERITASK_INSTANCE_ID        the instance this attempt belongs to
VERITASK_ATTEMPT_NO         the attempt's number
VERITASK_ATTEMPT_TOKEN      proves to the platform that a request comes from this attempt
VERITASK_OUTPUT             a file the task may fill with JSON (a callable's return value)
VERITASK_CALLBACK           the platform's base URL, for the commit check ('' if none)
VERITASK_CHANNEL            a FIFO to the worker, which numbers, spools and sends the events
VERITASK_SKIP_EXIT_CODE     the exit status that means "skipped"
==========================  ===============================================================

Progress goes to the worker (whatever its transport, HTTP or outbox), so that it gets a
sequence number and survives an unreachable platform like every other event. A commit cannot
wait: the platform must say *now* whether this attempt may still publish, so ``commit_output``
asks the platform's ``/api/v2/callbacks/commit`` synchronously, in local mode too (the local
platform serves the same API); then it tells the worker, which reports ``output_committed``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn

COMMIT_PATH = "/api/v2/callbacks/commit"
#: Writes of at most PIPE_BUF bytes to a FIFO are atomic: notices never interleave.
_NOTICE_LIMIT = 4096
_COMMIT_TIMEOUT_SECONDS = 30.0


class TaskApiError(Exception):
    """The task API could not do what was asked."""


class NotUnderWorker(TaskApiError):
    """This process was not started by a Veritask worker (the VERITASK_* variables are unset)."""


class FencedAttempt(TaskApiError):
    """The platform refused the commit: this attempt is stale or fenced off, and another
    attempt owns the instance now. Do not publish the output; end the task."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"commit refused, this attempt is fenced: {reason}")
        self.reason = reason


class CommitFailed(TaskApiError):
    """The commit could not be checked; ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def report_progress(
    phase: str, done: int | None = None, total: int | None = None, message: str | None = None
) -> None:
    """Tell the platform what the task is doing. Best effort: it never raises for delivery
    trouble, and does nothing outside a worker (so task code runs unchanged in a shell)."""
    if "VERITASK_CHANNEL" not in os.environ:
        return
    notice: dict[str, str | int | None] = {
        "kind": "progress",
        "phase": phase[:200],
        "done": done,
        "total": total,
        "message": message,
    }
    encoded = _encode(notice)
    while len(encoded) > _NOTICE_LIMIT and message:
        message = message[: len(message) // 2]
        notice["message"] = message
        encoded = _encode(notice)
    _send_notice(encoded)


def commit_output(marker: str) -> None:
    """Ask the platform whether this attempt may publish its output, identified by ``marker``.

    Returns when the platform accepted the commit. Raises ``FencedAttempt`` when the attempt
    is stale or fenced (HTTP 409): the task must not publish. Raises ``CommitFailed`` when the
    platform could not be asked, or refused for another reason.
    """
    # Imported here: urllib costs tens of milliseconds, and most tasks never commit.
    import urllib.error
    import urllib.request

    instance_id, attempt_no, token = _identity()
    base_url = os.environ.get("VERITASK_CALLBACK", "")
    if not base_url:
        raise CommitFailed(
            "no platform URL (VERITASK_CALLBACK) to check the commit", retryable=False
        )
    body = json.dumps(
        {"instance_id": instance_id, "attempt_no": attempt_no, "marker": marker}
    ).encode()
    request = urllib.request.Request(
        base_url.rstrip("/") + COMMIT_PATH,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=_COMMIT_TIMEOUT_SECONDS) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        detail = _reason(exc.read())
        if exc.code == 409:
            raise FencedAttempt(detail) from None
        retryable = exc.code >= 500 or exc.code in (408, 425, 429)
        raise CommitFailed(
            f"commit refused: HTTP {exc.code}: {detail}", retryable=retryable
        ) from None
    except OSError as exc:  # URLError, timeouts, refused connections
        raise CommitFailed(f"platform unreachable: {exc}", retryable=True) from None
    _send_notice(_encode({"kind": "output_committed", "marker": marker}))


def skip(reason: str) -> NoReturn:
    """End the task as skipped: the reason goes to the log, the exit status says "skipped".

    It raises SystemExit, so call it from the task's main thread.
    """
    print(f"skipped: {reason}", file=sys.stderr, flush=True)
    raise SystemExit(int(os.environ.get("VERITASK_SKIP_EXIT_CODE", "99")))


def _identity() -> tuple[str, int, str]:
    try:
        return (
            os.environ["VERITASK_INSTANCE_ID"],
            int(os.environ["VERITASK_ATTEMPT_NO"]),
            os.environ["VERITASK_ATTEMPT_TOKEN"],
        )
    except (KeyError, ValueError):
        raise NotUnderWorker() from None


def _encode(notice: dict[str, str | int | None]) -> bytes:
    return json.dumps(notice, separators=(",", ":")).encode() + b"\n"


def _send_notice(encoded: bytes) -> None:
    channel = os.environ.get("VERITASK_CHANNEL")
    if not channel or len(encoded) > _NOTICE_LIMIT:
        return
    try:
        # O_NONBLOCK: opening a FIFO nobody reads fails at once (ENXIO) instead of hanging.
        fd = os.open(channel, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # the worker is gone: nobody could deliver it
    try:
        os.set_blocking(fd, True)  # wait for room rather than lose a notice
        os.write(fd, encoded)
    except OSError:
        pass
    finally:
        os.close(fd)


def _reason(payload: bytes) -> str:
    try:
        answer = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return payload[:300].decode(errors="replace")
    if isinstance(answer, dict):
        for key in ("reason", "detail", "title"):
            if isinstance(answer.get(key), str):
                return str(answer[key])
    return str(answer)[:300]

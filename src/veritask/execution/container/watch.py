"""The reports of a container attempt, sent on its behalf: no worker of ours runs in the
container.

A thread of the Veritask process that started the container (or of one that took it over,
``ContainerExecutor.resume``) looks at the engine and reports what it sees with the attempt's
token, as a worker would: ``started`` with the engine's ``StartedAt`` as its time, a
``heartbeat`` every heartbeat interval while the engine says ``running`` (not while
``paused``: a frozen container is silent, and its lease lapses as a frozen worker's would),
and ``completed`` with ``describe``'s answer (exit code, signal, category, the engine's
``FinishedAt``). Reports are numbered as the SQL engine's are (``sql/reports``): ``started`` is
1, each later one 3 plus the milliseconds since the start, so two watchers of one container
number alike. A second thread follows the container's log stream into the kept log file as
the output comes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import httpx

from veritask.execution import port, wire
from veritask.execution.container import client
from veritask.execution.sql import reports

#: How often the watcher looks at the engine before the container starts, and after.
LOOK_BEFORE_START_SECONDS: Final = 0.1
LOOK_WHILE_RUNNING_SECONDS: Final = 0.5
log = logging.getLogger(__name__)


class Watch:
    """One attempt's watcher: ``look`` reports what an observation shows."""

    def __init__(self, spec: port.AttemptSpec, host: str) -> None:
        self.spec = spec
        self.host = host
        self.reporter = reports.Reporter(spec)
        self.beat_seconds = spec.heartbeat_interval.total_seconds()
        self.started_at: datetime | None = None
        self.beat_due = 0.0

    def pause(self) -> float:
        if self.started_at is None:
            return LOOK_BEFORE_START_SECONDS
        return min(LOOK_WHILE_RUNNING_SECONDS, self.beat_seconds)

    def look(self, observation: port.Observation) -> bool:
        """Report what ``observation`` shows; True when there is nothing left to watch."""
        now = datetime.now(UTC)
        if observation.started_at is not None and self.started_at is None:
            self._report_start(observation)
        if observation.engine_state is port.EngineState.NOT_FOUND:
            return True  # removed under us: the reconciler asks the engine and decides
        if observation.ended:
            if self.started_at is not None:
                self._report_end(observation, now)
            return True
        running = observation.details.get("status") == "running"
        if self.started_at is not None and running and time.monotonic() >= self.beat_due:
            seq = reports.clock_seq(self.started_at, now)
            self.reporter.send("heartbeat", {}, seq=seq, event_time=now)
            self.beat_due = time.monotonic() + self.beat_seconds
        return False

    def _report_start(self, observation: port.Observation) -> None:
        started_at = observation.started_at
        if started_at is None:
            return
        evidence = wire.ContainerStartedEvidence(
            worker=f"container:{self.host}",
            host=self.host,
            container=str(observation.details.get("container") or ""),
            container_id=observation.engine_id or "",
            image=str(observation.details.get("image") or ""),
            started_at=wire.format_time(started_at),
        )
        self.reporter.send("started", evidence, seq=reports.STARTED_SEQ, event_time=started_at)
        self.started_at = started_at
        self.beat_due = time.monotonic() + self.beat_seconds

    def _report_end(self, observation: port.Observation, now: datetime) -> None:
        started_at = self.started_at
        if started_at is None:
            return
        evidence = reports.completed_evidence(observation)
        signal = observation.details.get("signal")
        evidence["exit_code"] = observation.exit_code
        evidence["signal"] = signal if isinstance(signal, int) else None
        problem = observation.details.get("error_message")
        if isinstance(problem, str) and problem:
            evidence["error_message"] = problem
        ended_at = observation.ended_at or now
        seq = reports.clock_seq(started_at, max(now, ended_at)) + 1
        self.reporter.send("completed", evidence, seq=seq, event_time=ended_at)

    def close(self) -> None:
        self.reporter.close()


def follow_log(host: str, name: str, kept: Path, cap: int, stopped: Callable[[], bool]) -> None:
    """Copy the container's output into ``kept`` as it comes, up to ``cap`` bytes, until the
    stream ends (the container ended) or ``stopped``. The file is written anew from the
    container's first byte: a follower that takes over from a dead one repeats nothing."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    transport, base = client.transport(host)
    params = {"stdout": "1", "stderr": "1", "follow": "1"}
    url = f"{base}/{client.API_VERSION}/containers/{client.path_name(name)}/logs"
    # A quiet container sends nothing for as long as it likes: no read timeout.
    timeout = httpx.Timeout(client.REQUEST_TIMEOUT_SECONDS, read=None)
    written = 0
    frames = client.FrameReader()
    try:
        with (
            contextlib.ExitStack() as stack,
            httpx.Client(transport=transport, timeout=timeout) as http,
            http.stream("GET", url, params=params) as response,
        ):
            if response.status_code != 200:
                return
            out = stack.enter_context(kept.open("wb"))
            for chunk in response.iter_raw():
                data = frames.feed(chunk)
                room = cap - written
                if data and room > 0:
                    out.write(data[:room])
                    out.flush()
                    written += min(len(data), room)
                if stopped():
                    return
            tail = frames.rest()
            if tail and cap - written > 0:
                out.write(tail[: cap - written])
            if written >= cap:
                out.write(b"\n[veritask: output past the log cap was dropped]\n")
    except (httpx.HTTPError, OSError) as exc:
        log.warning("following the log of the container %s stopped: %s", name, exc)

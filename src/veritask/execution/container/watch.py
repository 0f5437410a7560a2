"""The reports of a container attempt, sent on its behalf: no worker of ours runs in the
container.

A thread of the Veritask process that started the container (or of one that took it over,
``ContainerExecutor.resume``) looks at the engine and reports what it sees with the attempt's
token, as a worker would (``engine_watch.Watch``): ``started`` with the engine's ``StartedAt``
as its time, a ``heartbeat`` every heartbeat interval while the engine says ``running`` (not
while ``paused``: a frozen container is silent, and its lease lapses as a frozen worker's
would), and ``completed`` with ``describe``'s answer (exit code, signal, category, the engine's
``FinishedAt``). Reports are numbered from ``StartedAt`` (``engine_watch.clock_seq``), so two
watchers of one container number alike. A second thread follows the container's log stream
into the kept log file as the output comes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import httpx

from veritask.execution import engine_watch, port, wire
from veritask.execution.container import client

log = logging.getLogger(__name__)


class Watch(engine_watch.Watch):
    """One container attempt's watcher: ``look`` reports what an observation shows."""

    def __init__(
        self, spec: port.AttemptSpec, host: str, *, done: Callable[[], None] = lambda: None
    ) -> None:
        super().__init__(spec)
        self.host = host
        self.done = done

    def look(self, observation: port.Observation) -> bool:
        """As any engine's watcher; ``done`` is called once nothing is left to watch."""
        finished = super().look(observation)
        if finished:
            self.done()
        return finished

    def started_evidence(
        self, observation: port.Observation, started_at: datetime
    ) -> wire.ContainerStartedEvidence:
        return wire.ContainerStartedEvidence(
            worker=f"container:{self.host}",
            host=self.host,
            container=str(observation.details.get("container") or ""),
            container_id=observation.engine_id or "",
            image=str(observation.details.get("image") or ""),
            started_at=wire.format_time(started_at),
        )

    def beating(self, observation: port.Observation) -> bool:
        return observation.details.get("status") == "running"

    def ended_evidence(self, observation: port.Observation) -> wire.CompletedEvidence:
        evidence = engine_watch.completed_evidence(observation)
        signal = observation.details.get("signal")
        evidence["signal"] = signal if isinstance(signal, int) else None
        return evidence


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

"""The reports of a Spark attempt, sent on its behalf: no worker of ours runs beside the driver.

A thread of the Veritask process that submitted the driver (or of one that took it over,
``SparkExecutor.resume``) asks the master and reports what it sees with the attempt's token
(``engine_watch.Watch``): ``started`` once the driver is RUNNING, a ``heartbeat`` every
heartbeat interval while it stays RUNNING, and ``completed`` with ``describe``'s answer once it
ended.

The master keeps no start time of a driver (its ``starttime`` is the submission's), so the
start is the moment a watcher first saw the driver RUNNING, written in the executor's journal:
a watcher that takes over on the same host reports the same start. Reports are numbered from
the master's submission time of the driver (``/json/``), which every watcher of the master
reads alike, on any host.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Final

from veritask.execution import engine_watch, errors, port, wire
from veritask.execution.spark import client

#: How ``started_at`` of a Spark attempt is learnt (the evidence says it).
FIRST_SEEN_RUNNING: Final = "first_seen_running"
log = logging.getLogger(__name__)


class Watch(engine_watch.Watch):
    """One Spark attempt's watcher: ``look`` reports what an observation shows."""

    def __init__(self, spec: port.AttemptSpec, master: client.Client, app_name: str) -> None:
        super().__init__(spec)
        self.master = master
        self.app_name = app_name

    def started_evidence(
        self, observation: port.Observation, started_at: datetime
    ) -> wire.SparkStartedEvidence:
        return wire.SparkStartedEvidence(
            worker=f"spark:{self.master.master}",
            host=self.master.master,
            driver_id=observation.engine_id or "",
            spark_worker=str(observation.details.get("worker") or ""),
            app_name=self.app_name,
            started_at=wire.format_time(started_at),
            started_at_source=FIRST_SEEN_RUNNING,
        )

    def numbered_from(self, observation: port.Observation, started_at: datetime) -> datetime:
        """The master's submission time of the driver; the start when the master's web UI
        cannot tell it (a watcher elsewhere may then number otherwise)."""
        try:
            state = self.master.state()
        except errors.ExecutorError as exc:
            log.warning("numbering the reports of %s from its start: %s", self.app_name, exc)
            return started_at
        for key in ("activedrivers", "completeddrivers"):
            listed = state.get(key)
            for driver in listed if isinstance(listed, list) else []:
                if isinstance(driver, dict) and driver.get("id") == observation.engine_id:
                    submitted = submitted_at(driver.get("starttime"))
                    if submitted is not None:
                        return submitted
        return started_at


def submitted_at(value: object) -> datetime | None:
    """The master's ``starttime`` of a driver (milliseconds since the epoch, as text)."""
    try:
        millis = int(str(value))
    except ValueError:
        return None
    return datetime.fromtimestamp(millis / 1000, UTC)

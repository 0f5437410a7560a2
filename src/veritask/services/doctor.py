"""``veritask doctor``: is this installation able to do its job, and if not, what to look at.

Each check reads the database or the data folder directly (the API may be the thing that is
down) and says ``ok``, ``warn`` (works, but look at it) or ``fail`` (something does not work).
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Final

from veritask.core.jsontypes import JSONObject
from veritask.execution import local, task_user
from veritask.ledger import dialects, observations
from veritask.scheduling.lease import STALE_AFTER
from veritask.services import health, run_checks
from veritask.services.platform import Platform

#: A worker whose reports carry times this far ahead of ours has a clock that is ahead.
CLOCK_AHEAD_FAIL: Final = timedelta(seconds=5)
#: Reports that typically arrive this late: a clock behind, or a slow path to the platform.
DELAY_WARN: Final = timedelta(seconds=30)
#: How many of the newest worker reports the clock check reads.
CLOCK_SAMPLE: Final = 1000
#: A scheduler loop that has not finished a tick for this long is stuck or overloaded.
TICK_LAG_WARN: Final = timedelta(seconds=60)
DISK_FAIL_BYTES: Final = 100 * 1024 * 1024
DISK_WARN_BYTES: Final = 1024 * 1024 * 1024
DISK_WARN_FRACTION: Final = 0.05


class Status(StrEnum):
    """How a check came out."""

    OK = "ok"
    """It holds."""
    WARN = "warn"
    """It works, but someone should look."""
    FAIL = "fail"
    """It does not work."""


@dataclass(frozen=True)
class Check:
    """One check: its name, how it came out, a sentence, and the figures it used."""

    name: str
    status: Status
    detail: str
    figures: JSONObject

    def as_json(self) -> JSONObject:
        return {
            "name": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "figures": self.figures,
        }


def diagnose(platform: Platform) -> list[Check]:
    """Every check, in order; the later ones are skipped when the database is not usable."""
    found = [database(platform)]
    if found[0].status is Status.FAIL:
        return [*found, *(skipped(name) for name in ("schedulers", "clock skew", "runs"))]
    steps: list[Callable[[Platform], Check]] = [schedulers, clock_skew, runs]
    found.extend(step(platform) for step in steps)
    found.append(executor(platform.home))
    found.extend(disk(platform.home))
    return found


def skipped(name: str) -> Check:
    return Check(name, Status.FAIL, "not checked: the database is not usable", {})


def database(platform: Platform) -> Check:
    """Reachable, and migrated to the schema this version needs."""
    ready = health.readiness(platform)
    figures: JSONObject = {
        "backend": ready.database,
        "revision": ready.revision,
        "expected_revision": ready.expected_revision,
    }
    status = Status.OK if ready.ready else Status.FAIL
    return Check("database", status, ready.detail, figures)


def schedulers(platform: Platform) -> Check:
    """At least one scheduler beats its lease, and its loop ticks."""
    now = platform.now()
    with dialects.read_transaction(platform.engine) as connection:
        rows = observations.schedulers(connection)
    alive = [row for row in rows if now - row.heartbeat_at <= STALE_AFTER]
    figures: JSONObject = {"alive": len(alive), "registered": len(rows)}
    if not alive:
        return Check(
            "schedulers",
            Status.FAIL,
            "no scheduler is alive: nothing is scheduled, monitored or reconciled "
            "(start `veritask up` or `veritask scheduler`)",
            figures,
        )
    ticks = [row.last_tick_at for row in alive if row.last_tick_at is not None]
    lag = (now - max(ticks)).total_seconds() if ticks else None
    figures["loop_lag_seconds"] = lag
    if lag is not None and lag > TICK_LAG_WARN.total_seconds():
        return Check(
            "schedulers",
            Status.WARN,
            f"{len(alive)} alive, but no loop finished a tick for {lag:.0f} s",
            figures,
        )
    return Check("schedulers", Status.OK, f"{len(alive)} alive", figures)


def clock_skew(platform: Platform) -> Check:
    """Each worker host's clock against ours: a report's event_time after its observed_at is
    a clock ahead (nothing arrives before it happens); a large typical delay is a clock behind
    or a slow path. Hosts are told apart by the worker identity (``host:pid``) of the attempt
    the report belongs to, so one host with a bad clock is named, not averaged away."""
    with dialects.read_transaction(platform.engine) as connection:
        rows = observations.worker_report_clocks(connection, limit=CLOCK_SAMPLE)
    if not rows:
        return Check("clock skew", Status.OK, "no worker reports to compare yet", {"reports": 0})
    by_host: dict[str, list[float]] = {}
    for row in rows:
        host = (row.worker or "unknown host").rpartition(":")[0] or str(row.worker)
        by_host.setdefault(host, []).append((row.event_time - row.observed_at).total_seconds())
    hosts: JSONObject = {
        host: {
            "reports": len(offsets),
            "max_ahead_seconds": round(max(offsets), 3),
            "median_delay_seconds": round(-statistics.median(offsets), 3),
        }
        for host, offsets in sorted(by_host.items())
    }
    ahead_host, ahead = max(
        ((host, max(offsets)) for host, offsets in by_host.items()), key=lambda pair: pair[1]
    )
    delay_host, delay = max(
        ((host, -statistics.median(offsets)) for host, offsets in by_host.items()),
        key=lambda pair: pair[1],
    )
    figures: JSONObject = {
        "reports": len(rows),
        "max_ahead_seconds": round(ahead, 3),
        "median_delay_seconds": round(delay, 3),
        "hosts": hosts,
    }
    if ahead > CLOCK_AHEAD_FAIL.total_seconds():
        return Check(
            "clock skew",
            Status.FAIL,
            f"the clock of worker host {ahead_host} is {ahead:.1f} s ahead of the platform's: "
            "durations and lags computed from its reports are wrong (check NTP on it)",
            figures,
        )
    if delay > DELAY_WARN.total_seconds():
        return Check(
            "clock skew",
            Status.WARN,
            f"reports of worker host {delay_host} arrive {delay:.1f} s after they happen "
            "(typical): a clock behind, or a slow or spooling path to the platform",
            figures,
        )
    return Check(
        "clock skew", Status.OK, f"within {ahead:.2f} s on {len(by_host)} host(s)", figures
    )


def runs(platform: Platform) -> Check:
    """The run half of ``verify``: each run's stored states are where its events leave them,
    its events follow on from each other, and a finished run's state is its instances'; and
    each definition's stored versions and lifecycle are where its own events leave them."""
    found = run_checks.check_runs(platform)
    problems = [*found.mismatches, *found.violations]
    figures: JSONObject = {
        "runs": found.runs,
        "definitions": found.definitions,
        "mismatches": len(found.mismatches),
        "violations": len(found.violations),
    }
    if problems:
        shown = "; ".join(problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return Check(
            "runs",
            Status.FAIL,
            f"{len(problems)} problem(s), `veritask verify` fails: {shown}{more}",
            figures,
        )
    return Check(
        "runs",
        Status.OK,
        f"{found.runs} runs and {found.definitions} definitions agree with their events",
        figures,
    )


def executor(home: Path) -> Check:
    """The local executor's supervisor, if this machine runs one."""
    if not (home / "executor").is_dir():
        return Check("executor", Status.OK, "no local executor in this data folder", {})
    try:
        pid = local.LocalExecutor(home=home).supervisor_pid()
    except task_user.TaskUserError as exc:
        return Check("executor", Status.FAIL, str(exc), {})
    if pid is None:
        return Check(
            "executor",
            Status.WARN,
            "the local supervisor does not answer (it exits after 10 idle minutes and starts "
            "again with the next attempt)",
            {"supervisor_pid": None},
        )
    return Check("executor", Status.OK, f"the local supervisor answers (pid {pid})", {"pid": pid})


def disk(home: Path) -> list[Check]:
    """Free space where attempt logs (``executor/``) and the event spool (``outbox/``) live."""
    found = []
    for name, path in (("disk: logs", home / "executor"), ("disk: spool", home / "outbox")):
        where = path if path.exists() else home if home.exists() else Path.cwd()
        usage = shutil.disk_usage(where)
        fraction = usage.free / usage.total if usage.total else 0.0
        figures: JSONObject = {
            "path": str(where),
            "free_bytes": usage.free,
            "total_bytes": usage.total,
        }
        free = f"{usage.free / 2**30:.1f} GiB free ({fraction:.0%})"
        if usage.free < DISK_FAIL_BYTES:
            found.append(Check(name, Status.FAIL, f"{free} at {where}", figures))
        elif usage.free < DISK_WARN_BYTES or fraction < DISK_WARN_FRACTION:
            found.append(Check(name, Status.WARN, f"{free} at {where}", figures))
        else:
            found.append(Check(name, Status.OK, f"{free} at {where}", figures))
    return found


def healthy(checks: list[Check]) -> bool:
    """No check failed (warnings do not fail the doctor)."""
    return all(check.status is not Status.FAIL for check in checks)

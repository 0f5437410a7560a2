"""What ``/metrics`` reports, and how the values get there from every process.

Three sources (docs/operations.md, "Metrics"):

1. **Gauges read from the database at scrape time**, with bounded queries on indexed columns:
   instances by state (the unfinished ones: a partial index), open alerts by owner category,
   attempts running per executor, the scheduler loop's lag (``schedulers.last_tick_at``).
2. **Counters counted in memory by whichever process applies events** (the ledger's
   ``Tally``) and added to ``metric_values`` by the scheduler's housekeeping and by each
   scrape: events by kind and outcome, the reconciler's decisions by kind.
3. **Phase histograms** per definition, observed once per instance when it reaches a final
   state: a pass over the event log past a high-water mark kept in ``metric_values`` and
   moved with compare-and-set, so two processes never count an instance twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Final

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from veritask.core import durations
from veritask.core.states import TERMINAL_INSTANCE_STATES, AttemptState, InstanceState
from veritask.ledger import (
    alerts,
    dialects,
    errors,
    ledger,
    metric_values,
    observations,
    queries,
    rejections,
)
from veritask.ledger.database import Connection
from veritask.ledger.metric_values import labels_key
from veritask.scheduling.lease import STALE_AFTER
from veritask.services import reading
from veritask.services.platform import Platform

PREFIX: Final = "veritask"
#: Upper bounds (seconds) of the phase histograms' buckets: a second to a day.
BUCKETS: Final = (0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)
#: Instances observed per pass: bounded work per scrape or housekeeping step.
OBSERVE_BATCH: Final = 200
#: The high-water mark of the histogram pass (a row of ``metric_values``).
POSITION: Final = "durations_position"
#: PostgreSQL may commit a lower event position after a higher one; the pass stays this far
#: behind the newest events so that it never steps over one still being committed. SQLite
#: serializes writers, so there it needs no margin.
POSTGRES_SETTLE: Final = timedelta(seconds=2)

_COUNTERS: Final = (
    "events_total",
    "reconciler_decisions_total",
    rejections.DROPPED_METRIC,
    ledger.REFUSED_METRIC,
)
_HISTOGRAM: Final = ("phase_seconds_bucket", "phase_seconds_sum", "phase_seconds_count")
_GAUGES: Final = ("executor_slots",)


# -- writing: the histogram pass and the scheduler's figures -----------------------------------


def observe_finished_instances(platform: Platform) -> int:
    """Add the phases of instances that reached a final state since the last pass to the
    histograms; the number of instances observed (0 if another process moved first)."""
    now = platform.now()
    settle = POSTGRES_SETTLE if platform.database_backend == "postgresql" else timedelta()
    with dialects.read_transaction(platform.engine) as connection:
        mark = metric_values.mark(connection, POSITION)
        top = observations.newest_position_observed_by(connection, now - settle)
        if top is None or top <= mark:
            return 0
        finished = observations.instances_finished_between(
            connection, after=mark, upto=top, limit=OBSERVE_BATCH
        )
        new_mark = finished[-1][0] if len(finished) == OBSERVE_BATCH else top
        found = _observations(connection, [instance_id for _, instance_id in finished])
    try:
        with platform.engine.begin() as connection:
            if not metric_values.move_mark(connection, POSITION, mark, new_mark, now):
                return 0
            metric_values.add_many(connection, _increments(found), now)
    except errors.DuplicateKey:
        return 0  # another process created the mark first: it does this pass
    return len(finished)


def _observations(
    connection: Connection, instance_ids: list[str]
) -> list[tuple[tuple[str, str], float]]:
    if not instance_ids:
        return []
    # The stored snapshot, never the events again: it is what folding them would give.
    runs = observations.definition_names_by_run(connection, instance_ids)
    found = []
    for row in queries.instances_by_id(connection, instance_ids):
        snapshot = reading.snapshot_of(row)
        for phase, spent in durations.totals(durations.instance_phases(snapshot)).items():
            found.append(((runs[row.run_id], phase.value), spent.total_seconds()))
    return found


def _increments(
    found: list[tuple[tuple[str, str], float]],
) -> dict[tuple[str, str], float]:
    """The histograms' increments for the phases observed, summed per series: a pass over
    hundreds of instances of one definition touches a few dozen rows, each once."""
    increments: dict[tuple[str, str], float] = {}

    def add(name: str, labels: str, amount: float) -> None:
        increments[(name, labels)] = increments.get((name, labels), 0.0) + amount

    for (definition, phase), seconds in found:
        base = {"definition": definition, "phase": phase}
        for bound in (*BUCKETS, float("inf")):
            if seconds <= bound:
                add("phase_seconds_bucket", labels_key({**base, "le": _bound(bound)}), 1.0)
        add("phase_seconds_sum", labels_key(base), seconds)
        add("phase_seconds_count", labels_key(base), 1.0)
    return increments


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def record_scheduler(
    platform: Platform, *, scheduler_id: str, last_tick_at: datetime | None, slots: dict[str, int]
) -> None:
    """The scheduler process's own figures: its loop's last tick and its executors' slots."""
    now = platform.now()
    with platform.engine.begin() as connection:
        if last_tick_at is not None:
            observations.record_last_tick(connection, scheduler_id, last_tick_at)
        for executor, count in sorted(slots.items()):
            metric_values.set_value(
                connection, "executor_slots", labels_key({"executor": executor}), count, now
            )


def flush_process_counts(platform: Platform) -> None:
    """Add this process's counted event outcomes to the table."""
    metric_values.flush(platform.engine, metric_values.PROCESS_TALLY, platform.now())


# -- reading: the scrape ---------------------------------------------------------------------


def registry(platform: Platform) -> CollectorRegistry:
    """A registry whose one collector reads the database when it is scraped."""
    found = CollectorRegistry(auto_describe=False)
    found.register(_DatabaseCollector(platform))
    return found


class _DatabaseCollector(Collector):
    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def collect(self) -> Iterator[Metric]:
        with dialects.read_transaction(self.platform.engine) as connection:
            yield from _instances(connection)
            yield from _alerts(connection)
            yield from _executors(connection)
            yield from _scheduler_lag(connection, self.platform.now())
            stored = metric_values.read(connection, (*_COUNTERS, *_HISTOGRAM, *_GAUGES))
        yield from _stored(stored)


def _instances(connection: Connection) -> Iterator[Metric]:
    unfinished = sorted(set(InstanceState) - TERMINAL_INSTANCE_STATES)
    counts = dict.fromkeys((state.value for state in unfinished), 0)
    counts.update(observations.instances_by_state(connection, list(counts)))
    family = GaugeMetricFamily(
        f"{PREFIX}_instances",
        "Unfinished task instances by state (finished ones: see veritask_events_total)",
        labels=["state"],
    )
    for state, count in sorted(counts.items()):
        family.add_metric([state], count)
    yield family


def _alerts(connection: Connection) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        f"{PREFIX}_alerts_open",
        "Unresolved alerts by owner category and status (open or acknowledged)",
        labels=["category", "status"],
    )
    for category, status, count in alerts.unresolved_by_category(connection):
        family.add_metric([category, status], count)
    yield family


def _executors(connection: Connection) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        f"{PREFIX}_executor_slots_in_use",
        "Attempts running (a worker started them) per executor",
        labels=["executor"],
    )
    for executor, count in observations.attempts_by_executor(
        connection, [AttemptState.RUNNING.value]
    ):
        family.add_metric([executor or ""], count)
    yield family


def _scheduler_lag(connection: Connection, now: datetime) -> Iterator[Metric]:
    rows = observations.schedulers(connection)
    alive = [row for row in rows if now - row.heartbeat_at <= STALE_AFTER]
    yield GaugeMetricFamily(
        f"{PREFIX}_schedulers_alive", "Schedulers whose lease heartbeat is fresh", value=len(alive)
    )
    ticks = [row.last_tick_at for row in alive if row.last_tick_at is not None]
    if ticks:
        yield GaugeMetricFamily(
            f"{PREFIX}_scheduler_loop_lag_seconds",
            "Seconds since the most recent tick of any live scheduler's loop finished",
            value=max(0.0, (now - max(ticks)).total_seconds()),
        )


def _stored(stored: list[metric_values.Value]) -> Iterator[Metric]:
    events = CounterMetricFamily(
        f"{PREFIX}_events",
        "Instance events by kind and outcome (applied, duplicate, stale, conflict, rejected)",
        labels=["kind", "outcome"],
    )
    decisions = CounterMetricFamily(
        f"{PREFIX}_reconciler_decisions",
        "Decisions the reconciler recorded, by event kind",
        labels=["kind"],
    )
    dropped = CounterMetricFamily(
        f"{PREFIX}_rejected_events_dropped",
        "Refused events counted but not stored: their attempt had its share of rejected_events",
        labels=["kind"],
    )
    refused = CounterMetricFamily(
        f"{PREFIX}_reports_refused",
        "Worker reports refused for their attempt's limits (rate, total), counted, not stored",
        labels=["kind", "limit"],
    )
    slots = GaugeMetricFamily(
        f"{PREFIX}_executor_slots", "Slots each executor offers", labels=["executor"]
    )
    buckets: dict[tuple[str, str], list[tuple[str, float]]] = {}
    sums: dict[tuple[str, str], float] = {}
    for value in stored:
        labels = value.labels
        match value.name:
            case "events_total":
                events.add_metric([labels.get("kind", ""), labels.get("outcome", "")], value.value)
            case "reconciler_decisions_total":
                decisions.add_metric([labels.get("kind", "")], value.value)
            case rejections.DROPPED_METRIC:
                dropped.add_metric([labels.get("kind", "")], value.value)
            case ledger.REFUSED_METRIC:
                refused.add_metric([labels.get("kind", ""), labels.get("limit", "")], value.value)
            case "executor_slots":
                slots.add_metric([labels.get("executor", "")], value.value)
            case "phase_seconds_bucket":
                key = (labels.get("definition", ""), labels.get("phase", ""))
                buckets.setdefault(key, []).append((labels.get("le", "+Inf"), value.value))
            case "phase_seconds_sum":
                sums[(labels.get("definition", ""), labels.get("phase", ""))] = value.value
    histogram = HistogramMetricFamily(
        f"{PREFIX}_phase_seconds",
        "Time per phase of instances that finished, per definition",
        labels=["definition", "phase"],
    )
    for key, found in sorted(buckets.items()):
        # A bucket no observation reached has no row: it counts 0.
        counts = dict(found)
        ordered = [(_bound(b), counts.get(_bound(b), 0.0)) for b in (*BUCKETS, float("inf"))]
        histogram.add_metric(list(key), ordered, sums.get(key, 0.0))
    yield from (events, decisions, dropped, refused, slots, histogram)

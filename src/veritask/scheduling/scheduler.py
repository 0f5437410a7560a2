"""The scheduler's loop: which runs to move (see ``advance``), engines' answers, worker reports.

Each ``tick`` loads what is due from the database (the truth about what is active), decides
with the pure core, records with compare-and-set, then acts on the engines. It keeps nothing
in memory that a restart would need: ``retry_at`` is stored, attempts are opened before they
are submitted, and submitting is idempotent, so a killed scheduler's successor finishes its
work without duplicating it (docs/scheduling.md, section 5; guarantee 10 of
docs/outcomes-and-fencing.md).

What it does keep in memory only saves work: which runs had news since they were last
advanced (a worker report, a decision, a due retry), so that a tick reads just those; every
``full_scan_every`` it reads every active run anyway. See docs/scheduling.md.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import logging
import math
import select
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from veritask.core import alert_messages, judge
from veritask.core.events import Event, EventKind
from veritask.core.states import InstanceState
from veritask.definitions.model import WAIT_EXECUTOR, Definition
from veritask.execution import outbox_watch, port, transports, wait_http, waits, wire
from veritask.ledger import active_runs, alerts, dialects, errors, run_store
from veritask.ledger.active_runs import ActiveRun
from veritask.ledger.ledger import Applied, Ledger
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import (
    backfills,
    gathering,
    intake,
    overdue,
    publication_triggers,
    sharing,
    sweeps,
    triggers,
)
from veritask.scheduling.advance import (
    Advanced,
    Definitions,
    RunAdvancer,
    TickReport,
)
from veritask.scheduling.dispatch import (
    Dispatcher,
    RunContext,
    Submissions,
)
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

log = logging.getLogger(__name__)

#: An instance that moves between these tells its run nothing it could act on.
_ACTIVE = frozenset({InstanceState.QUEUED, InstanceState.RUNNING})
#: A task nothing waits for that ends so only lets its run end; any other end may fail it.
_END_DONE = frozenset({InstanceState.SUCCESS, InstanceState.SKIPPED})
#: Bound of the instance -> run map that routes worker reports to their runs.
_ROUTES_LIMIT = 200_000
#: How soon a run created by another process (or moved by one: a cancel) is found when no
#: run has news; a run with news is read at once.
_DISCOVER_EVERY_SECONDS = 0.02
#: How often the idle loop looks at the outbox while it waits, where inotify cannot tell.
_IDLE_POLL_SECONDS = 0.001
#: A big run whose instances' states did not move since it was read is skipped by the full
#: scan (the database sums its states instead), but read anyway after this long.
_DIGEST_TRUSTED_SECONDS = 30.0
#: How long a big run's digest found unchanged stands before the database is asked again.
_DIGEST_CHECK_SECONDS = 5.0
#: How long a report of another scheduler's run is left in a shared outbox for its owner,
#: whose news it is, before this scheduler records it anyway (the owner may be dead). The
#: outbox is listed at least once a second (``outbox_watch.LIST_ANYWAY_SECONDS``).
_FOREIGN_GRACE_SECONDS = 1.0


class _Digest(NamedTuple):
    """A big run's instance states when it was last read, and when the database last said
    they had not moved since."""

    states: run_store.StatesDigest
    read_at: float
    checked_at: float = -math.inf


class _Handed:
    """The source of a report handed over in memory: no file to let go once recorded."""


_HANDED = _Handed()


class Scheduler:
    """One scheduler process's loop over the shared ledger."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        executors: Mapping[str, port.Executor],
        tokens: AttemptTokens,
        outbox: Path,
        settings: Settings | None = None,
        commit_base_url: str | None = None,
        submit_threads: int = 4,
        membership: sharing.Membership | None = None,
        wait_http_allow: wait_http.HttpAllow | None = None,
        submit_pool: Callable[[int], Executor] | None = None,
    ) -> None:
        """``membership``: who shares the runs with this scheduler (PostgreSQL); without it,
        every run is this one's. ``wait_http_allow``: the loopback, link-local or metadata
        hosts its ``http`` waits may reach (``VERITASK_WAIT_HTTP_ALLOW``, read at start).
        ``submit_pool``: what runs the submissions (``Submissions``; threads by default)."""
        self.ledger = ledger
        self.settings = settings or Settings()
        self.outbox = outbox
        outbox.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._outbox_watch = outbox_watch.OutboxWatch(outbox)
        # Every scheduler checks waits, with no setting: the checker lives in this process.
        self._own_waits: waits.WaitExecutor | None = None
        #: Its progress reports and heartbeats, handed over in memory (``_hand_over``).
        self._handed: collections.deque[wire.WorkerEvent] = collections.deque()
        if WAIT_EXECUTOR not in executors:
            self._own_waits = waits.WaitExecutor(
                http_allow=wait_http_allow,
                overdue=overdue.alerter(ledger),
                hand_over=self._hand_over,
            )
            executors = {**executors, WAIT_EXECUTOR: self._own_waits}
        self.dispatcher = Dispatcher(
            executors=executors,
            tokens=tokens,
            outbox=outbox,
            commit_base_url=commit_base_url,
            outputs=ledger.current_outputs,
            map_items=ledger.map_items,
        )
        self._wake = outbox_watch.Wake()
        self.submissions = Submissions(
            self.dispatcher,
            clock=ledger.clock,
            workers=submit_threads,
            wake=lambda: self._wake.set(),  # the wake of the loop running now
            pool=submit_pool,
        )
        self.sweeper = sweeps.Sweeper(ledger, self.dispatcher, self.settings, self.submissions)
        self.membership = membership
        #: This scheduler's share of the runs (docs/scheduling.md, section 6).
        self.share = sharing.Share(membership.me if membership is not None else "")
        # Reports of other schedulers' runs in a shared outbox: when each was first seen.
        self._foreign: dict[tuple[str, int, int], float] = {}
        self.definitions = Definitions(ledger)
        self.advancer = RunAdvancer(
            ledger,
            settings=self.settings,
            dispatcher=self.dispatcher,
            submissions=self.submissions,
            sweeper=self.sweeper,
            definitions=self.definitions,
        )
        self._last: dict[str, datetime] = {}
        # Runs known to be active, as last read; those with news since they were advanced;
        # when instances waiting for a time come due; which run each instance belongs to.
        self._runs: dict[str, ActiveRun] = {}
        self._dirty: set[str] = set()
        self._timers: list[tuple[datetime, str]] = []
        self._routes: dict[str, str] = {}
        # Instances no task waits for, and the runs with such news held until a timer.
        self._ends: set[str] = set()
        self._settling: set[str] = set()
        # For each running run, its tasks' instances that had not ended when it was advanced.
        self._unended: dict[str, set[str]] = {}
        #: Runs with tasks waiting for a pool: any attempt that ends may have freed a slot.
        self._pool_waiting: set[str] = set()
        #: Big runs' instance states when last advanced (``_unchanged_runs``).
        self._digests: dict[str, _Digest] = {}
        self._rescan = True
        self._loaded_at = float("-inf")
        self._newest_run: datetime | None = None
        self._held_back = False
        self._stops_due = True
        self.gathering = gathering.Gathering(
            window=self.settings.gather_window.total_seconds(),
            from_in_flight=self.settings.gather_from,
        )
        #: When the loop last finished a tick: its lag is a metric (services/metrics.py).
        self.last_tick_at: datetime | None = None

    @property
    def clock(self) -> sweeps.Clock:
        return self.ledger.clock

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Recover, then tick until ``stop`` is set; submissions in flight are recorded."""
        # A loop stopped (closed) and started again listens anew.
        if self._wake.closed:
            self._wake = outbox_watch.Wake()
        if self._outbox_watch.closed:
            self._outbox_watch = outbox_watch.OutboxWatch(self.outbox)
        self.submissions.connect()
        self._recover_until_done(stop)
        try:
            while not stop.is_set():
                tick_started = time.monotonic()
                try:
                    report = self.tick()
                except errors.LedgerError as exc:
                    # The database hiccuped (busy, restarted): nothing was half-written, so
                    # wait and take the same work again.
                    log.warning("tick failed, retrying: %s", exc)
                    self._rescan = True
                    stop.wait(0.5)
                    continue
                except Exception:  # a bug must not stop scheduling: log it, go on
                    log.exception("tick failed")
                    self._rescan = True
                    stop.wait(0.5)
                    continue
                if report.work == 0:
                    self._idle(stop)
                elif pause := self.gathering.pause_after(tick_started):
                    stop.wait(pause)
        finally:
            try:
                self.close()
            except errors.LedgerError as exc:
                log.warning("could not record the last acknowledgements: %s", exc)

    def close(self) -> None:
        """Wait for the submissions in flight and record their answers (for callers of tick)."""
        self.submissions.close()
        self._record_answers(TickReport())
        if self._own_waits is not None:
            self._own_waits.close()
        self._post_handed()
        self._outbox_watch.close()
        self._wake.close()

    def _recover_until_done(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                reconciled = self.recover()
                # Operators (and tests) read this line as "past recovery, scheduling now".
                log.info("recovery done: %d instances reconciled with their engines", reconciled)
                return
            except errors.LedgerError as exc:
                log.warning("recovery failed, retrying: %s", exc)
                stop.wait(0.5)
            except Exception:  # the periodic reconciler covers what recovery could not
                log.exception("recovery failed; going on with the loop")
                return

    def _idle(self, stop: threading.Event) -> None:
        """Sleep up to ``idle_sleep``, waking early for worker reports or engine answers.

        With inotify the wait is one ``select`` on the outbox's watch and the submissions'
        wake; without it the outbox is looked into every millisecond.
        """
        give_up_at = time.monotonic() + self.settings.idle_sleep.total_seconds()
        while not stop.is_set():
            if self._wake.is_set() or (self._handed and not self._held_back):
                return
            # Reports held back for a submission in flight wait for its answer (the wake).
            watching = not self._held_back
            if watching and self._outbox_watch.news():
                return
            left = give_up_at - time.monotonic()
            if left <= 0:
                return
            readable = [self._wake.fileno()]
            outbox_fd = self._outbox_watch.fileno()
            if not watching:
                pass
            elif outbox_fd is not None:
                readable.append(outbox_fd)
            else:
                left = min(left, _IDLE_POLL_SECONDS)
            select.select(readable, [], [], left)

    def recover(self) -> int:
        """At start: every active instance of this scheduler's share is reconciled with its
        engine (docs/scheduling.md, 5)."""
        self._rescan = True
        if self.membership is not None:
            self._take_share(self.membership.read(self.clock()))
        return self.sweeper.reconcile(self.clock(), self.context_for, everything=True)

    def _refresh_share(self, now: datetime) -> int:
        """Read who is alive (every few seconds); take up the runs that became this one's.

        A run whose owner left is recovered as a restart would: its instances are reconciled
        with their engines at once (an attempt opened but never submitted by the dead one is
        submitted now, not after ``submit_grace``), and the full scan of the next tick
        advances it.
        """
        if self.membership is None or not self.membership.due():
            return 0
        before = self.share
        after = self.membership.read(now)
        if after.members == before.members:
            return 0
        self._take_share(after)
        if not set(before.members) <= set(after.members):

            def taken(run_id: str) -> bool:
                return after.owns(run_id) and not before.owns(run_id)

            return self.sweeper.reconcile(now, self.context_for, everything=True, runs=taken)
        return 0

    def _take_share(self, share: sharing.Share) -> None:
        if share.members != self.share.members:
            log.info("sharing work with %d schedulers: %s", len(share.members), share.describe())
        self.share = share
        self.sweeper.owns = share.owns
        self._rescan = True  # runs newly owned are read (and advanced) at the next tick

    def tick(self) -> TickReport:
        report = TickReport()
        now = self.clock()
        report.swept += self._refresh_share(now)
        full = self._due("full", now, self.settings.full_scan_every) or self._rescan
        self._rescan = False
        if self._due("schedules", now, self.settings.monitor_every):
            report.runs_moved += self._fire_schedules(now)
            report.runs_moved += self._start_published_runs()
            report.runs_moved += self._advance_backfills()
        if full or report.runs_moved:
            report.runs_moved += self._start_queued_runs()
        full = full or self._rescan
        self._rescan = False
        report.reports += self.drain_outbox()
        while self._timers and self._timers[0][0] <= now:
            due = heapq.heappop(self._timers)[1]
            self._dirty.add(due)
            self._settling.discard(due)
        # A tick of reports only has nothing to read the runs for yet.
        reading = full or self._dirty or self._discovery_due()
        runs = self._load_runs(full) if reading else self._runs
        if full:
            unchanged = self._unchanged_runs(runs)
            targets = [run for run in runs.values() if run.id not in unchanged]
            # Every run read now sets its timers again; the ones left keep theirs.
            self._timers = [timer for timer in self._timers if timer[1] in unchanged]
            heapq.heapify(self._timers)
            self._settling &= unchanged
        else:
            targets = [runs[r] for r in self._dirty if r in runs]
        self._dirty.clear()
        for run in targets:
            try:
                self._remember(self.advancer.advance(run, now, report))
            except errors.LedgerConflict:
                self._dirty.add(run.id)  # another writer moved it; look again next tick
            except errors.LedgerError:
                self._dirty.add(run.id)
                raise
            except Exception:  # one run that errors never stops the others
                log.exception("advancing run %s failed", run.id, extra={"run_id": run.id})
                self._alert_run(run.id, alert_messages.ADVANCE_FAILED.format())
        if report.runs_moved:
            report.runs_moved += self._start_queued_runs()
        if self._due("monitor", now, self.settings.monitor_every):
            report.swept += self.sweeper.monitor(now, self.context_for)
        if self._due("reconcile", now, self.settings.reconcile_every):
            report.swept += self.sweeper.reconcile(now, self.context_for)
        if full or self._stops_due:
            self._stops_due = False
            report.decided += self.sweeper.send_pending_stops(self.context_for)
        if report.swept:
            self._rescan = True  # decisions of the sweeps may move runs on
        self.last_tick_at = now
        return report

    def _discovery_due(self) -> bool:
        """Whether to look for new runs (and runs someone else moved) though none has news.

        Most ticks of a busy scheduler only record reports; reading the active runs for
        each of them would cost more than the reports. On a monotonic clock: a test's frozen
        ledger clock must not hide new runs.
        """
        return time.monotonic() - self._loaded_at >= _DISCOVER_EVERY_SECONDS

    def _unchanged_runs(self, runs: Mapping[str, ActiveRun]) -> set[str]:
        """The big runs a full scan need not read: no news, and their instances' states are
        what they were when they were last advanced (digests the database computes).

        A full scan is the safety net for what this process did not see: another process's
        report, a missed wake-up. Re-reading a run of ten thousand waits each second to find
        it unchanged cost most of an otherwise idle scheduler.
        """
        self._digests = {r: d for r, d in self._digests.items() if r in runs}
        trusted_since = time.monotonic() - _DIGEST_TRUSTED_SECONDS
        # A digest checked a moment ago stands: what another process records in such a run
        # is read within seconds, and one grouped query over ten thousand instances at every
        # full scan cost more than all the waits' checks.
        checked_since = time.monotonic() - _DIGEST_CHECK_SECONDS
        unchanged: set[str] = set()
        asked: list[str] = []
        for run_id, digest in self._digests.items():
            if digest.read_at < trusted_since or run_id in self._dirty:
                continue
            if digest.checked_at >= checked_since:
                unchanged.add(run_id)
            else:
                asked.append(run_id)
        if not asked:
            return unchanged
        with dialects.read_transaction(self.ledger.engine) as connection:
            now = run_store.states_digests(connection, asked)
        checked_at = time.monotonic()
        for run_id in asked:
            if now[run_id] == self._digests[run_id].states:
                unchanged.add(run_id)
                self._digests[run_id] = self._digests[run_id]._replace(checked_at=checked_at)
        return unchanged

    def _remember(self, advanced: Advanced) -> None:
        if len(self._routes) > _ROUTES_LIMIT:
            self._routes.clear()
            self._ends.clear()
            self._unended.clear()
        for instance_id in advanced.instance_ids:
            self._routes[instance_id] = advanced.run_id
        self._ends.update(advanced.end_ids)
        if advanced.unended_ids:
            self._unended[advanced.run_id] = advanced.unended_ids
        else:
            self._unended.pop(advanced.run_id, None)
        if advanced.digest is not None:
            self._digests[advanced.run_id] = _Digest(advanced.digest, time.monotonic())
        else:
            self._digests.pop(advanced.run_id, None)
        if advanced.pool_waiting:
            self._pool_waiting.add(advanced.run_id)
        else:
            self._pool_waiting.discard(advanced.run_id)
        for moment in advanced.wake_at:
            heapq.heappush(self._timers, (moment, advanced.run_id))
        if advanced.again:
            self._dirty.add(advanced.run_id)
        self._stops_due = self._stops_due or advanced.stops_due

    def _fire_schedules(self, now: datetime) -> int:
        try:
            return triggers.fire_schedules(self.ledger, now)
        except errors.LedgerConflict:
            return 0  # another scheduler fired the same run first; the next pass sees it
        except errors.LedgerError:
            raise
        except Exception:  # a stored definition that no longer reads: the rest goes on
            log.exception("firing schedules failed")
            return 0

    def _start_published_runs(self) -> int:
        try:
            return publication_triggers.start_published_runs(self.ledger)
        except errors.LedgerConflict:
            return 0  # another scheduler moved the same run first; the next pass sees it
        except errors.LedgerError:
            raise
        except Exception:  # a stored definition that no longer reads: the rest goes on
            log.exception("starting runs of published data failed")
            return 0

    def _advance_backfills(self) -> int:
        """The next runs of the active backfills, as earlier ones end (backfills.py)."""
        try:
            made = backfills.advance_backfills(self.ledger)
        except errors.LedgerConflict:
            return 0  # another writer moved one of its runs; the next pass sees it
        except errors.LedgerError:
            raise
        except Exception:  # a backfill that cannot go on never stops the loop
            log.exception("advancing backfills failed")
            return 0
        if made:
            self._rescan = True
        return made

    def _start_queued_runs(self) -> int:
        try:
            started = triggers.start_queued_runs(self.ledger)
        except errors.LedgerConflict:
            started = 0  # another scheduler started it first
        if started:
            self._rescan = True  # a run started long after it was created: look for it
        return started

    def _due(self, name: str, now: datetime, every: timedelta) -> bool:
        last = self._last.get(name)
        if last is None or now - last >= every:
            self._last[name] = now
            return True
        return False

    # -- engines' answers and worker reports --------------------------------------------------

    def _record_answers(self, report: TickReport) -> None:
        """Record the acknowledgements (or failures) of the submissions that came back."""
        report.submitted += self._intake(self.submissions.take(), [])

    def _hand_over(self, report: wire.WorkerEvent) -> None:
        """Take a report of a wait this process checks (a checker thread calls this)."""
        first = not self._handed
        self._handed.append(report)
        if first:
            self._wake.set()

    def _post_handed(self) -> None:
        """Leave the reports handed over and not recorded in the outbox, for whoever runs next."""
        while self._handed:
            report = self._handed.popleft()
            try:
                transports.post(self.outbox, report)
            except OSError as exc:  # as a report that could not be delivered
                log.warning("could not keep a report of %s: %s", report["instance_id"], exc)

    def drain_outbox(self) -> int:
        """Record the engines' answers and the local workers' reports; let the files go."""
        answers = self.submissions.take()
        answered = {(a.instance_id, a.attempt_no) for a in answers}

        def unanswered(event: Event) -> bool:
            """Its submission's acknowledgement is not back yet: record that first (QUEUED
            before RUNNING)."""
            key = (event.instance_id, event.attempt_no)
            return key not in answered and self.submissions.in_flight(*key)

        reports: list[tuple[Path | _Handed, Event]] = []
        self._held_back = False
        # Taken before the outbox is listed: a wait's files (its ``started``) were written
        # before its reports in memory, so they are in the listing below.
        handed = [self._handed.popleft() for _ in range(len(self._handed))]
        taken: list[wire.WorkerEvent] = []
        kept: list[wire.WorkerEvent] = []
        for report in handed:
            event = intake.to_event(report)
            if unanswered(event):
                kept.append(report)  # after its acknowledgement, as a file would be
                continue
            taken.append(report)
            reports.append((_HANDED, event))
        listed: Iterable[tuple[Path, wire.WorkerEvent]] = ()
        if self._outbox_watch.take():
            # Reports left for other schedulers are not news until their grace is over: the
            # outbox is listed again on the next arrival, or within a second anyway.
            takes = None if self.share.solo else self._takes()
            listed = transports.drain_outbox(self.outbox, takes=takes)
        for path, payload in listed:
            try:
                event = intake.to_event(payload)
            except intake.MalformedReport as exc:
                log.warning("unreadable report %s: %s", path.name, exc)
                with contextlib.suppress(FileNotFoundError):  # another scheduler took it
                    path.rename(path.with_name(path.name + ".invalid"))
                continue
            if unanswered(event):
                self._held_back = True
                continue
            reports.append((path, event))
        if self._held_back:
            self._outbox_watch.keep()
        if kept:
            self._held_back = True
            self._handed.extendleft(reversed(kept))
        try:
            return self._intake(answers, reports)
        except BaseException:
            self._outbox_watch.keep()  # the reports not recorded stay in the outbox
            self._handed.extendleft(reversed(taken))  # recorded twice at worst: one event id
            raise

    def _takes(self) -> Callable[[tuple[str, int, int]], bool]:
        """Which reports of a shared outbox to record now: those of this scheduler's runs,
        and any other left longer than ``_FOREIGN_GRACE_SECONDS`` (its owner is away).

        Each scheduler records its own runs' reports, so the news reaches the scheduler that
        acts on it; any scheduler records a report its owner leaves, so nothing waits for a
        dead one (docs/scheduling.md, section 6).
        """
        now = time.monotonic()
        seen, self._foreign = self._foreign, {}

        def takes(key: tuple[str, int, int]) -> bool:
            run_id = self._routes.get(key[0])
            if run_id is not None and self.share.owns(run_id):
                return True
            first = seen.get(key, now)
            if now - first >= _FOREIGN_GRACE_SECONDS:
                return True
            self._foreign[key] = first
            return False

        return takes

    def _intake(self, answers: list[Event], reports: list[tuple[Path | _Handed, Event]]) -> int:
        """Record answers and reports together, in batches, each instance's in one batch.

        One batch per tick instead of one per source: the acknowledgement, ``started`` and
        ``completed`` of a short task often arrive together, and then its snapshot and attempt
        rows are written once. Batches go in instance order (and each instance's events in
        arrival order, answers first), so two schedulers' batches lock rows in the same order.
        """
        if not answers and not reports:
            return 0
        self._wake.clear()
        by_instance: dict[str, list[tuple[Path | _Handed | None, Event]]] = {}
        for answer in answers:
            by_instance.setdefault(answer.instance_id, []).append((None, answer))
        for path, event in reports:
            by_instance.setdefault(event.instance_id, []).append((path, event))
        chunk: list[tuple[Path | _Handed | None, Event]] = []
        recorded = 0
        try:
            for instance_id in sorted(by_instance):
                chunk += by_instance[instance_id]
                if len(chunk) >= self.settings.batch:
                    recorded += self._record_chunk(chunk)
                    chunk = []
            if chunk:
                recorded += self._record_chunk(chunk)
        except BaseException:
            # Not recorded: the answers wait for the next tick (the files stay in the outbox).
            self.submissions.give_back(
                [a for a in answers if self.submissions.in_flight(a.instance_id, a.attempt_no)]
            )
            raise
        return recorded

    def _record_chunk(self, chunk: list[tuple[Path | _Handed | None, Event]]) -> int:
        """Record one batch; ``None`` marks an engine's answer, a path a report's file."""
        results = self.ledger.apply_batch([event for _, event in chunk])
        self.submissions.settle([event for path, event in chunk if path is None])
        for path, _ in chunk:
            if isinstance(path, Path):
                transports.acknowledge(path)
        self._touch(
            (event, result)
            for (path, event), result in zip(chunk, results, strict=True)
            if path is not None or event.kind is EventKind.SUBMIT_FAILED
        )
        for (_, event), result in zip(chunk, results, strict=True):
            if result.outcome is not judge.Outcome.REJECTED:
                self.gathering.note(event.instance_id, in_flight=result.state in _ACTIVE)
            intake.heed_verdict(
                self.ledger, event, result, run_id=self._routes.get(event.instance_id)
            )
        return len(chunk)

    def _touch(self, news: Iterable[tuple[Event, Applied]]) -> None:
        """Mark the runs these events moved; an unknown instance means read them all.

        A task that was queued or started changes nothing its run could act on, and the
        success of a task nothing waits for only lets the run end: that news waits up to
        ``leaf_settle``, so that a run of thousands of independent tasks is read once per
        window, not once per tick. The success of the run's last unended task does not wait:
        the run ends with it.
        """
        for event, result in news:
            run_id = self._routes.get(event.instance_id)
            if run_id is not None and result.state not in _ACTIVE and self._pool_waiting:
                # An attempt that ended freed its pool's slots: the runs waiting read at once.
                self._dirty.update(self._pool_waiting)
            if run_id is None:
                # Unknown here: a run this one has not read yet, or (sharing) another's.
                self._rescan = self._rescan or self.share.solo
            elif result.state in _ACTIVE:
                continue
            elif run_id in self._pool_waiting:
                self._dirty.add(run_id)
            elif result.state in _END_DONE and event.instance_id in self._ends:
                unended = self._unended.get(run_id)
                if unended is not None:
                    unended.discard(event.instance_id)
                    if not unended:
                        self._dirty.add(run_id)
                        continue
                if run_id not in self._settling:
                    self._settling.add(run_id)
                    settle_at = self.clock() + self.settings.leaf_settle
                    heapq.heappush(self._timers, (settle_at, run_id))
            else:
                self._dirty.add(run_id)

    # -- runs --------------------------------------------------------------------------------

    def _load_runs(self, full: bool) -> dict[str, ActiveRun]:
        """The active runs: all of them on a full scan, else the known ones and any new one.

        New runs are found by their creation time (indexed), with a margin for clocks and
        commits that land out of order; the full scan catches whatever that misses.
        """
        since = None
        if not full and self._newest_run is not None:
            since = self._newest_run - timedelta(seconds=2)
        self._loaded_at = time.monotonic()
        with dialects.read_transaction(self.ledger.engine) as connection:
            loaded = active_runs.active_runs(connection, since=since, known=self._runs)
        runs: dict[str, ActiveRun] = {}
        for run in loaded:
            if self._newest_run is None or run.created_at > self._newest_run:
                self._newest_run = run.created_at
            if not self.share.owns(run.id):
                continue  # another scheduler's (section 6)
            previous = self._runs.get(run.id)
            if previous is None or previous.version != run.version:
                self._dirty.add(run.id)  # new, or moved by someone else (a cancel request)
            runs[run.id] = run
        if full and self._newest_run is None:
            self._newest_run = self.clock()
        self._runs = runs
        return runs

    def definition(self, definition_id: str, version: int) -> Definition:
        return self.definitions.get(definition_id, version)

    def context_for(self, run_id: str) -> RunContext:
        known = self._runs.get(run_id)
        if known is not None:
            definition = self.definition(known.definition_id, known.definition_version)
            return RunContext(run_id, definition, known.logical_time, known.parameters)
        with dialects.read_transaction(self.ledger.engine) as connection:
            origin = active_runs.run_origin(connection, run_id)
        definition = self.definition(origin.definition_id, origin.definition_version)
        return RunContext(run_id, definition, origin.logical_time, origin.parameters)

    # -- alerts --------------------------------------------------------------------------------

    def _alert_run(self, run_id: str, message: str) -> None:
        alerts.raise_quietly(
            self.ledger,
            category=AlertCategory.PLATFORM,
            dedup_key=f"platform:run:{run_id}",
            message=message,
            run_id=run_id,
            evidence={},
        )

"""The scheduler: moves runs forward, hands attempts to engines, takes in worker reports.

Each ``tick`` loads what is due from the database (the truth about what is active), decides
with the pure core, records with compare-and-set, then acts on the engines. It keeps nothing
in memory that a restart would need: ``retry_at`` is stored, attempts are opened before they
are submitted, and submitting is idempotent, so a killed scheduler's successor finishes its
work without duplicating it (design.md 5.5, invariant 10).

What it does keep in memory only saves work: which runs had news since they were last
advanced (a worker report, a decision, a due retry), so that a tick reads just those; every
``full_scan_every`` it reads every active run anyway. See docs/scheduling.md.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from veritask.core import decide, judge, run_state, trigger_rules
from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONObject
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.definitions.model import Definition
from veritask.definitions.parse import definition_from_json
from veritask.execution import port, transports
from veritask.ledger import alerts, dialects, errors, run_store, schema
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import dependencies, intake, publication, rules, sweeps, triggers
from veritask.scheduling.dispatch import (
    Dispatcher,
    Opened,
    RunContext,
    Submissions,
    new_event_id,
)
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

log = logging.getLogger(__name__)

_ACTIVE_RUNS = (RunExecutionState.RUNNING.value, RunExecutionState.CANCELLING.value)
_PUBLISHING = (
    PublicationState.PENDING.value,
    PublicationState.CHECKING.value,
    PublicationState.PUBLISHING.value,
)
#: How soon an instance whose predecessor is still being stopped is looked at again.
_REPLACE_POLL = timedelta(milliseconds=250)
#: Bound of the instance -> run map that routes worker reports to their runs.
_ROUTES_LIMIT = 200_000
#: How often the idle loop looks at the outbox while it waits.
_IDLE_POLL_SECONDS = 0.001


@dataclass(frozen=True)
class _RunRow:
    id: str
    definition_id: str
    definition_version: int
    logical_time: datetime | None
    parameters: JSONObject
    execution_state: RunExecutionState
    version: int
    publication_state: PublicationState
    created_at: datetime


@dataclass
class TickReport:
    """What one tick did; zero everywhere means the scheduler may sleep."""

    opened: int = 0
    decided: int = 0
    submitted: int = 0
    reports: int = 0
    swept: int = 0
    runs_moved: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def work(self) -> int:
        return self.opened + self.decided + self.submitted + self.reports + self.runs_moved


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
    ) -> None:
        self.ledger = ledger
        self.settings = settings or Settings()
        self.outbox = outbox
        outbox.mkdir(parents=True, exist_ok=True)
        self.dispatcher = Dispatcher(
            executors=executors, tokens=tokens, outbox=outbox, commit_base_url=commit_base_url
        )
        self._wake = threading.Event()
        self.submissions = Submissions(
            self.dispatcher, clock=ledger.clock, workers=submit_threads, wake=self._wake.set
        )
        self.sweeper = sweeps.Sweeper(ledger, self.dispatcher, self.settings, self.submissions)
        self._definitions: dict[tuple[str, int], Definition] = {}
        # Keyed by the identity of a cached definition, which lives as long as the cache.
        self._graphs: dict[int, run_state.RunGraph] = {}
        self._last: dict[str, datetime] = {}
        # Runs known to be active, as last read; those with news since they were advanced;
        # when instances waiting for a time come due; which run each instance belongs to.
        self._runs: dict[str, _RunRow] = {}
        self._dirty: set[str] = set()
        self._timers: list[tuple[datetime, str]] = []
        self._routes: dict[str, str] = {}
        self._rescan = True
        self._newest_run: datetime | None = None
        self._held_back = False
        self._stops_due = True
        #: When the loop last finished a tick: its lag is a metric (services/metrics.py).
        self.last_tick_at: datetime | None = None

    @property
    def clock(self) -> sweeps.Clock:
        return self.ledger.clock

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Recover, then tick until ``stop`` is set; submissions in flight are recorded."""
        self._recover_until_done(stop)
        try:
            while not stop.is_set():
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
        finally:
            try:
                self.close()
            except errors.LedgerError as exc:
                log.warning("could not record the last acknowledgements: %s", exc)

    def close(self) -> None:
        """Wait for the submissions in flight and record their answers (for callers of tick)."""
        self.submissions.close()
        self._record_answers(TickReport())

    def _recover_until_done(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.recover()
                return
            except errors.LedgerError as exc:
                log.warning("recovery failed, retrying: %s", exc)
                stop.wait(0.5)
            except Exception:  # the periodic reconciler covers what recovery could not
                log.exception("recovery failed; going on with the loop")
                return

    def _idle(self, stop: threading.Event) -> None:
        """Sleep up to ``idle_sleep``, waking early for worker reports or engine answers."""
        give_up = self.settings.idle_sleep.total_seconds()
        waited = 0.0
        while waited < give_up and not stop.is_set():
            if self._wake.is_set():
                return
            # Reports held back for a submission in flight wait for its answer (the wake).
            if not self._held_back and _has_entries(self.outbox):
                return
            self._wake.wait(_IDLE_POLL_SECONDS)
            waited += _IDLE_POLL_SECONDS

    def recover(self) -> int:
        """At start: every active instance is reconciled with its engine (design.md 5.5)."""
        self._rescan = True
        return self.sweeper.reconcile(self.clock(), self.context_for, everything=True)

    def tick(self) -> TickReport:
        report = TickReport()
        now = self.clock()
        full = self._due("full", now, self.settings.full_scan_every) or self._rescan
        self._rescan = False
        if self._due("schedules", now, self.settings.monitor_every):
            report.runs_moved += self._fire_schedules(now)
        if full or report.runs_moved:
            report.runs_moved += self._start_queued_runs()
        full = full or self._rescan
        self._rescan = False
        report.reports += self.drain_outbox()
        runs = self._load_runs(full)
        while self._timers and self._timers[0][0] <= now:
            self._dirty.add(heapq.heappop(self._timers)[1])
        targets = list(runs.values()) if full else [runs[r] for r in self._dirty if r in runs]
        self._dirty.clear()
        if full:
            self._timers = []
        for run in targets:
            try:
                self._advance(run, now, report)
            except errors.LedgerConflict:
                self._dirty.add(run.id)  # another writer moved it; look again next tick
            except errors.LedgerError:
                self._dirty.add(run.id)
                raise
            except Exception:  # one run that errors never stops the others
                log.exception("advancing run %s failed", run.id)
                self._alert_run(run.id, "the scheduler failed to advance this run")
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

    def drain_outbox(self) -> int:
        """Record the engines' answers and the local workers' reports; let the files go."""
        answers = self.submissions.take()
        answered = {(a.instance_id, a.attempt_no) for a in answers}
        reports: list[tuple[Path, Event]] = []
        self._held_back = False
        for path, payload in transports.drain_outbox(self.outbox):
            try:
                event = intake.to_event(payload)
            except intake.MalformedReport as exc:
                log.warning("unreadable report %s: %s", path.name, exc)
                with contextlib.suppress(FileNotFoundError):  # another scheduler took it
                    path.rename(path.with_name(path.name + ".invalid"))
                continue
            key = (event.instance_id, event.attempt_no)
            if key not in answered and self.submissions.in_flight(*key):
                # Its acknowledgement is not back yet: record that first (design.md 3.2).
                self._held_back = True
                continue
            reports.append((path, event))
        return self._intake(answers, reports)

    def _intake(self, answers: list[Event], reports: list[tuple[Path, Event]]) -> int:
        """Record answers and reports together, in batches, each instance's in one batch.

        One batch per tick instead of one per source: the acknowledgement, ``started`` and
        ``completed`` of a short task often arrive together, and then its snapshot and attempt
        rows are written once. Batches go in instance order (and each instance's events in
        arrival order, answers first), so two schedulers' batches lock rows in the same order.
        """
        if not answers and not reports:
            return 0
        self._wake.clear()
        by_instance: dict[str, list[tuple[Path | None, Event]]] = {}
        for answer in answers:
            by_instance.setdefault(answer.instance_id, []).append((None, answer))
        for path, event in reports:
            by_instance.setdefault(event.instance_id, []).append((path, event))
        chunk: list[tuple[Path | None, Event]] = []
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

    def _record_chunk(self, chunk: list[tuple[Path | None, Event]]) -> int:
        results = self.ledger.apply_batch([event for _, event in chunk])
        self.submissions.settle([event for path, event in chunk if path is None])
        for path, _ in chunk:
            if path is not None:
                transports.acknowledge(path)
        self._touch(
            event.instance_id
            for path, event in chunk
            if path is not None or event.kind is EventKind.SUBMIT_FAILED
        )
        for (_, event), result in zip(chunk, results, strict=True):
            if result.outcome is judge.Outcome.CONFLICT:
                self._alert_conflict(event, result.reason)
        return len(chunk)

    def _touch(self, instance_ids: Iterable[str]) -> None:
        """The runs of these instances have news; an unknown instance means read them all."""
        for instance_id in instance_ids:
            run_id = self._routes.get(instance_id)
            if run_id is None:
                self._rescan = True
            else:
                self._dirty.add(run_id)

    # -- runs --------------------------------------------------------------------------------

    def _load_runs(self, full: bool) -> dict[str, _RunRow]:
        """The active runs: all of them on a full scan, else the known ones and any new one.

        New runs are found by their creation time (indexed), with a margin for clocks and
        commits that land out of order; the full scan catches whatever that misses.
        """
        r = schema.runs.c
        columns = (
            r.id,
            r.definition_id,
            r.definition_version,
            r.logical_time,
            r.parameters,
            r.execution_state,
            r.version,
            r.publication_state,
            r.created_at,
        )
        # A run is active while it executes, and after it succeeded while it publishes.
        active = sa.or_(
            r.execution_state.in_(_ACTIVE_RUNS),
            sa.and_(
                r.execution_state == RunExecutionState.SUCCESS.value,
                r.publication_state.in_(_PUBLISHING),
            ),
        )
        statement = sa.select(*columns).where(active)
        if not full and self._newest_run is not None:
            since = self._newest_run - timedelta(seconds=2)
            known = list(self._runs)
            statement = sa.select(*columns).where(
                active,
                sa.or_(r.created_at >= since, r.id.in_(known)) if known else r.created_at >= since,
            )
        with dialects.read_transaction(self.ledger.engine) as connection:
            rows = connection.execute(statement).all()
        runs: dict[str, _RunRow] = {}
        for row in rows:
            run = _RunRow(
                row.id,
                row.definition_id,
                row.definition_version,
                row.logical_time,
                row.parameters,
                RunExecutionState(row.execution_state),
                row.version,
                PublicationState(row.publication_state),
                row.created_at,
            )
            previous = self._runs.get(run.id)
            if previous is None or previous.version != run.version:
                self._dirty.add(run.id)  # new, or moved by someone else (a cancel request)
            runs[run.id] = run
            if self._newest_run is None or row.created_at > self._newest_run:
                self._newest_run = row.created_at
        if full and self._newest_run is None:
            self._newest_run = self.clock()
        self._runs = runs
        return runs

    def definition(self, definition_id: str, version: int) -> Definition:
        key = (definition_id, version)
        found = self._definitions.get(key)
        if found is None:
            v = schema.definition_versions.c
            with dialects.read_transaction(self.ledger.engine) as connection:
                spec = connection.execute(
                    sa.select(v.spec).where(v.definition_id == definition_id, v.version == version)
                ).scalar_one()
            found = self._definitions[key] = definition_from_json(spec)
        return found

    def _graph_of(self, definition: Definition) -> run_state.RunGraph:
        """The definition's task graph, built once per cached version (runs of thousands of
        tasks are moved many times a second)."""
        found = self._graphs.get(id(definition))
        if found is None:
            found = self._graphs[id(definition)] = definition.run_graph()
        return found

    def context_for(self, run_id: str) -> RunContext:
        known = self._runs.get(run_id)
        if known is not None:
            definition = self.definition(known.definition_id, known.definition_version)
            return RunContext(run_id, definition, known.logical_time, known.parameters)
        r = schema.runs.c
        with dialects.read_transaction(self.ledger.engine) as connection:
            row = connection.execute(
                sa.select(
                    r.definition_id, r.definition_version, r.logical_time, r.parameters
                ).where(r.id == run_id)
            ).one()
        definition = self.definition(row.definition_id, row.definition_version)
        return RunContext(run_id, definition, row.logical_time, row.parameters)

    def _advance(self, run: _RunRow, now: datetime, report: TickReport) -> None:
        definition = self.definition(run.definition_id, run.definition_version)
        context = RunContext(run.id, definition, run.logical_time, run.parameters)
        graph = self._graph_of(definition)
        with dialects.read_transaction(self.ledger.engine) as connection:
            briefs = run_store.instances_brief(connection, run.id)
            gate = self._dependency_gate(connection, run, definition, now)
        if len(self._routes) > _ROUTES_LIMIT:
            self._routes.clear()
        for brief in briefs:
            self._routes[brief.id] = run.id
        states = {b.task_key: b.state for b in briefs}
        work = [b for b in briefs if not publication.is_publication_key(b.task_key)]
        publishing = [b for b in briefs if publication.is_publication_key(b.task_key)]
        if run.execution_state is RunExecutionState.CANCELLING:
            cancelled = self._cancel_run(briefs, states, now)
            report.decided += cancelled
            self._stops_due = self._stops_due or cancelled > 0
        elif run.execution_state is RunExecutionState.RUNNING:
            self._move_instances(context, work, states, now, report, gate)
        else:
            # Publishing: its steps retry like any instance; the plan opens new ones.
            retrying = [b for b in publishing if states[b.task_key] is InstanceState.UP_FOR_RETRY]
            self._move_instances(context, retrying, states, now, report, None)
        work_states = {b.task_key: states[b.task_key] for b in work}
        execution = self._settle_run(run, graph, work, work_states, now, report)
        if definition.publish is not None:
            self._settle_publication(run, context, execution, publishing, states, now, report)

    def _dependency_gate(
        self, connection: sa.Connection, run: _RunRow, definition: Definition, now: datetime
    ) -> dependencies.Verdict | None:
        """Whether the run's roots wait for other pipelines (None: nothing to wait for)."""
        if not definition.wait_for or run.execution_state is not RunExecutionState.RUNNING:
            return None
        verdict = dependencies.check(
            connection,
            definition,
            logical_time=run.logical_time,
            created_at=run.created_at,
            now=now,
        )
        if verdict.released:
            return None
        if verdict.timed_out:
            self._alert_dependency(run.id, verdict.reason)
        return verdict

    def _settle_publication(
        self,
        run: _RunRow,
        context: RunContext,
        execution: RunExecutionState,
        publishing: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
        report: TickReport,
    ) -> None:
        """Move the run's publication state and open the steps it allows (design.md 4.3)."""
        plan = publication.plan(context.definition, execution, run.publication_state, states)
        if plan.state is not run.publication_state:
            with self.ledger.engine.begin() as connection:
                version, _ = run_store.run_version(connection, run.id)
                run_store.set_publication_state(
                    connection,
                    run_id=run.id,
                    expected_version=version,
                    state=plan.state,
                    reason=plan.reason,
                    previous=run.publication_state,
                    actor="scheduler",
                    event_id=new_event_id(),
                    now=now,
                    evidence={key: states[key].value for key in states if key in plan.open_now},
                )
            report.runs_moved += 1
            self._dirty.add(run.id)
        by_key = {b.task_key: b for b in publishing}
        openings = [
            self._opening(by_key[key], now)
            for key in plan.open_now
            if key in by_key and states[key] is InstanceState.CREATED
        ]
        self._open_and_submit(context, openings, states, report)

    def _cancel_run(
        self,
        briefs: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
    ) -> int:
        unfinished = []
        for brief in briefs:
            if brief.state.is_terminal or brief.state in (
                InstanceState.CANCELLING,
                InstanceState.CANCEL_FAILED,
            ):
                continue
            loaded = self.ledger.snapshot(brief.id)
            if loaded is not None:
                unfinished.append(loaded)
        done = self.sweeper.cancel_instances(unfinished, now, reason="the run is cancelled")
        if done:
            keys = {b.id: b.task_key for b in briefs}
            for snapshot, _ in unfinished:
                after = self.ledger.snapshot(snapshot.instance_id)
                if after is not None:
                    states[keys[snapshot.instance_id]] = after[0].state
        return done

    def _move_instances(
        self,
        context: RunContext,
        briefs: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
        report: TickReport,
        gate: dependencies.Verdict | None,
    ) -> None:
        """Open the attempts that may open and record the trigger rules' verdicts.

        A skip or an upstream failure can decide the next tasks down at once, so the pass is
        repeated on the states it produced until it decides nothing more.
        """
        graph = self._graph_of(context.definition)
        ids = {b.task_key: b.id for b in briefs}
        branches = rules.BranchChoices(self.ledger, ids)
        pending = list(briefs)
        openings: list[tuple[Event, Opened]] = []
        while pending:
            decisions: list[tuple[str, Event]] = []
            waiting: list[run_store.InstanceBrief] = []
            for brief in pending:
                state = states[brief.task_key]
                if state is InstanceState.CREATED:
                    decision = self._rule(brief, graph, states, branches, now, gate)
                    if isinstance(decision, Event):
                        decisions.append((brief.task_key, decision))
                    elif decision:
                        openings.append(self._opening(brief, now))
                    else:
                        waiting.append(brief)
                elif state is InstanceState.UP_FOR_RETRY:
                    if brief.retry_at is not None and brief.retry_at > now:
                        heapq.heappush(self._timers, (brief.retry_at, context.run_id))
                        continue
                    opening = self._retry_opening(brief, context, now)
                    if opening is not None:
                        openings.append(opening)
            if not decisions:
                break
            decisions.sort(key=lambda pair: pair[1].instance_id)  # one lock order for all
            results = self.ledger.apply_batch([event for _, event in decisions])
            moved = False
            for (key, _), result in zip(decisions, results, strict=True):
                if result.outcome is judge.Outcome.APPLIED and result.snapshot is not None:
                    report.decided += 1
                    states[key] = result.snapshot.state
                    moved = True
            pending = waiting if moved else []
        self._open_and_submit(context, openings, states, report)

    def _open_and_submit(
        self,
        context: RunContext,
        openings: list[tuple[Event, Opened]],
        states: dict[str, InstanceState],
        report: TickReport,
    ) -> None:
        """Record the openings in batches, then hand the ones recorded to their engines."""
        if not openings:
            return
        ordered = sorted(openings, key=lambda pair: pair[0].instance_id)
        for start in range(0, len(ordered), self.settings.batch):
            chunk = ordered[start : start + self.settings.batch]
            results = self.ledger.apply_batch([event for event, _ in chunk])
            for (_, opened), result in zip(chunk, results, strict=True):
                if result.outcome is not judge.Outcome.APPLIED or result.snapshot is None:
                    continue
                report.opened += 1
                states[opened.task_key] = result.snapshot.state
                self.submissions.submit(context, opened)

    def _rule(
        self,
        brief: run_store.InstanceBrief,
        graph: run_state.RunGraph,
        states: Mapping[str, InstanceState],
        branches: rules.BranchChoices,
        now: datetime,
        gate: dependencies.Verdict | None,
    ) -> Event | bool:
        """The trigger rule's verdict on a CREATED instance: an event, open (True) or wait.

        A root task of a run that waits for other pipelines (``gate``) waits too, and fails
        as UPSTREAM_FAILED once the dependency timed out.
        """
        node = graph.node(brief.task_key)
        if not node.after and gate is not None:
            if gate.timed_out:
                return rules.rule_event(brief, EventKind.UPSTREAM_FAILED, gate.reason, now, {})
            return False
        upstream = {key: states.get(key, InstanceState.CREATED) for key in node.after}
        skipped_by = branches.skipped_by(node.key, node.after, upstream)
        if skipped_by is not None:
            return rules.rule_event(brief, EventKind.SKIPPED, skipped_by, now, upstream)
        verdict = trigger_rules.evaluate(
            node.trigger_rule, upstream, setup_upstreams=graph.setup_upstreams(node.key)
        )
        rule = f"{node.trigger_rule}: {verdict.reason}"
        match verdict.outcome:
            case trigger_rules.RuleOutcome.RUN:
                return True
            case trigger_rules.RuleOutcome.SKIP:
                return rules.rule_event(brief, EventKind.SKIPPED, rule, now, upstream)
            case trigger_rules.RuleOutcome.UPSTREAM_FAILED:
                return rules.rule_event(brief, EventKind.UPSTREAM_FAILED, rule, now, upstream)
            case _:
                return False

    def _opening(self, brief: run_store.InstanceBrief, now: datetime) -> tuple[Event, Opened]:
        nonce = AttemptTokens.new_nonce()
        attempt_no = brief.epoch + 1
        token_hash = self.dispatcher.tokens.token_hash(brief.id, attempt_no, nonce)
        event = Event(
            new_event_id(),
            brief.id,
            attempt_no,
            EventKind.ATTEMPT_OPENED,
            "scheduler",
            now,
            {
                "token_hash": token_hash,
                "reason": "first",
                "retry_index": 0,
                "resubmit_index": 0,
                "nonce": nonce,
            },
        )
        return event, Opened(brief.id, attempt_no, brief.task_key, nonce)

    def _retry_opening(
        self, brief: run_store.InstanceBrief, context: RunContext, now: datetime
    ) -> tuple[Event, Opened] | None:
        loaded = self.ledger.snapshot(brief.id)
        if loaded is None:
            return None
        snapshot, _ = loaded
        if not self.sweeper.replaceable(snapshot, context, now):
            heapq.heappush(self._timers, (now + _REPLACE_POLL, context.run_id))
            return None
        nonce = AttemptTokens.new_nonce()
        attempt_no = snapshot.epoch + 1
        event = decide.open_attempt(
            snapshot,
            token_hash=self.dispatcher.tokens.token_hash(brief.id, attempt_no, nonce),
            now=now,
            event_id=new_event_id(),
        )
        if event is None:
            return None
        event = replace(event, evidence={**event.evidence, "nonce": nonce})
        return event, Opened(brief.id, attempt_no, brief.task_key, nonce)

    def _settle_run(
        self,
        run: _RunRow,
        graph: run_state.RunGraph,
        briefs: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
        report: TickReport,
    ) -> RunExecutionState:
        """Record the execution state the run's leaves imply; return the state it is in."""
        if run.execution_state not in (RunExecutionState.RUNNING, RunExecutionState.CANCELLING):
            return run.execution_state
        waiting = {
            b.task_key
            for b in briefs
            if states[b.task_key] is InstanceState.UP_FOR_RETRY and b.retry_at is not None
        }
        if run.execution_state is RunExecutionState.CANCELLING:
            if all(state.is_terminal for state in states.values()):
                target, reason = RunExecutionState.CANCELLED, "cancelled; every instance stopped"
            else:
                return run.execution_state
        else:
            verdict = run_state.execution_state(graph, states, waiting_for_time=waiting)
            target, reason = verdict.state, verdict.reason
            if verdict.blocking:
                reason = f"{reason} (blocking: {', '.join(verdict.blocking)})"
        if target is run.execution_state:
            return target
        with self.ledger.engine.begin() as connection:
            run_store.set_execution_state(
                connection,
                run_id=run.id,
                expected_version=run.version,
                state=target,
                reason=reason,
                previous=run.execution_state,
                actor="scheduler",
                event_id=new_event_id(),
                now=now,
                evidence={"instances": {k: v.value for k, v in states.items()}},
            )
        report.runs_moved += 1
        return target

    # -- alerts --------------------------------------------------------------------------------

    def _alert_dependency(self, run_id: str, message: str) -> None:
        alerts.raise_quietly(
            self.ledger,
            category=AlertCategory.DEPENDENCY,
            dedup_key=f"dependency:run:{run_id}",
            message=message,
            run_id=run_id,
            evidence={},
        )

    def _alert_run(self, run_id: str, message: str) -> None:
        alerts.raise_quietly(
            self.ledger,
            category=AlertCategory.PLATFORM,
            dedup_key=f"platform:run:{run_id}",
            message=message,
            run_id=run_id,
            evidence={},
        )

    def _alert_conflict(self, event: Event, reason: str) -> None:
        alerts.raise_quietly(
            self.ledger,
            category=AlertCategory.PLATFORM,
            dedup_key=f"conflict:{event.instance_id}:{event.attempt_no}",
            message=f"conflicting evidence: {reason}",
            run_id=self._routes.get(event.instance_id),
            instance_id=event.instance_id,
            attempt_no=event.attempt_no or None,
            evidence={"event_id": event.event_id, "kind": event.kind.value},
        )


def _has_entries(directory: Path) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(True for _ in entries)
    except FileNotFoundError:
        return False

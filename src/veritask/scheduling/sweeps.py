"""The monitor's and the reconciler's sweeps over active instances (docs/scheduling.md, 3 and 4).

Each sweep first lists its instances with one light query per page (the instance row joined
with its current attempt's row: states, times, the cached lease expiry, the policy) and keeps
only those that may need a decision now; those are loaded, judged by the pure decisions of
``veritask.core.decide`` on the snapshot they were loaded at, and the decision is recorded
with that snapshot's version: if the instance moved meanwhile, the decision is dropped and the
next sweep decides again. One instance that errors is logged and alerted, and never stops the
sweep.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime

from veritask.core import alert_messages, decide
from veritask.core.events import Event, EventKind
from veritask.core.fold import InstanceSnapshot
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import TaskPolicy
from veritask.core.states import AttemptState, EngineState, InstanceState
from veritask.execution import port
from veritask.execution.errors import ExecutorError
from veritask.ledger import alerts, dialects, pools, queries, statements
from veritask.ledger.ledger import Ledger, StaleDecision
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import dispatch, strays
from veritask.scheduling.settings import Settings

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
ContextFor = Callable[[str], dispatch.RunContext]
Owns = Callable[[str], bool]


def _every_run(run_id: str) -> bool:
    return True


_RECONCILED_STATES = (
    InstanceState.LOST,
    InstanceState.CANCELLING,
    InstanceState.CANCEL_FAILED,
    InstanceState.SCHEDULED,
    InstanceState.QUEUED,
)
_EVERYTHING = (*_RECONCILED_STATES, InstanceState.RUNNING)
#: What the monitor reads besides the running attempts that may be due: a lease runs only
#: while the task runs, and a timeout counts from the task's start, so a QUEUED instance is
#: never due (the reconciler follows it, ``queued_check``). A backlog of thousands waiting in a
#: broker is not read again every second, nor are thousands of running tasks whose leases and
#: timeouts are still ahead (``monitor_due_at``).
_MONITORED_TOO = (InstanceState.LOST,)
_STILL_RUNNING = (EngineState.PENDING, EngineState.RUNNING)
#: The attempts whose reports an executor that reports for its engine may take up.
_RESUMABLE = (AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.LOST)


class Sweeper:
    """Leases, timeouts, reconciliation and stops, for one scheduler process."""

    def __init__(
        self,
        ledger: Ledger,
        dispatcher: dispatch.Dispatcher,
        settings: Settings,
        submissions: dispatch.Submissions,
    ) -> None:
        self.ledger = ledger
        self.dispatcher = dispatcher
        self.settings = settings
        self.submissions = submissions
        self._stops_sent: set[tuple[str, int]] = set()
        self._stops_repeated: dict[tuple[str, int], datetime] = {}
        # RUNNING instances whose engine answered not_found (instance -> run): the reconciler,
        # which reads no RUNNING instance otherwise, asks again until the window decides. The
        # ledger keeps the evidence; this only says whom to ask (a restart's recovery asks all).
        self._absent: dict[str, str] = {}
        self._policies = statements.PolicyTexts()
        #: Attempts an engine runs that the ledger no longer follows (``scheduling.strays``).
        self.strays = strays.Strays(ledger, dispatcher.executors)
        #: Whose instances the sweeps decide: this scheduler's share of the runs
        #: (``scheduling.sharing``; every run when it shares with nobody).
        self.owns: Owns = _every_run

    # -- monitor ------------------------------------------------------------------------

    def monitor(self, now: datetime, context_for: ContextFor) -> int:
        """Expired leases become LOST; attempts past their timeout are asked to stop."""
        done = 0
        contexts = _Contexts(context_for)
        for row in itertools.chain(self._due_rows(now), self._rows(_MONITORED_TOO)):
            if not self._monitor_due(row, now):
                continue
            try:
                done += self._monitor_one(row.id, row.run_id, now, contexts)
            except Exception:  # one instance never stops the sweep
                log.exception(
                    "monitor failed for instance %s",
                    row.id,
                    extra={"run_id": row.run_id, "instance_id": row.id, "attempt_no": row.epoch},
                )
                self._alert_platform(row.id, row.run_id, alert_messages.MONITOR_FAILED.format())
        self._alert_late_retries(now)
        self._alert_full_pools(now)
        return done

    def _alert_full_pools(self, now: datetime) -> None:
        """A pool that has kept a task waiting longer than ``pool_full_alert_after``."""
        with dialects.read_transaction(self.ledger.engine) as connection:
            since = pools.full_since(connection, now=now)
            late = {
                n: t for n, t in since.items() if now - t >= self.settings.pool_full_alert_after
            }
            rows = pools.list_pools(connection, now=now) if late else []
        for row in rows:
            if row.name not in late or row.slots is None:
                continue
            waited = late[row.name]
            self._raise(
                AlertCategory.QUEUE_QUOTA,
                f"{AlertCategory.QUEUE_QUOTA}:pool:{row.name}",
                alert_messages.POOL_FULL.format(
                    pool=row.name,
                    since=waited.isoformat(),
                    used=row.used,
                    slots=row.slots,
                    waiting=row.waiting,
                ),
                run_id=None,
                instance_id=None,
                evidence={
                    "pool": row.name,
                    "slots": row.slots,
                    "used": row.used,
                    "waiting": row.waiting,
                    "waiting_since": waited.isoformat(),
                },
            )

    def _monitor_due(self, row: queries.SweepRow, now: datetime) -> bool:
        """Whether the cheap columns say a lease or a timeout may have run out.

        The row's ``lease_expires_at`` is a cache that is never later than the real expiry
        (heartbeats do not rewrite it), so an unexpired cached lease is a real one; an expired
        one is checked on the snapshot, which refreshes the cache if the worker reported since.
        """
        if row.attempt_state is AttemptState.RUNNING and (
            row.lease_expires_at is None or row.lease_expires_at <= now
        ):
            return True
        timeout = self._policies.parse(row.policy).timeout
        return (
            timeout is not None and row.started_at is not None and row.started_at + timeout <= now
        )

    def _monitor_one(
        self, instance_id: str, run_id: str, now: datetime, contexts: _Contexts
    ) -> int:
        loaded = self.ledger.snapshot(instance_id)
        policy = self.ledger.policy_of(instance_id)
        if loaded is None or policy is None:
            return 0
        snapshot, version = loaded
        events = decide.monitor(snapshot, policy, now=now, next_id=dispatch.new_event_id)
        if not events:
            current = snapshot.current
            if current is not None and current.state is AttemptState.RUNNING:
                self.ledger.refresh_lease(instance_id, current.attempt_no, current)
            return 0
        recorded = self._record(events, version)
        if recorded and snapshot.current is not None:
            after = self.ledger.snapshot(instance_id)
            if after is not None and after[0].state is InstanceState.LOST:
                self._alert(
                    AlertCategory.RECONCILIATION,
                    after[0],
                    run_id,
                    alert_messages.LOST.format(
                        attempt_no=snapshot.epoch, seconds=policy.lease.total_seconds()
                    ),
                )
            if after is not None and after[0].state is InstanceState.CANCELLING:
                self._stop(after[0], contexts(run_id))
        return recorded

    def _alert_late_retries(self, now: datetime) -> None:
        with dialects.read_transaction(self.ledger.engine) as connection:
            late = queries.late_retries(
                connection, before=now - self.settings.retry_late_after, limit=self.settings.batch
            )
        for row in late:
            self._raise(
                AlertCategory.RETRY_TIMING,
                f"{AlertCategory.RETRY_TIMING}:{row.id}:{row.epoch}",
                alert_messages.RETRY_LATE.format(retry_at=row.retry_at.isoformat()),
                run_id=row.run_id,
                instance_id=row.id,
                attempt_no=row.epoch or None,
                evidence={"retry_at": row.retry_at.isoformat(), "now": now.isoformat()},
            )

    # -- reconciler ---------------------------------------------------------------------

    def reconcile(
        self,
        now: datetime,
        context_for: ContextFor,
        *,
        everything: bool = False,
        runs: Owns | None = None,
    ) -> int:
        """Ask the engines about instances whose fate is unknown, stopping or stale.

        ``everything`` is the restart recovery (docs/scheduling.md, section 5): every active
        instance is compared with its engine at once, without waiting for grace periods.
        ``runs`` narrows the sweep to some of this scheduler's runs (those it just took over).
        """
        done = 0
        contexts = _Contexts(context_for)
        for row in self._rows(_EVERYTHING if everything else _RECONCILED_STATES, runs=runs):
            if self._reconcile_due(row, now, everything):
                done += self._reconcile_guarded(row.id, row.run_id, now, contexts, everything)
        if not everything:
            for instance_id, run_id in list(self._absent.items()):
                if not self.owns(run_id):
                    self._absent.pop(instance_id, None)  # its run's owner asks now
                    continue
                done += self._reconcile_guarded(
                    instance_id, run_id, now, contexts, everything, running_only=True
                )
        if runs is None:
            # Last: what the ledger follows was compared with its engine first.
            done += self.strays.sweep(now, self.owns)
        return done

    def _reconcile_guarded(
        self,
        instance_id: str,
        run_id: str,
        now: datetime,
        contexts: _Contexts,
        everything: bool,
        *,
        running_only: bool = False,
    ) -> int:
        try:
            return self._reconcile_one(
                instance_id, run_id, now, contexts, everything, running_only=running_only
            )
        except Exception:  # one instance never stops the sweep
            log.exception(
                "reconciliation failed for instance %s",
                instance_id,
                extra={"run_id": run_id, "instance_id": instance_id},
            )
            self._alert_platform(instance_id, run_id, alert_messages.RECONCILER_FAILED.format())
            return 0

    def _reconcile_due(self, row: queries.SweepRow, now: datetime, everything: bool) -> bool:
        if row.state is InstanceState.SCHEDULED:
            if self.submissions.in_flight(row.id, row.epoch):
                return False  # being submitted by this process right now
            opened_at = row.updated_observed_at
            return everything or opened_at is None or now - opened_at >= self.settings.submit_grace
        if row.state is InstanceState.QUEUED and not everything:
            queued_at = row.queued_at
            return queued_at is None or now - queued_at >= self.settings.queued_check
        return True

    def _reconcile_one(
        self,
        instance_id: str,
        run_id: str,
        now: datetime,
        contexts: _Contexts,
        everything: bool,
        *,
        running_only: bool = False,
    ) -> int:
        loaded = self.ledger.snapshot(instance_id)
        policy = self.ledger.policy_of(instance_id)
        if loaded is None or policy is None:
            self._absent.pop(instance_id, None)
            return 0
        snapshot, version = loaded
        current = snapshot.current
        if current is None or (running_only and current.state is not AttemptState.RUNNING):
            self._absent.pop(instance_id, None)  # moved on; the sweep of its state has it
            return 0
        policy = self._effective(policy)
        context = contexts(run_id)
        if current.state is AttemptState.SCHEDULED:
            if not everything:
                deferred = self.dispatcher.deferral_reason(instance_id, current.attempt_no)
                self._alert(
                    AlertCategory.SCHEDULER_EXECUTOR,
                    snapshot,
                    run_id,
                    alert_messages.NOT_ACKNOWLEDGED_DEFERRED.format(
                        attempt_no=current.attempt_no,
                        seconds=self.settings.submit_grace.total_seconds(),
                        error=deferred,
                    )
                    if deferred
                    else alert_messages.NOT_ACKNOWLEDGED.format(
                        attempt_no=current.attempt_no,
                        seconds=self.settings.submit_grace.total_seconds(),
                    ),
                )
            return self._resubmit(snapshot, context)
        if current.state is AttemptState.QUEUED and not everything:
            queued_at = current.queued_at
            if queued_at is None or now - queued_at < self.settings.queued_check:
                return 0
        observation = self._describe(current.executor, current.external_id, context, snapshot, now)
        if self._resume(snapshot, context, observation) and current.state is AttemptState.LOST:
            return 0  # the engine runs it, and its reports go on from here: not lost
        result = decide.reconcile(
            snapshot, policy, observation, now=now, next_id=dispatch.new_event_id
        )
        absent = (
            current.state is AttemptState.RUNNING
            and observation is not None
            and observation.engine_state is EngineState.NOT_FOUND
        )
        if absent and not any(e.kind is EventKind.FENCED for e in result.events):
            self._absent[instance_id] = run_id
        else:
            self._absent.pop(instance_id, None)
        if result.stop_engine:
            self._stop(snapshot, context, force=True)
        recorded = self._record(list(result.events), version) if result.events else 0
        if (
            absent
            and observation is not None
            and recorded
            and result.events[0].kind is (EventKind.ENGINE_OBSERVED)
        ):
            self._alert_absent(snapshot, run_id, policy, observation)
        if result.submit:
            recorded += self._resubmit(snapshot, context)
        if result.alert:
            self._alert(AlertCategory.RECONCILIATION, snapshot, run_id, result.alert)
        if (
            current.state is AttemptState.QUEUED
            and not result.events
            and observation is not None
            and observation.engine_state is EngineState.PENDING
        ):
            self._alert(
                AlertCategory.QUEUE_QUOTA,
                snapshot,
                run_id,
                alert_messages.STILL_PENDING.format(
                    attempt_no=current.attempt_no,
                    since=_iso(current.queued_at),
                    source=observation.source,
                ),
            )
        if snapshot.state is InstanceState.CANCEL_FAILED or any(
            e.kind is EventKind.CANCEL_UNCONFIRMED for e in result.events
        ):
            self._alert(
                AlertCategory.ENGINE,
                snapshot,
                run_id,
                alert_messages.STOP_UNCONFIRMED.format(
                    attempt_no=current.attempt_no, seconds=policy.cancel_window.total_seconds()
                ),
            )
        return recorded

    def replaceable(
        self, snapshot: InstanceSnapshot, context: dispatch.RunContext, now: datetime
    ) -> bool:
        """Whether the next attempt may open beside the attempt it replaces.

        A fenced (ABANDONED) attempt may still run: fencing keeps a stale attempt from
        committing, only a stop keeps two copies from running side by side. So the successor
        opens only once the engine says the old attempt is no longer pending or running (it
        ended, it is gone, or nothing of it runs). Until then the engine is asked to stop it
        again on every reconciliation round (each engine escalates an unconfirmed stop), and
        past the cancel window an alert says that attempt N+1 waits, and for what.
        """
        current = snapshot.current
        if current is None or current.state is not AttemptState.ABANDONED:
            return True
        observation = self._describe(current.executor, current.external_id, context, snapshot, now)
        if observation is not None and observation.engine_state not in _STILL_RUNNING:
            return True
        facts = snapshot.facts.attempt(current.attempt_no)
        if observation is None and facts is not None and facts.completions:
            # The engine cannot be asked (an attempt whose acknowledgement was lost has no
            # external id), but its own worker reported its end, recorded stale on its
            # record: nothing of it runs. Without this, attempt N+1 waited for ever.
            return True
        policy = self._effective(self.ledger.policy_of(snapshot.instance_id) or TaskPolicy())
        fenced_at = current.ended_observed_at or current.ended_at
        if fenced_at is not None and now >= fenced_at + policy.cancel_window:
            seen = (
                observation.engine_state.value
                if observation
                else alert_messages.UNREACHABLE.format()
            )
            self._alert(
                AlertCategory.ENGINE,
                snapshot,
                context.run_id,
                alert_messages.FENCED_STILL_RUNNING.format(
                    attempt_no=current.attempt_no,
                    seconds=policy.cancel_window.total_seconds(),
                    engine=seen,
                    next_no=current.attempt_no + 1,
                ),
            )
        self._stop_again(snapshot, context, now)
        return False

    def _describe(
        self,
        executor_name: str | None,
        external_id: str | None,
        context: dispatch.RunContext,
        snapshot: InstanceSnapshot,
        now: datetime,
    ) -> decide.Observation | None:
        executor = self._executor(executor_name, context, snapshot)
        if executor is None or external_id is None:
            return None
        try:
            seen = executor.describe(external_id=external_id)
        except ExecutorError as exc:
            log.warning(
                "describe %s failed: %s",
                external_id,
                exc,
                extra={
                    "definition": context.definition.name,
                    "run_id": context.run_id,
                    "instance_id": snapshot.instance_id,
                    "attempt_no": snapshot.epoch,
                },
            )
            return None
        details: dict[str, str | int | float | bool | None] = dict(seen.details)
        if seen.engine_id:
            details["engine_id"] = seen.engine_id
        return decide.Observation(
            engine_state=seen.engine_state,
            source=seen.source.value,
            observed_at=now,
            exit_code=seen.exit_code,
            error_category=seen.error_category.value if seen.error_category else None,
            details=dict(details),
        )

    def _executor(
        self, name: str | None, context: dispatch.RunContext, snapshot: InstanceSnapshot
    ) -> port.Executor | None:
        if name is not None:
            return self.dispatcher.executors.get(name)
        task_key = self._task_key(snapshot, context)
        return self.dispatcher.executor_for(context.tasks[task_key]) if task_key else None

    def _task_key(self, snapshot: InstanceSnapshot, context: dispatch.RunContext) -> str | None:
        created = snapshot.facts.created
        key = created.evidence.get("task_key") if created else None
        return key if isinstance(key, str) and key in context.tasks else None

    def _resume(
        self,
        snapshot: InstanceSnapshot,
        context: dispatch.RunContext,
        observation: decide.Observation | None,
    ) -> bool:
        """Let an executor that reports for its engine (``port.Resuming``) take up the reports
        of an attempt its engine still runs; True if it reports on it now."""
        current = snapshot.current
        running = observation is not None and observation.engine_state in _STILL_RUNNING
        if current is None or not running or current.state not in _RESUMABLE:
            return False
        executor = self._executor(current.executor, context, snapshot)
        facts = snapshot.facts.attempt(snapshot.epoch)
        task_key = self._task_key(snapshot, context)
        if not isinstance(executor, port.Resuming) or facts is None or facts.opened is None:
            return False
        nonce = facts.opened.evidence.get("nonce")
        if not isinstance(nonce, str) or task_key is None:
            return False
        opened = dispatch.Opened(
            snapshot.instance_id, snapshot.epoch, task_key, nonce, _map_index(snapshot)
        )
        try:
            spec = self.dispatcher.spec(context, opened)
            if isinstance(spec.task, port.WaitCondition):
                # A resumed wait counts its timeout from its first start, not from now.
                spec = replace(spec, task=replace(spec.task, since=current.started_at))
            return executor.resume(spec=spec)
        except (ExecutorError, ValueError) as exc:
            log.warning(
                "resuming the reports of %s failed: %s",
                current.external_id,
                exc,
                extra={"run_id": context.run_id, "instance_id": snapshot.instance_id},
            )
            return False

    def _resubmit(self, snapshot: InstanceSnapshot, context: dispatch.RunContext) -> int:
        """Submit the open attempt again (idempotently) with the token it was opened with."""
        facts = snapshot.facts.attempt(snapshot.epoch)
        task_key = self._task_key(snapshot, context)
        if facts is None or facts.opened is None or task_key is None:
            return 0
        nonce = facts.opened.evidence.get("nonce")
        if not isinstance(nonce, str):
            return 0
        opened = dispatch.Opened(
            snapshot.instance_id, snapshot.epoch, task_key, nonce, _map_index(snapshot)
        )
        return int(self.submissions.submit(context, opened))

    # -- stops --------------------------------------------------------------------------

    def cancel_instances(
        self, snapshots: Iterable[tuple[InstanceSnapshot, int]], now: datetime, *, reason: str
    ) -> int:
        """Ask every unfinished instance of a cancelled run to stop."""
        done = 0
        for snapshot, version in snapshots:
            event = decide.request_stop(
                snapshot,
                actor="scheduler",
                reason=reason,
                now=now,
                event_id=dispatch.new_event_id(),
            )
            if event is not None:
                done += self._record([event], version)
        return done

    def send_pending_stops(self, context_for: ContextFor) -> int:
        """Tell the engine at once about stops requested since the last tick."""
        sent = 0
        contexts = _Contexts(context_for)
        for row in self._rows((InstanceState.CANCELLING,)):
            if (row.id, row.epoch) in self._stops_sent:
                continue
            loaded = self.ledger.snapshot(row.id)
            if loaded is not None:
                sent += self._stop(loaded[0], contexts(row.run_id))
        return sent

    def _stop_again(
        self, snapshot: InstanceSnapshot, context: dispatch.RunContext, now: datetime
    ) -> None:
        """Ask again, at most once per reconciliation round, so the engine can escalate."""
        key = (snapshot.instance_id, snapshot.epoch)
        last = self._stops_repeated.get(key)
        if last is not None and now - last < self.settings.reconcile_every:
            return
        self._stops_repeated[key] = now
        self._stop(snapshot, context, force=True)

    def _stop(
        self, snapshot: InstanceSnapshot, context: dispatch.RunContext, *, force: bool = False
    ) -> int:
        """Ask the engine to stop the current attempt (once, unless forced); 1 if asked."""
        current = snapshot.current
        if current is None or current.external_id is None:
            return 0
        key = (snapshot.instance_id, current.attempt_no)
        if key in self._stops_sent and not force:
            return 0
        executor = self._executor(current.executor, context, snapshot)
        if executor is None:
            return 0
        try:
            executor.cancel(external_id=current.external_id)
        except ExecutorError as exc:
            log.warning(
                "cancel %s failed: %s",
                current.external_id,
                exc,
                extra={
                    "definition": context.definition.name,
                    "run_id": context.run_id,
                    "instance_id": snapshot.instance_id,
                    "attempt_no": current.attempt_no,
                },
            )
            return 0
        self._stops_sent.add(key)
        return 1

    # -- helpers ------------------------------------------------------------------------

    def _effective(self, policy: TaskPolicy) -> TaskPolicy:
        """The task's policy with this scheduler's overrides (the cancel window)."""
        window = self.settings.cancel_window
        return policy if window is None else replace(policy, cancel_window=window)

    def _record(self, events: list[Event], version: int) -> int:
        recorded = 0
        for event in events:
            try:
                result = self.ledger.apply(event, expected_version=version)
            except StaleDecision:
                return recorded  # the instance moved: decide again on the next sweep
            if result.version is not None:
                version = result.version
            recorded += 1
        return recorded

    def _due_rows(self, now: datetime) -> Iterator[queries.SweepRow]:
        """The RUNNING instances of this scheduler's runs whose attempt's lease or timeout may
        have run out."""
        after = queries.MONITOR_START
        while True:
            with dialects.read_transaction(self.ledger.engine) as connection:
                page = queries.monitor_due_page(
                    connection, now=now, after=after, limit=self.settings.batch
                )
            yield from (
                row for row in page if row.state is InstanceState.RUNNING and self.owns(row.run_id)
            )
            if len(page) < self.settings.batch:
                return
            last = page[-1]
            assert last.monitor_due_at is not None  # the page is read by it
            after = (last.monitor_due_at, last.id)

    def _rows(
        self, wanted: Iterable[InstanceState], *, runs: Owns | None = None
    ) -> Iterator[queries.SweepRow]:
        """The instances in these states with their current attempt's row, page by page;
        only those of this scheduler's runs (``owns``, or ``runs``)."""
        instance_states = tuple(wanted)
        owns = self.owns if runs is None else runs
        after = ""
        while True:
            with dialects.read_transaction(self.ledger.engine) as connection:
                page = queries.sweep_page(
                    connection, instance_states, after=after, limit=self.settings.batch
                )
            yield from (row for row in page if owns(row.run_id))
            if len(page) < self.settings.batch:
                return
            after = page[-1].id

    def _alert(
        self, category: AlertCategory, snapshot: InstanceSnapshot, run_id: str, message: str
    ) -> None:
        self._raise(
            category,
            f"{category}:{snapshot.instance_id}:{snapshot.epoch}",
            message,
            run_id=run_id,
            instance_id=snapshot.instance_id,
            attempt_no=snapshot.epoch or None,
            evidence={"state": snapshot.state.value, "reason": snapshot.reason},
        )

    def _alert_absent(
        self,
        snapshot: InstanceSnapshot,
        run_id: str,
        policy: TaskPolicy,
        observation: decide.Observation,
    ) -> None:
        """The ledger says RUNNING, the engine does not know the attempt: its answer is the
        evidence (docs/scheduling.md, section 5)."""
        category = AlertCategory.RECONCILIATION
        self._raise(
            category,
            f"{category}:{snapshot.instance_id}:{snapshot.epoch}:absent",
            alert_messages.ABSENT_AT_RECOVERY.format(
                attempt_no=snapshot.epoch,
                engine=observation.engine_state.value,
                source=observation.source,
                seconds=policy.evidence_window.total_seconds(),
            ),
            run_id=run_id,
            instance_id=snapshot.instance_id,
            attempt_no=snapshot.epoch or None,
            evidence={"state": snapshot.state.value, "engine": observation.evidence()},
        )

    def _alert_platform(self, instance_id: str, run_id: str, message: str) -> None:
        self._raise(
            AlertCategory.PLATFORM,
            f"platform:{instance_id}",
            message,
            run_id=run_id,
            instance_id=instance_id,
            evidence={},
        )

    def _raise(
        self,
        category: AlertCategory,
        dedup_key: str,
        message: str,
        *,
        run_id: str | None,
        instance_id: str | None,
        evidence: JSONObject,
        attempt_no: int | None = None,
    ) -> None:
        alerts.raise_quietly(
            self.ledger,
            category=category,
            dedup_key=dedup_key,
            message=message,
            run_id=run_id,
            instance_id=instance_id,
            attempt_no=attempt_no,
            evidence=evidence,
        )


class _Contexts:
    """Run contexts read once per sweep."""

    def __init__(self, context_for: ContextFor) -> None:
        self._context_for = context_for
        self._seen: dict[str, dispatch.RunContext] = {}

    def __call__(self, run_id: str) -> dispatch.RunContext:
        found = self._seen.get(run_id)
        if found is None:
            found = self._seen[run_id] = self._context_for(run_id)
        return found


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value else alert_messages.UNKNOWN_TIME.format()


def _map_index(snapshot: InstanceSnapshot) -> int:
    """The instance's map index, as its ``instance_created`` says (-1: not mapped)."""
    created = snapshot.facts.created
    index = created.evidence.get("map_index") if created else None
    return index if isinstance(index, int) else -1

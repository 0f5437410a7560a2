"""The messages of the alerts the platform raises, one phrase each (see :mod:`.phrases`).

Written by the scheduler's loops (``scheduling/scheduler.py``, ``scheduling/sweeps.py``) and
the deadline pass (``services/deadlines.py``); the alert keeps the English, which webhooks, the
API and the CLI show as stored, and the web UI's alerts page shows it in the reader's language.
Two alert messages are reasons of their own and live in :mod:`.reasons`: the reconciler's
``INCONCLUSIVE`` and a dependency's ``DEPENDENCY_TIMED_OUT`` (``scheduling/advance.py``).

Durations are seconds as ``{seconds:g}`` writes them (``30``, ``0.5``), so the stored
English is what the f-strings wrote before.
"""

from __future__ import annotations

from veritask.core.phrases import Phrase, Slot

_N = Slot.NUMBER

# -- platform: a loop failed on one object ---------------------------------------------------

MONITOR_FAILED = Phrase("alert.monitor_failed", "the monitor failed on this instance")
RECONCILER_FAILED = Phrase("alert.reconciler_failed", "the reconciler failed on this instance")
ADVANCE_FAILED = Phrase("alert.advance_failed", "the scheduler failed to advance this run")
FOREIGN_LOG_PATH = Phrase(
    "alert.foreign_log_path",
    "refused a report of attempt {attempt_no} whose log_path names another file ({path!r}): "
    "a forged report or a broken worker",
    attempt_no=_N,
)
CONFLICTING_EVIDENCE = Phrase(
    "alert.conflicting_evidence", "conflicting evidence: {reason}", reason=Slot.SENTENCE
)

# -- reconciliation, retry timing, queue and quota -------------------------------------------

DECIDED_ON_THE_OLD_STATE = Phrase(
    "alert.decided_on_the_old_state",
    "late completion evidence of attempt {attempt_no} changed the instance from {previous} to "
    "{state}; decided on the old state and left as it is: {decided}; an operator may clear "
    "them to decide again",
    attempt_no=_N,
    previous=Slot.STATE,
    state=Slot.STATE,
    decided=Slot.SENTENCE,
)
#: What :data:`DECIDED_ON_THE_OLD_STATE` names, joined with ``; ``.
DOWNSTREAM_DECIDED = Phrase(
    "alert.downstream_decided", "downstream task {task} is {state}", state=Slot.STATE
)
RUN_ENDED_ON = Phrase("alert.run_ended_on", "the run ended {state}", state=Slot.STATE)
#: Not decided on the old state: the run follows its instances (docs/state-machine.md).
RUN_FOLLOWED = Phrase(
    "alert.run_followed",
    "late completion evidence of attempt {attempt_no} changed the instance from {previous} to "
    "{state}; the run followed its instances from {run_previous} to {run_state}",
    attempt_no=_N,
    previous=Slot.STATE,
    state=Slot.STATE,
    run_previous=Slot.STATE,
    run_state=Slot.STATE,
)
PUBLICATION_ON = Phrase("alert.publication_on", "its publication is {state}", state=Slot.STATE)

LOST = Phrase(
    "alert.lost",
    "attempt {attempt_no} is LOST: no report within its lease ({seconds:g} s); "
    "reconciling with the engine",
    attempt_no=_N,
    seconds=_N,
)
ENGINE_VOUCHES = Phrase(
    "alert.engine_vouches",
    "attempt {attempt_no} went silent past its lease but the engine reports its process "
    "running ({source}); monitoring resumed: nothing is fenced while the engine says it runs",
    attempt_no=_N,
    source=Slot.TEXT,
)
ABSENT_AT_RECOVERY = Phrase(
    "alert.absent_at_recovery",
    "attempt {attempt_no} is RUNNING in the ledger but the engine answers {engine} ({source}); "
    "on_unknown decides after the {seconds:g} s evidence window",
    attempt_no=_N,
    engine=Slot.TEXT,
    source=Slot.TEXT,
    seconds=_N,
)
RETRY_LATE = Phrase(
    "alert.retry_late", "UP_FOR_RETRY since {retry_at} and not retried yet", retry_at=Slot.TIME
)
STILL_PENDING = Phrase(
    "alert.still_pending",
    "attempt {attempt_no} has been QUEUED since {since}; the engine still holds it pending "
    "({source})",
    attempt_no=_N,
    since=Slot.SENTENCE,
)
POOL_FULL = Phrase(
    "alert.pool_full",
    "pool {pool} has kept tasks waiting since {since} ({used} of {slots} slots used, "
    "{waiting} task(s) waiting)",
    since=Slot.TIME,
    used=_N,
    slots=_N,
    waiting=_N,
)
#: When an attempt was queued, if the ledger does not know (inside :data:`STILL_PENDING`).
UNKNOWN_TIME = Phrase("alert.unknown_time", "an unknown time")

# -- scheduler and executor: a submission nobody acknowledged ---------------------------------

NOT_ACKNOWLEDGED = Phrase(
    "alert.not_acknowledged",
    "attempt {attempt_no} was opened but not acknowledged within {seconds:g} s; "
    "submitting it again",
    attempt_no=_N,
    seconds=_N,
)
NOT_ACKNOWLEDGED_DEFERRED = Phrase(
    "alert.not_acknowledged_deferred",
    "attempt {attempt_no} was opened but not acknowledged within {seconds:g} s; "
    "submitting it again (the engine said: {error})",
    attempt_no=_N,
    seconds=_N,
)

# -- the engine: a stop it did not confirm ---------------------------------------------------

STOP_UNCONFIRMED = Phrase(
    "alert.stop_unconfirmed",
    "the engine did not confirm the stop of attempt {attempt_no} within {seconds:g} s",
    attempt_no=_N,
    seconds=_N,
)
STRAY_STOPPED = Phrase(
    "alert.stray_stopped",
    "the engine ran {external_id} for attempt {attempt_no} of an instance this platform does "
    "not hold (its run is this platform's): it was asked to stop",
    attempt_no=_N,
)
FENCED_STILL_RUNNING = Phrase(
    "alert.fenced_still_running",
    "attempt {attempt_no} was fenced but the engine did not confirm it stopped within "
    "{seconds:g} s (engine: {engine}); attempt {next_no} waits until the engine says it ended",
    attempt_no=_N,
    seconds=_N,
    engine=Slot.SENTENCE,
    next_no=_N,
)
#: What the engine said of a fenced attempt when it could not be asked (the engine's own
#: state, ``running`` or ``pending``, is its word and is kept).
UNREACHABLE = Phrase("alert.unreachable", "unreachable")

# -- deadline --------------------------------------------------------------------------------

RUN_FAILED = Phrase("alert.run_failed", "the run failed: {reason}", reason=Slot.SENTENCE)
DEADLINE = Phrase(
    "alert.deadline", "the run was expected to finish by {due} and is still active", due=Slot.TIME
)
STILL_WAITING = Phrase(
    "alert.still_waiting",
    "the run was expected to finish by {due} and has not started: {reason}",
    due=Slot.TIME,
    reason=Slot.SENTENCE,
)

# -- dependency: a wait still checking past its expected duration ----------------------------

WAIT_OVERDUE = Phrase(
    "alert.wait_overdue",
    "the wait {task} of {definition} still checks {seconds:g} s after it began ({since}), "
    "past its expected duration; its last check saw: {seen}",
    seconds=_N,
    since=Slot.TIME,
)

"""The reasons the platform records: why an instance, an attempt or a run is in its state, how
an event was judged, why a trigger rule decided, why a run waits (see :mod:`.phrases`).

Each is written once here and formatted where it is decided (``fold``, ``judge``,
``run_state``, ``decide``, ``trigger_rules`` and the scheduler); the web UI recognises the
stored English and shows it in the reader's language.
"""

from __future__ import annotations

from veritask.core.phrases import Phrase, Slot

_S = Slot.SENTENCE

# -- an instance (fold) ----------------------------------------------------------------------

OVERRIDDEN = Phrase(
    "reason.overridden",
    "overridden to {to_state} by {actor} ({why}); the evidence alone says {state}: {reason}",
    to_state=Slot.STATE,
    actor=Slot.ACTOR,
    state=Slot.STATE,
    reason=_S,
)
REMOVED = Phrase("reason.removed", "its task is not in the definition version")
CANCELLED_BEFORE_ANY_ATTEMPT = Phrase(
    "reason.cancelled_before_any_attempt",
    "cancelled by {actor} before any attempt: {why}",
    actor=Slot.ACTOR,
    why=_S,
)
CANCELLED_WAITING_TO_RETRY = Phrase(
    "reason.cancelled_waiting_to_retry",
    "cancelled by {actor} while it waited to retry: {why}",
    actor=Slot.ACTOR,
    why=_S,
)
CLEARED_WAITING = Phrase(
    "reason.cleared_waiting",
    "cleared by {actor} ({why}); waiting to be decided again",
    actor=Slot.ACTOR,
)
TRIGGER_RULE = Phrase("reason.trigger_rule", "trigger rule {rule}", rule=_S)
MAP_EXPANDED = Phrase(
    "reason.map_expanded",
    "expanded into {count} instances, one per item of the output of {task}",
    count=Slot.NUMBER,
)
MAP_EMPTY = Phrase(
    "reason.map_empty", "the output of {task} is an empty list: nothing to map, skipped"
)
MAP_TOO_MANY = Phrase(
    "reason.map_too_many",
    "the output of {task} has {count} items, more than max_map ({limit}) allows; "
    "raise max_map or map over fewer items",
    count=Slot.NUMBER,
    limit=Slot.NUMBER,
)
MAP_NOT_A_LIST = Phrase(
    "reason.map_not_a_list",
    "the output of {task} is not a list ({kind}): a mapped task maps over a JSON list",
)
WAITING = Phrase("reason.waiting", "waiting for dependencies, concurrency or time")
ATTEMPT = Phrase(
    "reason.attempt", "attempt {attempt_no}: {reason}", attempt_no=Slot.NUMBER, reason=_S
)
RESUBMITTING = Phrase("reason.resubmitting", "{reason}; resubmitting at once", reason=_S)
NEVER_RECEIVED_TIMES = Phrase(
    "reason.never_received_times",
    "{reason}; the engine never received it {count} times",
    reason=_S,
    count=Slot.NUMBER,
)
OPENING_NEXT = Phrase("reason.opening_next", "{reason}; opening the next attempt", reason=_S)
NO_RETRIES_LEFT = Phrase("reason.no_retries_left", "{reason}; no retries left", reason=_S)
ON_UNKNOWN_FAIL = Phrase("reason.on_unknown_fail", "{reason}; on_unknown=fail", reason=_S)
NO_RETRY_AFTER_CANCEL = Phrase(
    "reason.no_retry_after_cancel", "{reason}; no retry after a cancel", reason=_S
)
RETRY_CANNOT_HELP = Phrase(
    "reason.retry_cannot_help", "{reason}; the engine says retrying cannot help", reason=_S
)
NO_RETRIES_ALLOWED = Phrase(
    "reason.no_retries_allowed",
    "{reason}; no retries left ({allowed} allowed)",
    reason=_S,
    allowed=Slot.NUMBER,
)
RETRY_AT = Phrase(
    "reason.retry_at",
    "{reason}; retry {number} of {allowed} at {at}",
    reason=_S,
    number=Slot.NUMBER,
    allowed=Slot.NUMBER,
)

# -- an attempt (fold) -----------------------------------------------------------------------

FENCED = Phrase("reason.fenced", "fenced: {why}", why=_S)
EVIDENCE_DISAGREES = Phrase(
    "reason.evidence_disagrees",
    "{reason}; other completion evidence disagrees (conflict, strongest evidence wins)",
    reason=_S,
)
TIMEOUT_LOST_RACE = Phrase(
    "reason.timeout_lost_race", "{reason}; the timeout lost the race", reason=_S
)
CANCEL_LOST_RACE = Phrase(
    "reason.cancel_lost_race", "{reason}; the cancel lost the race", reason=_S
)
STOP_CONFIRMED = Phrase("reason.stop_confirmed", "the engine confirmed the stop ({source})")
NEVER_RECEIVED = Phrase("reason.never_received", "the engine never received it")
COULD_NOT_START = Phrase("reason.could_not_start", "the engine could not start it: {error}")
STOP_UNCONFIRMED = Phrase("reason.stop_unconfirmed", "the engine did not confirm the stop")
TIMEOUT_REQUESTED = Phrase(
    "reason.timeout_requested", "timeout requested by {actor}", actor=Slot.ACTOR
)
CANCEL_REQUESTED = Phrase(
    "reason.cancel_requested", "cancel requested by {actor}", actor=Slot.ACTOR
)
LEASE_EXPIRED = Phrase("reason.lease_expired", "no report since its lease expired at {at}")
REPORTS_RUNNING = Phrase("reason.reports_running", "the worker reports it running")
ENGINE_VOUCHES = Phrase(
    "reason.engine_vouches",
    "the worker is silent but the engine reports the process running ({source}); "
    "monitoring resumed with a new lease",
    source=Slot.TEXT,
)
ACKNOWLEDGED = Phrase("reason.acknowledged", "the executor acknowledged it")
OPENED = Phrase("reason.opened", "opened, not yet acknowledged by the executor")

# Who reported a completion, and its exit, are phrases of their own inside the next ones.
THE_WORKER = Phrase("reason.the_worker", "the worker")
THE_ENGINE = Phrase("reason.the_engine", "the engine ({source})")
EXIT = Phrase("reason.exit", "exit {code}", code=Slot.NUMBER)
NO_EXIT_CODE = Phrase("reason.no_exit_code", "no exit code")
REPORTED_NO_MARKER = Phrase(
    "reason.reported_no_marker",
    "{who} reported {exit} but no output commit marker",
    who=_S,
    exit=_S,
)
REPORTED = Phrase("reason.reported", "{who} reported {exit}", who=_S, exit=_S)
SKIPPED_ITSELF = Phrase(
    "reason.skipped_itself",
    "{who} reported that the task skipped itself ({exit})",
    who=_S,
    exit=_S,
)
STOPPED_AT_TIMEOUT = Phrase("reason.stopped_at_timeout", "{who} stopped it at its timeout", who=_S)
COULD_NOT_START_TASK = Phrase(
    "reason.could_not_start_task", "{who} could not start the task", who=_S
)
COULD_NOT_START_TASK_BECAUSE = Phrase(
    "reason.could_not_start_task_because", "{who} could not start the task: {error}", who=_S
)
STOPPED_AT_OUR_TIMEOUT = Phrase(
    "reason.stopped_at_our_timeout",
    "{who} confirmed it stopped at our timeout ({exit})",
    who=_S,
    exit=_S,
)
STOPPED_ON_REQUEST = Phrase(
    "reason.stopped_on_request", "{who} confirmed it stopped on request ({exit})", who=_S, exit=_S
)
REPORTED_FAILURE = Phrase(
    "reason.reported_failure", "{who} reported failure ({exit})", who=_S, exit=_S
)
KILLED_BY_SIGNAL = Phrase(
    "reason.killed_by_signal", "{who} reported it killed by a signal nobody here sent", who=_S
)
LATE_AFTER_ABANDONED = Phrase(
    "reason.late_after_abandoned",
    "{state} late, after it was abandoned (event {event_id})",
    state=Slot.STATE,
)
REPORTED_AFTER_NOT_RECEIVED = Phrase(
    "reason.reported_after_not_received",
    "the worker reported after the engine was judged not to have it",
)

# -- how an arriving event was judged (events.malformation, judge) ---------------------------

BAD_ACTOR = Phrase("reason.bad_actor", "actor: {problem}", problem=_S)
ACTOR_NOT_ALLOWED = Phrase(
    "reason.actor_not_allowed",
    "actor: {actor} may not send {kind}; allowed: {allowed}",
    kind=Slot.EVENT_KIND,
)
NAIVE_TIME = Phrase("reason.naive_time", "event_time: must carry a time zone")
EMPTY_EVENT_ID = Phrase("reason.empty_event_id", "event_id: must not be empty")
NOTHING_RUNNING_TYPE = Phrase(
    "reason.nothing_running_type", "evidence.nothing_running: expected bool, got {got}"
)
NAMES_AN_ATTEMPT = Phrase(
    "reason.names_an_attempt",
    "attempt_no: {kind} names an attempt, 1 or more; got {attempt_no}",
    kind=Slot.EVENT_KIND,
    attempt_no=Slot.NUMBER,
)
NEGATIVE_ATTEMPT = Phrase(
    "reason.negative_attempt",
    "attempt_no: must not be negative; got {attempt_no}",
    attempt_no=Slot.NUMBER,
)
EVIDENCE_REQUIRED = Phrase(
    "reason.evidence_required",
    "evidence.{key}: required for {kind}",
    key=Slot.FIELD,
    kind=Slot.EVENT_KIND,
)
EVIDENCE_TYPE = Phrase(
    "reason.evidence_type", "evidence.{key}: expected {expected}, got {got}", key=Slot.FIELD
)
NO_SEQ = Phrase("reason.no_seq", "seq: worker reports carry a sequence number, 1 or more")
NO_TOKEN = Phrase("reason.no_token", "attempt_token: worker reports must carry the attempt token")
NOT_ONE_OF = Phrase(
    "reason.not_one_of", "evidence.{key}: {value!r} is not one of {allowed}", key=Slot.FIELD
)
OVERRIDE_TO = Phrase(
    "reason.override_to", "evidence.to_state: an override sets SUCCESS or FAILED, not {to_state!r}"
)
CANCEL_NEEDS_REASON = Phrase(
    "reason.cancel_needs_reason", "evidence.reason: a cancel needs a reason"
)
OVERRIDE_NEEDS_REASON = Phrase(
    "reason.override_needs_reason", "evidence.reason: an override needs a reason"
)
CLEAR_NEEDS_REASON = Phrase("reason.clear_needs_reason", "evidence.reason: a clear needs a reason")

ALREADY_RECORDED = Phrase("reason.already_recorded", "event {event_id} was already recorded")
ID_REUSED = Phrase(
    "reason.id_reused", "event_id: {event_id} was already used for different content"
)
OTHER_INSTANCE = Phrase("reason.other_instance", "instance_id: {got} is not {expected}")
NEVER_CREATED = Phrase(
    "reason.never_created", "instance_id: instance {instance_id} was never created"
)
NEVER_OPENED = Phrase(
    "reason.never_opened",
    "attempt_no: attempt {attempt_no} was never opened",
    attempt_no=Slot.NUMBER,
)
OTHER_ATTEMPT = Phrase(
    "reason.other_attempt",
    "attempt_token: the token of attempt {attempt_no} of instance {instance_id} may not "
    "report about attempt {named_attempt} of instance {named_instance}",
    attempt_no=Slot.NUMBER,
    named_attempt=Slot.NUMBER,
)
FOREIGN_LOG_PATH = Phrase(
    "reason.foreign_log_path",
    "evidence.log_path: {path!r} is not the log of attempt {attempt_no} of instance "
    "{instance_id}; a worker reports only its own attempt's log",
    attempt_no=Slot.NUMBER,
)
TOKEN_MISMATCH = Phrase(
    "reason.token_mismatch",
    "attempt_token: does not match attempt {attempt_no}",
    attempt_no=Slot.NUMBER,
)
ALREADY_CREATED = Phrase(
    "reason.already_created", "instance_id: already created by event {event_id}"
)
NOT_THE_EPOCH = Phrase(
    "reason.not_the_epoch",
    "attempt_no: decisions apply to the current epoch {epoch}, not {attempt_no}",
    epoch=Slot.NUMBER,
    attempt_no=Slot.NUMBER,
)
ILLEGAL_LEASE = Phrase(
    "reason.illegal_lease",
    "illegal now: the instance is {state}; only a RUNNING attempt can lose its lease",
    state=Slot.STATE,
)
STALE_DECISION = Phrase(
    "reason.stale_decision",
    "stale decision: it saw report {seen}, the ledger holds {held}",
    seen=Slot.NUMBER,
    held=Slot.NUMBER,
)
ILLEGAL_TIMEOUT = Phrase(
    "reason.illegal_timeout",
    "illegal now: the instance is {state}; only a queued, running or lost attempt can time out",
    state=Slot.STATE,
)
ILLEGAL_IDLE_CANCEL = Phrase(
    "reason.illegal_idle_cancel",
    "illegal now: the instance is {state}; a cancel with nothing running needs CREATED or "
    "UP_FOR_RETRY",
    state=Slot.STATE,
)
NOTHING_TO_STOP = Phrase(
    "reason.nothing_to_stop",
    "illegal now: the instance is {state}; there is nothing to stop",
    state=Slot.STATE,
)
ILLEGAL_UNCONFIRMED = Phrase(
    "reason.illegal_unconfirmed",
    "illegal now: the instance is {state}; only a CANCELLING attempt can miss its confirmation",
    state=Slot.STATE,
)
ILLEGAL_NEVER_RECEIVED = Phrase(
    "reason.illegal_never_received",
    "illegal now: the instance is {state}; only an attempt no worker reported from can be "
    "never received",
    state=Slot.STATE,
)
ILLEGAL_FENCE = Phrase(
    "reason.illegal_fence",
    "illegal now: the instance is {state}; only a LOST or QUEUED attempt can be fenced",
    state=Slot.STATE,
)
FENCE_WHILE_HEARD = Phrase(
    "reason.fence_while_heard",
    "illegal now: a RUNNING attempt is fenced only while the engine answers it does not know it",
)
FENCE_ON_UNKNOWN = Phrase(
    "reason.fence_on_unknown", "evidence.on_unknown: fencing follows on_unknown retry or fail"
)
STOP_BEFORE_OVERRIDE = Phrase(
    "reason.stop_before_override",
    "illegal now: the instance is {state}; stop attempt {epoch} before overriding it",
    state=Slot.STATE,
    epoch=Slot.NUMBER,
)
ILLEGAL_RULE = Phrase(
    "reason.illegal_rule",
    "illegal now: the instance is {state}; trigger rules decide only before the first attempt",
    state=Slot.STATE,
)
STILL_ACTIVE = Phrase(
    "reason.still_active",
    "illegal now: the instance is {state}; attempt {epoch} is still active",
    state=Slot.STATE,
    epoch=Slot.NUMBER,
)
NEXT_ATTEMPT_IS = Phrase(
    "reason.next_attempt_is",
    "attempt_no: the next attempt is {expected}, not {got}",
    expected=Slot.NUMBER,
    got=Slot.NUMBER,
)
FIRST_FROM_CREATED = Phrase(
    "reason.first_from_created",
    "illegal now: a first attempt opens from CREATED, the instance is {state}",
    state=Slot.STATE,
)
CLEAR_FROM_FINISHED = Phrase(
    "reason.clear_from_finished",
    "illegal now: only a finished instance can be cleared, this one is {state}",
    state=Slot.STATE,
)
CLEAR_OPENS_THE_EPOCH = Phrase(
    "reason.clear_opens_the_epoch",
    "attempt_no: a clear opens epoch {expected}, not {attempt_no}",
    expected=Slot.NUMBER,
    attempt_no=Slot.NUMBER,
)
RERUN_AFTER_CLEAR = Phrase(
    "reason.rerun_after_clear",
    "evidence.reason: the attempt after a clear opens as a rerun, not {reason}",
    reason=Slot.OPEN_REASON,
)
RERUN_FROM_FINISHED = Phrase(
    "reason.rerun_from_finished",
    "illegal now: a rerun opens from a finished instance, this one is {state}",
    state=Slot.STATE,
)
RETRY_FROM_UP_FOR_RETRY = Phrase(
    "reason.retry_from_up_for_retry",
    "illegal now: a retry opens from UP_FOR_RETRY, the instance is {state}",
    state=Slot.STATE,
)
NEXT_OPEN_REASON = Phrase(
    "reason.next_open_reason",
    "evidence.reason: after {state} the next attempt is {expected}",
    state=Slot.STATE,
    expected=Slot.OPEN_REASON,
)
COUNTERS = Phrase(
    "reason.counters", "evidence.retry_index/resubmit_index: expected {want}, got {got}"
)
SUPERSEDED = Phrase(
    "reason.superseded",
    "attempt {attempt_no} is superseded by attempt {epoch}: kept on its own record, changes "
    "nothing else",
    attempt_no=Slot.NUMBER,
    epoch=Slot.NUMBER,
)
FENCED_OFF = Phrase(
    "reason.fenced_off",
    "attempt {attempt_no} was fenced off: kept on its record ({kind} after it was fenced), "
    "changes nothing else",
    attempt_no=Slot.NUMBER,
    kind=Slot.EVENT_KIND,
)
COMPLETIONS_DISAGREE = Phrase(
    "reason.completions_disagree",
    "attempt {attempt_no}: this completion says {result}, evidence already held says "
    "{held}; by precedence the attempt is {state} ({reason})",
    attempt_no=Slot.NUMBER,
    result=Slot.STATE,
    held=Slot.STATES,
    state=Slot.STATE,
    reason=_S,
)
OFF_THE_TABLE = Phrase(
    "reason.off_the_table",
    "refused by the transition table: no rule moves the instance from {source} to {target} "
    "on {kind} (the rules of that kind: {rules})",
    source=Slot.STATE,
    target=Slot.STATE,
    kind=Slot.EVENT_KIND,
)
ATTEMPT_OFF_THE_TABLE = Phrase(
    "reason.attempt_off_the_table",
    "refused by the transition table: no rule moves attempt {attempt_no} from {source} to "
    "{target} on {kind} (the rules of that kind: {rules})",
    attempt_no=Slot.NUMBER,
    source=Slot.STATE,
    target=Slot.STATE,
    kind=Slot.EVENT_KIND,
)
STAYS = Phrase(
    "reason.stays",
    "recorded {kind}; the instance stays {state}",
    kind=Slot.EVENT_KIND,
    state=Slot.STATE,
)

# -- the platform's decisions (decide) -------------------------------------------------------

RAN_PAST_TIMEOUT = Phrase("reason.ran_past_timeout", "ran past its timeout")
FATE_UNKNOWN = Phrase(
    "reason.fate_unknown",
    "fate unknown after the {window} evidence window",
    window=Slot.DURATION,
)
INCONCLUSIVE = Phrase(
    "reason.inconclusive",
    "attempt {attempt_no} is LOST and the evidence stays inconclusive",
    attempt_no=Slot.NUMBER,
)
ABSENT_INCONCLUSIVE = Phrase(
    "reason.absent_inconclusive",
    "attempt {attempt_no} is RUNNING in the ledger, the engine still does not know it and the "
    "evidence stays inconclusive",
    attempt_no=Slot.NUMBER,
)

# -- a run (run_state, the scheduler) --------------------------------------------------------

ACTIVE = Phrase("reason.active", "active: {tasks}", tasks=_S)
WAITING_FOR_RETRY = Phrase("reason.waiting_for_retry", "waiting for a retry: {tasks}", tasks=_S)
READY = Phrase("reason.ready", "ready: {tasks}", tasks=_S)
WAITING_FOR_UPSTREAM = Phrase(
    "reason.waiting_for_upstream", "waiting for upstream: {tasks}", tasks=_S
)
LEAF_ALREADY = Phrase("reason.leaf_already", "leaf {ended} already", ended=_S)
LEAVES_ALREADY = Phrase("reason.leaves_already", "leaves {ended} already", ended=_S)
LEAF_ENDED = Phrase("reason.leaf_ended", "leaf {ended}", ended=_S)
LEAVES_ENDED = Phrase("reason.leaves_ended", "leaves {ended}", ended=_S)
TASK_ENDED = Phrase("reason.task_ended", "{task} {state}", task=Slot.FIELD, state=Slot.STATE)
EVERY_LEAF_SUCCEEDED = Phrase("reason.every_leaf_succeeded", "every leaf succeeded or was skipped")
TEARDOWN_IGNORED = Phrase(
    "reason.teardown_ignored",
    "every leaf succeeded or was skipped (teardown {ended}, which does not decide the run)",
    ended=_S,
)
DEADLOCK = Phrase("reason.deadlock", "deadlock: {waits}", waits=_S)
DEADLOCK_CYCLE = Phrase("reason.deadlock_cycle", "deadlock: {waits} (cycle {cycles})", waits=_S)
WAITS_FOR = Phrase("reason.waits_for", "{task} waits for {tasks}", task=Slot.FIELD, tasks=_S)
AND_MORE = Phrase("reason.and_more", "{tasks} and {count} more", count=Slot.NUMBER)
BLOCKING = Phrase("reason.blocking", "{reason} (blocking: {tasks})", reason=_S)
RUN_CANCELLED = Phrase("reason.run_cancelled", "the run is cancelled")
ALL_STOPPED = Phrase("reason.all_stopped", "cancelled; every instance stopped")
LATE_EVIDENCE_MOVED_RUN = Phrase(
    "reason.late_evidence_moved_run",
    "{reason}; after the run ended, late completion evidence (event {event_id}) changed "
    "{task} attempt {attempt_no} from {previous} to {state}",
    reason=_S,
    event_id=Slot.TEXT,
    task=Slot.FIELD,
    attempt_no=Slot.NUMBER,
    previous=Slot.STATE,
    state=Slot.STATE,
)
REPAIRED_FROM_INSTANCES = Phrase(
    "reason.repaired_from_instances",
    "{reason}; recorded by a repair: the run had ended {previous} and no event moved it on",
    reason=_S,
    previous=Slot.STATE,
)
CANCEL_TOO_LATE = Phrase(
    "reason.cancel_too_late",
    "{reason}; the cancel came too late: every instance had ended before it took effect",
    reason=_S,
)
RULE_SAYS = Phrase("reason.rule_says", "{rule}: {reason}", rule=Slot.CODE, reason=_S)
BRANCH_CHOSE = Phrase("reason.branch_chose", "branch: {task} chose {tasks}")
BRANCH_CHOSE_NOTHING = Phrase("reason.branch_chose_nothing", "branch: {task} chose nothing")

# -- trigger rules (trigger_rules) -----------------------------------------------------------

NO_UPSTREAM = Phrase("reason.no_upstream", "no upstream tasks")
ALWAYS_RUNS = Phrase("reason.always_runs", "always runs")
UPSTREAM_FAILED = Phrase("reason.upstream_failed", "upstream {tasks} failed", tasks=_S)
UPSTREAM_SKIPPED = Phrase("reason.upstream_skipped", "upstream {tasks} skipped", tasks=_S)
ALL_SUCCEEDED = Phrase("reason.all_succeeded", "all upstream tasks succeeded")
UPSTREAM_DID_NOT_FAIL = Phrase(
    "reason.upstream_did_not_fail", "upstream {tasks} did not fail", tasks=_S
)
ALL_FAILED = Phrase("reason.all_failed", "all upstream tasks failed")
ALL_DONE = Phrase("reason.all_done", "all upstream tasks are done")
ALL_DONE_NO_SETUP = Phrase(
    "reason.all_done_no_setup", "all upstream tasks are done (no setup upstream)"
)
ALL_DONE_AND_SUCCEEDED = Phrase(
    "reason.all_done_and_succeeded",
    "all upstream tasks are done and {tasks} succeeded",
    tasks=_S,
)
NONE_SUCCEEDED = Phrase("reason.none_succeeded", "no upstream succeeded: {tasks} failed", tasks=_S)
EVERY_UPSTREAM_SKIPPED = Phrase("reason.every_upstream_skipped", "every upstream task was skipped")
UPSTREAM_SUCCEEDED = Phrase("reason.upstream_succeeded", "upstream {tasks} succeeded", tasks=_S)
NO_UPSTREAM_FAILED = Phrase("reason.no_upstream_failed", "no upstream task failed")
UPSTREAM_FINISHED = Phrase("reason.upstream_finished", "upstream {tasks} finished", tasks=_S)
NONE_FINISHED = Phrase("reason.none_finished", "no upstream task succeeded or failed")
NONE_FAILED_AND_SUCCEEDED = Phrase(
    "reason.none_failed_and_succeeded",
    "no upstream task failed and {tasks} succeeded",
    tasks=_S,
)
NONE_SKIPPED = Phrase("reason.none_skipped", "no upstream task was skipped")
UPSTREAM_NOT_SKIPPED = Phrase(
    "reason.upstream_not_skipped", "upstream {tasks} was not skipped", tasks=_S
)
ALL_SKIPPED = Phrase("reason.all_skipped", "all upstream tasks were skipped")
SETUP_SUCCEEDED = Phrase(
    "reason.setup_succeeded",
    "all upstream tasks are done and setup {tasks} succeeded",
    tasks=_S,
)
SETUP_SKIPPED = Phrase("reason.setup_skipped", "setup {tasks} skipped", tasks=_S)
NO_SETUP_SUCCEEDED = Phrase("reason.no_setup_succeeded", "no setup succeeded: {tasks}", tasks=_S)
BRANCH_NOT_DOWNSTREAM = Phrase(
    "reason.branch_not_downstream",
    "the branch chose {tasks}, not directly downstream of it (direct downstream tasks: {allowed})",
    tasks=_S,
)
WAITING_FOR = Phrase("reason.waiting_for", "waiting for {what}", what=_S)

# -- admission, concurrency and dependencies (the scheduler) ---------------------------------

POOL_FULL = Phrase(
    "reason.pool_full",
    "waiting for pool {pool} ({used} of {slots} slots used by {holders})",
    used=Slot.NUMBER,
    slots=Slot.NUMBER,
)
POOL_FULL_MORE = Phrase(
    "reason.pool_full_more",
    "waiting for pool {pool} ({used} of {slots} slots used by {holders} and {more} more)",
    used=Slot.NUMBER,
    slots=Slot.NUMBER,
    more=Slot.NUMBER,
)
POOL_QUEUED = Phrase(
    "reason.pool_queued",
    "waiting for pool {pool} ({used} of {slots} slots used; {wanted} wanted, "
    "after tasks ranked before it)",
    used=Slot.NUMBER,
    slots=Slot.NUMBER,
    wanted=Slot.NUMBER,
)
POOL_UNDEFINED = Phrase(
    "reason.pool_undefined",
    "waiting for pool {pool}, which is not defined (veritask pool set {name} --slots N)",
    name=Slot.CODE,
)
POOL_TOO_SMALL = Phrase(
    "reason.pool_too_small",
    "waiting for pool {pool}: it needs {needed} slots and the pool has {slots}",
    needed=Slot.NUMBER,
    slots=Slot.NUMBER,
)

STARTED = Phrase("reason.started", "started")
BACKFILL_QUEUED = Phrase("reason.backfill_queued", "backfill queued behind run(s) {runs}")
STARTED_BESIDE = Phrase("reason.started_beside", "started beside active run(s) {runs}")
FORBIDDEN_OVERLAP = Phrase(
    "reason.forbidden_overlap",
    "not started: concurrency is forbid and run(s) {runs} are active",
)
BACKFILL_REQUESTED = Phrase(
    "reason.backfill_requested",
    "backfill of [{start}, {end}) requested: {intervals} interval(s); {reason}",
    start=Slot.TIME,
    end=Slot.TIME,
    intervals=Slot.NUMBER,
)
BACKFILL_CLEARING = Phrase(
    "reason.backfill_clearing", "backfill {backfill_id} (existing: failed): {reason}"
)
BACKFILL_CANCELLED = Phrase(
    "reason.backfill_cancelled",
    "backfill cancelled by {actor}: {reason}",
    actor=Slot.ACTOR,
)
SCHEDULE_SKIPPED = Phrase(
    "reason.schedule_skipped",
    "scheduled run of {logical_time} skipped: concurrency is forbid and run(s) {runs} are active",
    logical_time=Slot.TIME,
)
QUEUED_BEHIND = Phrase("reason.queued_behind", "queued behind run(s) {runs}")
REPLACING = Phrase("reason.replacing", "replacing run(s) {runs}: waiting for them to stop")
STARTED_AFTER_QUEUE = Phrase("reason.started_after_queue", "started: the runs ahead of it finished")
REPLACED_BY = Phrase("reason.replaced_by", "replaced by run {run_id}")
RUN_CANCEL_REQUESTED = Phrase(
    "reason.run_cancel_requested",
    "cancel requested by {actor}: {reason}",
    actor=Slot.ACTOR,
    reason=_S,
)
VERSION_CREATED = Phrase("reason.version_created", "version {version} created", version=Slot.NUMBER)
VERSION_APPLIED_AGAIN = Phrase(
    "reason.version_applied_again", "version {version} applied again", version=Slot.NUMBER
)
DEPENDENCY_TIMED_OUT = Phrase(
    "reason.dependency_timed_out",
    "wait_for {what}: not PUBLISHED within {timeout} ({seen})",
    what=_S,
    timeout=Slot.DURATION,
    seen=_S,
)
DEPENDENCY_AT = Phrase(
    "reason.dependency_at", "{definition} at {at}", definition=Slot.FIELD, at=Slot.TIME
)
DEPENDENCY_LATEST = Phrase(
    "reason.dependency_latest", "{definition} (latest run)", definition=Slot.FIELD
)
NO_RUN_YET = Phrase("reason.no_run_yet", "no run yet")
PUBLICATION_IS = Phrase("reason.publication_is", "publication {state}", state=Slot.STATE)
PENDING_NO_RUN = Phrase("reason.pending_no_run", "{what}: no run yet", what=_S)
PENDING_PUBLICATION = Phrase(
    "reason.pending_publication", "{what}: publication {state}", what=_S, state=Slot.STATE
)
EVERY_DEPENDENCY_PUBLISHED = Phrase(
    "reason.every_dependency_published", "every dependency is PUBLISHED"
)

# -- publication (the scheduler) -------------------------------------------------------------

PUBLISHES_NOTHING = Phrase("reason.publishes_nothing", "the definition publishes nothing")
PUBLICATION_FINISHED = Phrase("reason.publication_finished", "publication is finished")
NOTHING_PUBLISHED = Phrase(
    "reason.nothing_published",
    "execution ended {state}: nothing will be published",
    state=Slot.STATE,
)
WAITING_FOR_EXECUTION = Phrase(
    "reason.waiting_for_execution", "waiting for execution ({state})", state=Slot.STATE
)
CHECKS_FAILED = Phrase("reason.checks_failed", "check(s) failed: {checks}")
CHECKS_RUNNING = Phrase("reason.checks_running", "{count} check(s) running", count=Slot.NUMBER)
COMMIT_SUCCEEDED = Phrase("reason.commit_succeeded", "the commit step succeeded")
COMMIT_ENDED = Phrase("reason.commit_ended", "the commit step ended {state}", state=Slot.STATE)
COMMITTING = Phrase("reason.committing", "committing the output")

# -- clear and rerun (a run) -----------------------------------------------------------------

AFTER_OVERRIDE = Phrase(
    "reason.after_override",
    "{verdict} (after an override by {actor})",
    verdict=Slot.SENTENCE,
    actor=Slot.ACTOR,
)
RUN_CLEARED = Phrase(
    "reason.run_cleared",
    "cleared by {actor} ({why}): {tasks} to run again",
    actor=Slot.ACTOR,
)
PUBLICATION_CLEARED = Phrase(
    "reason.publication_cleared",
    "cleared by {actor} ({why}): to be checked and published again once execution succeeds",
    actor=Slot.ACTOR,
)
RERUN_REQUESTED = Phrase(
    "reason.rerun_requested", "rerun of {run_id} asked by {actor} ({why})", actor=Slot.ACTOR
)

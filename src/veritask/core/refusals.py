"""Why a service refuses a request, one phrase per kind (see :mod:`.phrases`).

The services raise these as the English ``detail`` of a 404, 409 or 422 (what the API's
problem documents and the CLI show); the web UI's error banner shows the reader's language.
The ledger's alert lifecycle raises two of them (``NO_ALERT``, ``ALERT_RESOLVED``), which the
alert services pass on as they are.
"""

from __future__ import annotations

from veritask.core.phrases import Phrase, Slot

# -- 404: there is no such object ------------------------------------------------------------

NO_RUN = Phrase("refusal.no_run", "no run {run_id!r}")
NO_INSTANCE = Phrase("refusal.no_instance", "no instance {instance_id!r}")
NO_ATTESTATION = Phrase(
    "refusal.no_attestation",
    "run {run_id!r} has no attestation: its publication is {state}; a run carries one from "
    "the moment it is made PUBLISHED (by a version that attests)",
    state=Slot.STATE,
)
NO_RUN_OR_INSTANCE = Phrase("refusal.no_run_or_instance", "no run or instance {instance_id!r}")
NO_DEFINITION = Phrase("refusal.no_definition", "no definition named {name!r}")
NO_ALERT = Phrase("refusal.no_alert", "no alert {alert_id}", alert_id=Slot.NUMBER)
NO_BACKFILL = Phrase("refusal.no_backfill", "no backfill {backfill_id!r}")
NO_POOL = Phrase("refusal.no_pool", "no pool {name!r}")
NO_TOKEN = Phrase("refusal.no_token", "no token {token_id!r}")
NO_VERSION = Phrase(
    "refusal.no_version",
    "definition {name} has no version {version}",
    name=Slot.FIELD,
    version=Slot.NUMBER,
)
NO_ATTEMPT = Phrase(
    "refusal.no_attempt",
    "instance {instance_id} has no attempt {attempt_no}",
    attempt_no=Slot.NUMBER,
)
VERSION_GONE = Phrase(
    "refusal.version_gone", "run {run_id} names a definition version that is gone"
)
LOG_ELSEWHERE = Phrase(
    "refusal.log_elsewhere",
    "the log of attempt {attempt_no} is at {path}, outside this server's VERITASK_HOME; read "
    "it where its engine keeps it",
    attempt_no=Slot.NUMBER,
)

# -- 409: illegal in the object's current state ----------------------------------------------

CANNOT_BE_ENABLED = Phrase(
    "refusal.cannot_be_enabled",
    "definition {name} is {lifecycle}; it cannot be enabled",
    name=Slot.FIELD,
    lifecycle=Slot.LIFECYCLE,
)
CANNOT_BE_DISABLED = Phrase(
    "refusal.cannot_be_disabled",
    "definition {name} is {lifecycle}; it cannot be disabled",
    name=Slot.FIELD,
    lifecycle=Slot.LIFECYCLE,
)
CHANGED_MEANWHILE = Phrase(
    "refusal.changed_meanwhile",
    "definition {name} changed meanwhile; it is no longer {lifecycle}",
    name=Slot.FIELD,
    lifecycle=Slot.LIFECYCLE,
)
DEFINITION_IS = Phrase(
    "refusal.definition_is",
    "definition {name} is {lifecycle}",
    name=Slot.FIELD,
    lifecycle=Slot.LIFECYCLE,
)
CANNOT_BE_TRIGGERED = Phrase(
    "refusal.cannot_be_triggered",
    "definition {name} is {lifecycle}; it cannot be triggered",
    name=Slot.FIELD,
    lifecycle=Slot.LIFECYCLE,
)
NO_SCHEDULE = Phrase(
    "refusal.no_schedule", "definition {name} has no schedule to backfill", name=Slot.FIELD
)
BACKFILL_NEEDS_REASON = Phrase("refusal.backfill_needs_reason", "a backfill needs a reason")
BACKFILL_ALREADY = Phrase("refusal.backfill_already", "backfill {backfill_id} is already {state}")
END_BEFORE_START = Phrase("refusal.end_before_start", "end: must not be before start")
NEEDS_LOGICAL_TIME = Phrase(
    "refusal.needs_logical_time", "logical_time: a scheduled or backfilled run needs one"
)
HAS_NO_VERSION = Phrase(
    "refusal.has_no_version", "definition {name} has no version", name=Slot.FIELD
)
RUN_ALREADY = Phrase("refusal.run_already", "run {run_id} is already {state}", state=Slot.STATE)
NOTHING_TO_STOP = Phrase(
    "refusal.nothing_to_stop",
    "instance {instance_id} is {state}: there is nothing to stop",
    state=Slot.STATE,
)
ALERT_RESOLVED = Phrase(
    "refusal.alert_resolved", "alert {alert_id} is already resolved", alert_id=Slot.NUMBER
)
KEPT_CHANGING = Phrase("refusal.kept_changing", "instance {instance_id} kept changing; try again")
OVERRIDE_UNPUBLISHES = Phrase(
    "refusal.override_unpublishes",
    "run {run_id} is {state}: its publication has started, so an override cannot make its "
    "execution FAILED; a run that failed publishes nothing",
    state=Slot.STATE,
)
OVERRIDE_REFUSED = Phrase(
    "refusal.override_refused", "override refused: {refusals}", refusals=Slot.SENTENCE
)
OVERRIDE_REFUSAL = Phrase(
    "refusal.override_refusal",
    "{task} ({state}): {reason}",
    task=Slot.FIELD,
    state=Slot.STATE,
    reason=Slot.SENTENCE,
)
NOT_EMPTY = Phrase(
    "refusal.not_empty", "the database is not empty: replay loads an export into a new one"
)
LAST_ADMIN = Phrase(
    "refusal.last_admin",
    "token {token_id} is the last working admin token; create another admin token first",
)

KEY_REUSED = Phrase(
    "refusal.key_reused",
    "the idempotency key {key!r} is run {run_id}'s, triggered with other parameters "
    "({names} differ); use another key for other parameters",
    names=Slot.CODE,
)

# -- 422: the input was refused --------------------------------------------------------------

FIELD_PROBLEM = Phrase(
    "refusal.field_problem", "{field}: {problem}", field=Slot.FIELD, problem=Slot.SENTENCE
)
BETWEEN = Phrase(
    "refusal.between",
    "must be between {low} and {high}",
    low=Slot.NUMBER,
    high=Slot.NUMBER,
)
NOT_NEGATIVE = Phrase("refusal.not_negative", "must not be negative")
NOT_A_POOL_NAME = Phrase(
    "refusal.not_a_pool_name",
    "{name!r} is not a valid pool name: use lowercase letters, digits, '_' and '-', "
    "starting with a letter, at most 64 characters",
)
NOT_BLANK = Phrase("refusal.not_blank", "must not be blank")
TIME_OUT_OF_RANGE = Phrase(
    "refusal.time_out_of_range", "is outside the times the ledger keeps (years 1 to 9999, UTC)"
)
LATER_THAN = Phrase("refusal.later_than", "must be later than {other}", other=Slot.FIELD)
AT_MOST_CHARACTERS = Phrase(
    "refusal.at_most_characters", "must be at most {n} characters", n=Slot.NUMBER
)
NOT_A_MOMENT = Phrase(
    "refusal.not_a_moment", "expected a date and time such as 2024-05-01T06:00, got {value!r}"
)
NO_NUL = Phrase("refusal.no_nul", "must not contain the NUL character (U+0000)")
NEEDS_UTC_OFFSET = Phrase(
    "refusal.needs_utc_offset",
    "must carry its UTC offset (2024-05-01T06:00:00+00:00 or …Z), got {value!r}",
)
NOT_FINITE = Phrase("refusal.not_finite", "must be a finite number, not NaN or infinity")
NOT_UNICODE = Phrase("refusal.not_unicode", "must be Unicode text (it holds an unpaired surrogate)")
NESTED_TOO_DEEP = Phrase(
    "refusal.nested_too_deep", "nests deeper than {depth} levels", depth=Slot.NUMBER
)
REPORT_TOO_LARGE = Phrase(
    "refusal.report_too_large",
    "is {size} bytes of JSON; a {kind} report may hold at most {limit}",
    size=Slot.NUMBER,
    kind=Slot.EVENT_KIND,
    limit=Slot.NUMBER,
)
REPORT_TOO_SOON = Phrase(
    "refusal.report_too_soon",
    "a {kind} report {gap} s from the attempt's last one: at most one every {window} s is "
    "recorded (send the latest)",
    kind=Slot.EVENT_KIND,
    gap=Slot.NUMBER,
    window=Slot.NUMBER,
)
PROGRESS_FULL = Phrase(
    "refusal.progress_full",
    "the attempt has recorded {size} bytes of progress, the most an attempt may; later "
    "progress is refused (its heartbeats and its end are still recorded)",
    size=Slot.NUMBER,
)
ONE_SCOPE = Phrase("refusal.one_scope", "give exactly one of definition, run or instance")
NOT_IN_GRAPH = Phrase(
    "refusal.not_in_graph",
    "{task} is a publication step, outside the task graph: override it with scope instance or run",
)
OVERRIDE_STATES = Phrase("refusal.override_states", "an override sets SUCCESS or FAILED")
OVERRIDE_NEEDS_REASON = Phrase("refusal.override_needs_reason", "an override needs a reason")
TO_BEFORE_FROM = Phrase("refusal.to_before_from", "must not be before from")
BACKFILL_EXISTING = Phrase(
    "refusal.backfill_existing", "must be one of {choices}", choices=Slot.CODE
)
TOO_MANY_INTERVALS = Phrase(
    "refusal.too_many_intervals",
    "the range holds {count} fire times; a backfill holds at most {limit}",
    count=Slot.NUMBER,
    limit=Slot.NUMBER,
)
CANCEL_NEEDS_REASON = Phrase("refusal.cancel_needs_reason", "a cancel needs a reason")
TRIGGER_KIND = Phrase("refusal.trigger_kind", "a trigger by request is manual or api")
NOT_A_CURSOR = Phrase("refusal.not_a_cursor", "not a cursor this API handed out")
UNKNOWN_PARAMETERS = Phrase(
    "refusal.unknown_parameters", "parameters: unknown {names}; known: {known}"
)
UNKNOWN_PARAMETER = Phrase("refusal.unknown_parameter", "unknown; known: {known}")
NOT_A_PARAMETER_NAME = Phrase(
    "refusal.not_a_parameter_name",
    "{name!r} is not a parameter name: letters, digits and '_', not starting with a digit, "
    "parts joined by '.', at most {n} characters",
    n=Slot.NUMBER,
)
PARAMETER_LINE = Phrase(
    "refusal.parameter_line",
    "line {line} of the parameters, {text!r}, is not NAME=VALUE",
    line=Slot.NUMBER,
)
NOT_UTF8 = Phrase("refusal.not_utf8", "must be UTF-8 text")
NESTED_TOO_DEEPLY = Phrase("refusal.nested_too_deeply", "nested too deeply to be read")
NOT_READABLE_JSON = Phrase("refusal.not_readable_json", "could not be read as a JSON object")
TOKEN_NAME = Phrase(
    "refusal.token_name",
    "1 to 64 letters, digits, '_', '.', '@' or '-', starting with a letter or digit",
)

# -- clear and rerun ---------------------------------------------------------------------------

CLEAR_ONE_SCOPE = Phrase(
    "refusal.clear_one_scope", "give either failed: true or a list of tasks, not both or neither"
)
CLEAR_NEEDS_REASON = Phrase("refusal.clear_needs_reason", "a clear needs a reason")
NO_TASK_IN_RUN = Phrase(
    "refusal.no_task_in_run", "run {run_id} has no task {task!r}", task=Slot.FIELD
)
NOTHING_FAILED = Phrase("refusal.nothing_failed", "run {run_id} has no failed instance to clear")
CLEAR_RUN_STATE = Phrase(
    "refusal.clear_run_state",
    "run {run_id} is {state}: only a running or finished run can be cleared",
    state=Slot.STATE,
)
CLEAR_ACTIVE = Phrase(
    "refusal.clear_active",
    "clear refused: {task} (instance {instance_id}) is {state}; stop it or wait for it to end",
    task=Slot.FIELD,
    state=Slot.STATE,
)
RERUN_VERSION = Phrase("refusal.rerun_version", 'version is "same" or "latest", not {version!r}')
RERUN_NEEDS_REASON = Phrase("refusal.rerun_needs_reason", "a rerun from the web UI needs a reason")
CLEAR_SCOPE_CHANGED = Phrase(
    "refusal.clear_scope_changed",
    "the instances to clear changed since the preview; now: {tasks}. Look at the preview again",
)
RERUN_VERSION_MOVED = Phrase(
    "refusal.rerun_version_moved",
    "definition {name} is at version {version} now, the preview showed version {shown}. "
    "Look at the preview again",
    name=Slot.FIELD,
    version=Slot.NUMBER,
    shown=Slot.NUMBER,
)

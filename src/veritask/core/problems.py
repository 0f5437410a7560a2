"""The problems a definition is refused with, one phrase per kind (see :mod:`.phrases`).

The validator (:mod:`veritask.definitions`) formats them into each problem's message; the API
and the CLI show the English, the web UI's editor shows the reader's language at the line.
"""

from __future__ import annotations

from veritask.core.phrases import Phrase, Slot

_S = Slot.SENTENCE

# -- what a value is (inside "expected …, got {kind}") ---------------------------------------

A_MAPPING = Phrase("problem.a_mapping", "a mapping")
A_LIST = Phrase("problem.a_list", "a list")
NULL = Phrase("problem.null", "null")
THE_BOOLEAN = Phrase("problem.the_boolean", "the boolean {value}", value=Slot.CODE)
THE_NUMBER = Phrase("problem.the_number", "the number {value}", value=Slot.NUMBER)
THE_STRING = Phrase("problem.the_string", "the string {value!r}")

# -- typed values (definitions.reader) -------------------------------------------------------

EXPECTED_MAPPING = Phrase("problem.expected_mapping", "expected a mapping, got {kind}", kind=_S)
UNKNOWN_FIELD = Phrase("problem.unknown_field", "unknown field {name!r}")
UNKNOWN_FIELD_HINT = Phrase(
    "problem.unknown_field_hint", "unknown field {name!r} (did you mean {close!r}?)"
)
REQUIRED = Phrase("problem.required", "the field {name!r} is required")
EXPECTED_LIST = Phrase("problem.expected_list", "expected a list, got {kind}", kind=_S)
EXPECTED_STRING = Phrase("problem.expected_string", "expected a string, got {kind}", kind=_S)
EXPECTED_BOOLEAN = Phrase("problem.expected_boolean", "expected true or false, got {kind}", kind=_S)
EXPECTED_WHOLE_NUMBER = Phrase(
    "problem.expected_whole_number", "expected a whole number, got {kind}", kind=_S
)
AT_LEAST = Phrase(
    "problem.at_least",
    "must be {minimum} or more, got {number}",
    minimum=Slot.NUMBER,
    number=Slot.NUMBER,
)
ONE_OR_MORE = Phrase("problem.one_or_more", "must be 1 or more")
AT_MOST = Phrase(
    "problem.at_most",
    "must be {maximum} or less, got {number}",
    maximum=Slot.NUMBER,
    number=Slot.NUMBER,
)
EXPECTED_NUMBER = Phrase("problem.expected_number", "expected a number, got {kind}", kind=_S)
BETWEEN = Phrase(
    "problem.between",
    "must be between {low:g} and {high:g}, got {number}",
    low=Slot.NUMBER,
    high=Slot.NUMBER,
    number=Slot.NUMBER,
)
EXPECTED_DURATION = Phrase(
    "problem.expected_duration", "expected a duration such as 30s or 1h30m, got {kind}", kind=_S
)
LONGER_THAN_ZERO = Phrase("problem.longer_than_zero", "must be longer than 0s")
UNKNOWN_VALUE = Phrase("problem.unknown_value", "unknown value {value!r}; one of: {names}")
UNKNOWN_VALUE_HINT = Phrase(
    "problem.unknown_value_hint",
    "unknown value {value!r} (did you mean {close!r}?); one of: {names}",
)
EXPECTED_ONE_OF = Phrase("problem.expected_one_of", "expected one of {names}, got {kind}", kind=_S)
NOT_A_NAME = Phrase(
    "problem.not_a_name",
    "{text!r} is not a valid name: use lowercase letters, digits, '_' and '-', starting with a "
    "letter, at most 64 characters",
)
NOT_A_TASK_KEY = Phrase(
    "problem.not_a_task_key",
    "{text!r} is not a valid task key: use lowercase letters, digits, '_' and '-', starting "
    "with a letter, at most 64 characters",
)
NOT_A_CONNECTION_NAME = Phrase(
    "problem.not_a_connection_name",
    "{text!r} is not a valid connection name: use lowercase letters, digits, '_' and '-', "
    "starting with a letter, at most 64 characters",
)

# -- a task's environment (env:) -----------------------------------------------------------

NOT_AN_ENV_NAME = Phrase(
    "problem.not_an_env_name",
    "{name!r} is not a valid environment variable name: use letters, digits and '_', "
    "not starting with a digit",
)
RESERVED_ENV_NAME = Phrase(
    "problem.reserved_env_name",
    "{name!r} is reserved: the VERITASK_* variables belong to the platform",
)
EXPECTED_ENV_VALUE = Phrase(
    "problem.expected_env_value",
    "expected a string or a secret reference (secret: NAME), got {kind}",
    kind=_S,
)
NOT_A_SECRET_NAME = Phrase(
    "problem.not_a_secret_name",
    "{name!r} is not a valid secret name: use letters, digits and '_', not starting with a digit",
)

# -- sizes (definitions.sizes) ---------------------------------------------------------------

NOT_A_SIZE = Phrase(
    "problem.not_a_size",
    "{value!r} is not a size: write a number of bytes or a number with a unit, such as 512KiB, "
    "200MiB, 2GiB or 100MB",
)
SIZE_OUT_OF_RANGE = Phrase(
    "problem.size_out_of_range",
    "{value!r} is out of range: a log limit is from {low} to {high}",
)

# -- durations (definitions.durations) -------------------------------------------------------

DURATION_TOO_LONG = Phrase("problem.duration_too_long", "{value!r} is too long for a duration")
EXPECTED_A_DURATION = Phrase(
    "problem.expected_a_duration", "expected a duration such as 30s, 10m or 1h30m, got {value!r}"
)
NEGATIVE_DURATION = Phrase(
    "problem.negative_duration", "a duration must be 0 or more seconds, got {value!r}"
)
NOT_A_DURATION = Phrase(
    "problem.not_a_duration",
    "{value!r} is not a duration: write units largest first, such as 30s, 10m, 2h, 1d or "
    "1h30m, or a number of seconds",
)

# -- the text (definitions.source) -----------------------------------------------------------

INVALID_YAML = Phrase("problem.invalid_yaml", "invalid YAML: {detail}")
EMPTY = Phrase("problem.empty", "the definition is empty")
TOO_LARGE = Phrase(
    "problem.too_large", "the definition is too large (over {count} values)", count=Slot.NUMBER
)
ALIAS_LOOP = Phrase("problem.alias_loop", "a YAML alias refers to itself")
INVALID_MERGE = Phrase("problem.invalid_merge", "invalid merge key: {detail}")
PLAIN_KEY = Phrase("problem.plain_key", "a key must be a plain string")
DUPLICATE_KEY = Phrase(
    "problem.duplicate_key", "duplicate key (first on line {line})", line=Slot.NUMBER
)
UNSUPPORTED_NODE = Phrase("problem.unsupported_node", "unsupported YAML node {node}")
UNSUPPORTED_VALUE = Phrase("problem.unsupported_value", "unsupported value: {detail}")
NOT_FINITE = Phrase("problem.not_finite", "a number must be finite")
UNSUPPORTED_TYPE = Phrase("problem.unsupported_type", "unsupported value of type {type}")
KEY_NOT_A_STRING = Phrase("problem.key_not_a_string", "key {key!r} is not a string")
TOO_DEEP = Phrase(
    "problem.too_deep",
    "the definition is nested too deeply (over {limit} levels of lists and mappings)",
    limit=Slot.NUMBER,
)
CUSTOM_TAG = Phrase(
    "problem.custom_tag",
    "the YAML tag {tag} is refused: a definition holds plain JSON values",
    tag=Slot.CODE,
)

# -- tasks and the graph (definitions.parse, definitions.model) ------------------------------

LISTED_TASK_NEEDS_KEY = Phrase("problem.listed_task_needs_key", "a task in a list needs a key")
EXPECTED_TASKS = Phrase(
    "problem.expected_tasks", "expected a mapping of task keys, got {kind}", kind=_S
)
NO_TASKS = Phrase("problem.no_tasks", "at least one task is required")
TASK_DEFINED_TWICE = Phrase("problem.task_defined_twice", "a task with this key is already defined")
TEARDOWN_RULE = Phrase(
    "problem.teardown_rule",
    "a teardown task always uses all_done_setup_success: it must run even when the work failed",
)
DECIDES_RUN = Phrase(
    "problem.decides_run",
    "only a teardown task may set decides_run (other leaves always decide the run)",
)
ONLY_TEARDOWN_DECIDES = Phrase(
    "problem.only_teardown_decides", "only a teardown task may set decides_run"
)
CONNECTION_WITHOUT_SQL = Phrase(
    "problem.connection_without_sql", "only a sql task names a connection"
)
SQL_HAS_NO = Phrase(
    "problem.sql_has_no",
    "a sql task has no {other}: the statement is the whole task",
    other=Slot.CODE,
)
SQL_HAS_NO_STEP = Phrase("problem.sql_has_no_step", "a sql task has no run and no call")
EMPTY_STATEMENT = Phrase("problem.empty_statement", "the statement is empty")
SQL_NEEDS_CONNECTION = Phrase(
    "problem.sql_needs_connection",
    "a sql task needs connection: the name of a server in the platform's settings",
)
SQL_NEEDS_CONNECTION_NAME = Phrase(
    "problem.sql_needs_connection_name", "a sql task needs a connection name"
)
RUN_AND_CALL = Phrase("problem.run_and_call", "has both run and call; a step is one or the other")
RUN_OR_CALL = Phrase("problem.run_or_call", "needs run (a shell command) or call (module:function)")
ONE_OF_RUN_OR_CALL = Phrase("problem.one_of_run_or_call", "needs exactly one of run or call")
EMPTY_COMMAND = Phrase("problem.empty_command", "the command is empty")
CONTAINER_NEEDS_IMAGE = Phrase(
    "problem.container_needs_image", "a container task needs image (the image it runs in)"
)
CONTAINER_NEEDS_RUN = Phrase(
    "problem.container_needs_run", "a container task runs run (a shell line), not call or sql"
)
CONTAINER_ONLY = Phrase(
    "problem.container_only", "{name} is for container tasks (executor: container)"
)
SPARK_NEEDS_APP = Phrase(
    "problem.spark_needs_app",
    "a spark task needs app (a Python file) or jar with main_class, and not both",
)
SPARK_NEEDS_MAIN_CLASS = Phrase(
    "problem.spark_needs_main_class", "a jar needs main_class (the class whose main runs)"
)
SPARK_MAIN_CLASS_NEEDS_JAR = Phrase(
    "problem.spark_main_class_needs_jar", "main_class goes with jar (an app runs its file)"
)
SPARK_HAS_NO = Phrase(
    "problem.spark_has_no", "a spark task runs its app or jar, and has no {other}"
)
SPARK_ONLY = Phrase("problem.spark_only", "{name} is for spark tasks (executor: spark)")
SPARK_APP_NOT_PYTHON = Phrase(
    "problem.spark_app_not_python", "app must name a Python file (.py), not {app!r}"
)
SPARK_RESERVED_CONF = Phrase(
    "problem.spark_reserved_conf", "{name} is set by Veritask for every driver; remove it"
)
SPARK_PLACEHOLDER = Phrase(
    "problem.spark_placeholder",
    "args and conf are passed as written; a driver reads the run's values from its "
    "environment (VERITASK_LOGICAL_DATE, VERITASK_PARAM_…)",
)
NOT_A_VOLUME = Phrase(
    "problem.not_a_volume",
    "expected HOST:CONTAINER or HOST:CONTAINER:ro, both absolute paths without '..', got {value!r}",
)
NO_VOLUMES_ALLOWED = Phrase(
    "problem.no_volumes_allowed",
    "no host path may be mounted here: {setting} lists none (host directories, comma-separated)",
)
VOLUME_NOT_ALLOWED = Phrase(
    "problem.volume_not_allowed",
    "the host path {host!r} is not under a directory {setting} allows ({allowed})",
)
NOT_A_SECRET_FILE = Phrase(
    "problem.not_a_secret_file",
    "{name!r} is not a file name: use letters, digits, '.', '_' and '-', not starting with '.'",
)
RUN_LIST_PLACEHOLDER = Phrase(
    "problem.run_list_placeholder",
    "a run list is passed as it is written: write run as a shell line to use placeholders",
)
NOT_CALLABLE = Phrase(
    "problem.not_callable", "{call!r} is not module:function, such as jobs.transform:main"
)
NOT_CALLABLE_SHORT = Phrase("problem.not_callable_short", "{call!r} is not module:function")

# -- waits (a task with wait:) ---------------------------------------------------------------

WAIT_ONE_CONDITION = Phrase(
    "problem.wait_one_condition", "needs exactly one condition: path, sql, http or call"
)
WAIT_EMPTY = Phrase("problem.wait_empty", "the condition is empty")
WAIT_SQL_CONNECTION = Phrase(
    "problem.wait_sql_connection",
    "a sql condition needs connection (a server in the platform's settings), and only it",
)
WAIT_NOT_HTTP = Phrase(
    "problem.wait_not_http", "{url!r} is not an http:// or https:// URL", url=Slot.TEXT
)
WAIT_EVERY_TOO_SHORT = Phrase("problem.wait_every_too_short", "must be 1s or longer")
WAIT_HAS_NO_STEP = Phrase(
    "problem.wait_has_no_step", "a wait task has no run, call or sql: the condition is the task"
)
WAIT_HAS_NO = Phrase(
    "problem.wait_has_no",
    "a wait task has no {other}: the scheduler checks it, and it holds no slot",
    other=Slot.CODE,
)
UNKNOWN_EXECUTOR = Phrase(
    "problem.unknown_executor",
    "unknown executor {name!r}: no engine of this platform has that name; known: {known}",
)
EXECUTOR_NOT_CONFIGURED = Phrase(
    "problem.executor_not_configured",
    "the executor {name!r} is not configured here: set {setting} where the scheduler runs",
)
ENGINE_UNAVAILABLE = Phrase(
    "problem.engine_unavailable", "the executor {name!r} cannot be used here: {reason}"
)
MODULE_NOT_FOUND_BY_WORKERS = Phrase(
    "problem.module_not_found_by_workers",
    "the local workers cannot import {module!r}: no folder on their PYTHONPATH ({path}) holds "
    "it; start the scheduler with the folder above it on PYTHONPATH "
    "(`veritask up --examples FOLDER` does it)",
)
WAIT_MAPPED = Phrase(
    "problem.wait_mapped", "a mapped wait checks a path or a URL only, not {kind}", kind=Slot.CODE
)
EXPECTED_TASK_KEYS = Phrase(
    "problem.expected_task_keys", "expected a list of task keys, got {kind}", kind=_S
)
EXPECTED_TASK_KEY = Phrase("problem.expected_task_key", "expected a task key, got {kind}", kind=_S)
AFTER_ITSELF = Phrase("problem.after_itself", "task {key!r} cannot run after itself")
NO_SUCH_TASK = Phrase("problem.no_such_task", "no task named {key!r}")
NO_SUCH_TASK_HINT = Phrase(
    "problem.no_such_task_hint", "no task named {key!r} (did you mean {close!r}?)"
)
LISTED_TWICE = Phrase("problem.listed_twice", "{key!r} is listed twice")
CYCLE = Phrase("problem.cycle", "the tasks form a cycle: {cycle}")
USED_TWICE = Phrase("problem.used_twice", "{name!r} is used twice")
WAITS_FOR_ITSELF = Phrase("problem.waits_for_itself", "a definition cannot wait for its own runs")
MUST_BE_PUBLISHED = Phrase(
    "problem.must_be_published",
    "must be true: a dependency is released only when the other run is PUBLISHED, never "
    "merely executed",
)
TRIGGERED_BY_ITSELF = Phrase(
    "problem.triggered_by_itself", "a definition cannot be started by its own publications"
)
NO_UPSTREAMS = Phrase(
    "problem.no_upstreams", "name at least one definition whose publication starts a run"
)
TRIGGERED_BY_UNPUBLISHED = Phrase(
    "problem.triggered_by_unpublished",
    "{name!r} has no publish section: its runs are never PUBLISHED, so this trigger would "
    "never start a run",
)
TRIGGERED_BY_THIS_PUBLICATION = Phrase(
    "problem.triggered_by_this_publication",
    "{names} start runs when this definition's runs are PUBLISHED (trigger.on_published): "
    "keep a publish section, or remove their trigger first",
)
WAITS_FOR_UNPUBLISHED = Phrase(
    "problem.waits_for_unpublished",
    "{name!r} has no publish section: its runs are never PUBLISHED, so this wait would never end",
)
WAITED_FOR_UNPUBLISHED = Phrase(
    "problem.waited_for_unpublished",
    "{names} wait for this definition's runs to be PUBLISHED (wait_for): keep a "
    "publish section, or remove their wait_for first",
)
ONLY_PUBLISHED_RELEASES = Phrase(
    "problem.only_published_releases", "must be true: only PUBLISHED releases a dependency"
)
NOT_A_VALID_NAME = Phrase("problem.not_a_valid_name", "{name!r} is not a valid name")
HOLDS_ANOTHER_TASK = Phrase("problem.holds_another_task", "holds the task {key!r}")

# -- schedules (definitions.cron) ------------------------------------------------------------

CRON_REQUIRED = Phrase(
    "problem.cron_required", "a cron expression is required, such as '0 2 * * *'"
)
UNKNOWN_MACRO = Phrase("problem.unknown_macro", "unknown macro {macro!r}; known: {known}")
CRON_FIELD_COUNT = Phrase(
    "problem.cron_field_count",
    "{text!r} has {count} fields; cron needs 5: minute hour day-of-month month day-of-week",
    count=Slot.NUMBER,
)
#: One per field of a cron expression, in order.
CRON_FIELDS = (
    Phrase("problem.cron_minute", "minute field {part!r} is not valid (allowed: 0-59)"),
    Phrase("problem.cron_hour", "hour field {part!r} is not valid (allowed: 0-23)"),
    Phrase(
        "problem.cron_day",
        "day of month field {part!r} is not valid (allowed: 1-31, L or LW)",
    ),
    Phrase("problem.cron_month", "month field {part!r} is not valid (allowed: 1-12 or JAN-DEC)"),
    Phrase(
        "problem.cron_weekday",
        "day of week field {part!r} is not valid (allowed: 0-7 or SUN-SAT (0 and 7 are "
        "Sunday), with L or # allowed)",
    ),
)
NEVER_FIRES = Phrase("problem.never_fires", "{text!r} never fires: {detail}")
UNKNOWN_ZONE = Phrase(
    "problem.unknown_zone",
    "unknown time zone {name!r}; use an IANA name such as 'Asia/Shanghai' or 'UTC'",
)
UNKNOWN_ZONE_HINT = Phrase(
    "problem.unknown_zone_hint",
    "unknown time zone {name!r} (did you mean {close!r}?); use an IANA name such as "
    "'Asia/Shanghai' or 'UTC'",
)

# -- policies (core.policy) ------------------------------------------------------------------

NOT_NEGATIVE = Phrase("problem.not_negative", "must not be negative, got {value}")
SHORTER_THAN_DELAY = Phrase(
    "problem.shorter_than_delay",
    "{max_delay} is shorter than delay {delay}",
    max_delay=Slot.DURATION,
    delay=Slot.DURATION,
)
NEVER_RETRIED = Phrase("problem.never_retried", "{states} can never be retried", states=Slot.STATES)
MUST_BE_POSITIVE = Phrase("problem.must_be_positive", "must be positive, got {value}")

# -- parameters (definitions.parameters, definitions.declarations) ---------------------------

EXPECTED_DATE = Phrase("problem.expected_date", "expected a date (YYYY-MM-DD), got {kind}", kind=_S)
EXPECTED_DATETIME = Phrase(
    "problem.expected_datetime",
    "expected a date and time (ISO 8601, such as 2024-01-31T02:00:00+00:00), got {kind}",
    kind=_S,
)
PARAMETER_REQUIRED = Phrase(
    "problem.parameter_required", "required: the definition gives it no default"
)
NO_CHOICES = Phrase("problem.no_choices", "list at least one value")
CHOICE_NOT_PLAIN = Phrase(
    "problem.choice_not_plain",
    "a choice must be a string, a number or a boolean, got {kind}",
    kind=_S,
)
ENUM_AND_CHOICES = Phrase(
    "problem.enum_and_choices", "write the values once, as enum or as choices, not both"
)
SCHEDULED_NEEDS_DEFAULT = Phrase(
    "problem.scheduled_needs_default",
    "needs a default: a scheduled or backfilled run has no one to give it a value",
)
PLACEHOLDER_IN_SHELL_QUOTES = Phrase(
    "problem.placeholder_in_shell_quotes",
    "{name} is written inside quotes; write it outside quotes (its value is given to the "
    "command as one word) or declare the parameter raw",
    name=Slot.CODE,
)
PLACEHOLDER_IN_SQL_QUOTES = Phrase(
    "problem.placeholder_in_sql_quotes",
    "{name} is written inside a quoted string or name; write it unquoted where a value goes "
    "(its value is bound as a parameter) or declare the parameter raw",
    name=Slot.CODE,
)
UNKNOWN_TEMPLATE_NAME = Phrase(
    "problem.unknown_template_name",
    "{name} is not a template variable; known: {known}",
    name=Slot.CODE,
    known=Slot.CODE,
)
OUTPUT_NOT_UPSTREAM = Phrase(
    "problem.output_not_upstream",
    "{name} reads the output of task {task!r}, which this task does not run after; add that "
    "task to its after (a task reads only the outputs of its upstream tasks)",
    name=Slot.CODE,
)
MAP_OVER_NOT_OUTPUT = Phrase(
    "problem.map_over_not_output",
    "{value!r} is not an upstream task's output; write map.over as {example}, naming a task "
    "this task runs after whose output is a list",
    example=Slot.CODE,
)
MAP_PLACEHOLDER_UNMAPPED = Phrase(
    "problem.map_placeholder_unmapped",
    "{name} is the item of a mapped task, and this task has no map: give it a map with its "
    "over, or remove the placeholder",
    name=Slot.CODE,
)
OUTPUT_NOT_HERE = Phrase(
    "problem.output_not_here",
    "{name}: only a task's run command or its with values can read a task's output; pass "
    "the value to a run or call task instead",
    name=Slot.CODE,
)
WAIT_URL_PLACEHOLDER_IN_ORIGIN = Phrase(
    "problem.wait_url_placeholder_in_origin",
    "{name} stands in the URL's scheme, host, port or fragment, which come from the "
    "definition alone; a value may fill only a path segment or a query value (?day=…)",
    name=Slot.CODE,
)
WAIT_URL_PLACEHOLDER_IN_QUERY_NAME = Phrase(
    "problem.wait_url_placeholder_in_query_name",
    "{name} stands in a query parameter's name; a value may fill only the value, "
    "after its = (?day=…)",
    name=Slot.CODE,
)
WAIT_PATH_NO_ROOT = Phrase(
    "problem.wait_path_no_root",
    "{name} stands under no fixed directory; write the absolute directory the wait "
    "looks in before the first placeholder (/data/orders/…/_SUCCESS): a value is only "
    "ever a name under it",
    name=Slot.CODE,
)
SQL_ONE_STATEMENT = Phrase(
    "problem.sql_one_statement",
    "holds more than one statement (a second one starts on line {line}); a sql task or wait "
    "runs exactly one: split it into tasks",
    line=Slot.NUMBER,
)
SQL_CANNOT_BIND = Phrase(
    "problem.sql_cannot_bind",
    "{name} cannot be bound in this statement: PostgreSQL binds values only in SELECT, "
    "INSERT, UPDATE, DELETE, MERGE and VALUES; declare the parameter raw to paste its text",
    name=Slot.CODE,
)

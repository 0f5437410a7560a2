"""The hand-written prose of the generated reference pages (read by :mod:`veritask.docgen`).

Kept apart from the generator so that the generator stays about tables; the text is ours and
says what the code does. Edit it here, then run ``make docs``.
"""

from __future__ import annotations

from veritask.core.states import AttemptState, InstanceState

#: A common name, its instance states, its attempt states, and where the mapping is not 1:1.
CommonName = tuple[str, tuple[InstanceState, ...], tuple[AttemptState, ...], str]

#: The states most long-task systems name, and where each lands in Veritask. The members are
#: the enums' own, so renaming a state breaks the page's generation instead of leaving it wrong.
COMMON_VOCABULARY: tuple[CommonName, ...] = (
    (
        "CREATED",
        (InstanceState.CREATED, InstanceState.SCHEDULED),
        (AttemptState.SCHEDULED,),
        "Split in two: CREATED is an instance with no attempt yet (waiting for its upstream "
        "tasks, a concurrency slot, its pool's slots or its time); SCHEDULED means attempt N "
        "is open, its pool's slots taken, and about "
        "to be handed to the engine. Between two attempts the instance is UP_FOR_RETRY.",
    ),
    (
        "STARTING",
        (InstanceState.SCHEDULED, InstanceState.QUEUED),
        (AttemptState.SCHEDULED, AttemptState.QUEUED),
        "Split in two on evidence: SCHEDULED until the engine acknowledges the submission, "
        "QUEUED from then until the worker reports that the task's process started. Queue "
        "time is the QUEUED part.",
    ),
    (
        "RUNNING",
        (InstanceState.RUNNING, InstanceState.LOST),
        (AttemptState.RUNNING, AttemptState.LOST),
        "RUNNING needs a report from the attempt's worker. A worker silent past its lease is "
        "LOST: we cannot reach it, it may still be running, and it is not counted as failed.",
    ),
    (
        "SUCCEEDED",
        (InstanceState.SUCCESS,),
        (AttemptState.SUCCESS,),
        "One to one for the task. A run's output is usable only when its publication state "
        "is PUBLISHED (or NOT_REQUIRED); a SKIPPED task counts as a success for its run.",
    ),
    (
        "FAILED",
        (InstanceState.FAILED, InstanceState.UP_FOR_RETRY, InstanceState.UPSTREAM_FAILED),
        (AttemptState.FAILED, AttemptState.ABANDONED),
        "An attempt that fails leaves its instance UP_FOR_RETRY while the policy allows "
        "another try, FAILED only when none is left. UPSTREAM_FAILED never ran. An ABANDONED "
        "attempt was fenced off because its fate stayed unknown; its instance then retries or "
        "fails as `on_unknown` says.",
    ),
    (
        "STOPPING",
        (InstanceState.CANCELLING, InstanceState.CANCEL_FAILED),
        (AttemptState.CANCELLING, AttemptState.CANCEL_FAILED),
        "CANCELLING covers both a cancel and a timeout's stop while the engine has not "
        "confirmed it; past the cancel window it is CANCEL_FAILED (alerted, still asked).",
    ),
    (
        "STOPPED",
        (InstanceState.CANCELLED,),
        (AttemptState.CANCELLED,),
        "Only on the engine's (or the worker's) confirmation, or at once when nothing was "
        "running (a CREATED or UP_FOR_RETRY instance). A stop for a timeout ends TIMEOUT.",
    ),
    (
        "TIMEOUT",
        (InstanceState.TIMEOUT, InstanceState.UP_FOR_RETRY),
        (AttemptState.TIMEOUT,),
        "The attempt is TIMEOUT once its stop is confirmed (CANCELLING until then); the "
        "instance is TIMEOUT only when no retry is left, UP_FOR_RETRY otherwise.",
    ),
    (
        "START_FAILED",
        (InstanceState.START_FAILED, InstanceState.UP_FOR_RETRY),
        (AttemptState.START_FAILED, AttemptState.NOT_RECEIVED),
        "START_FAILED: the engine refused the attempt or could not start it; the instance "
        "retries while its policy allows. NOT_RECEIVED is the engine having no trace of it: "
        "it is resubmitted as a new attempt at once, within `max_resubmits`, and the instance "
        "ends START_FAILED when that bound is spent.",
    ),
)


OBJECTS = """## Runs, task instances and attempts

- A **definition** says what to run; each change of it is a new immutable **version**, and
  the definition points at its current one ([definitions.md](definitions.md)).
- A **run** is one execution of one definition version: for a logical time (a schedule or a
  backfill) or for a trigger by a person or a program. It has two states: its
  `execution_state` (did the computation end, and how) and its `publication_state` (may its
  output be used).
- A **task instance** is one task of one run (with a map index when a task fans out). Its
  state is the fold of its attempts, the retry policy and the decisions about the instance.
- An **attempt** is one process-level try of an instance, numbered 1, 2, …. It carries a
  secret token, the executor and the engine's external id, the worker, its lease and last
  report, its times, exit code, error category, error message (its last error, null on a
  success), log and progress, and what its process used: user and system CPU seconds and
  peak resident memory, as the worker measured them.

Rules that hold for all of them:

- **A trigger never duplicates a run.** Every run has a unique idempotency key: a scheduled
  run's is the definition and its logical time, and a backfill uses the same key, so a
  backfill never doubles a scheduled run; a manual or API trigger takes the caller's key or
  a generated one. Creating a run with a key that exists returns the existing run.
- **A retry is a new attempt.** So is clearing a finished instance to run it again with the
  same inputs. Earlier attempts keep their record (times, exit code, logs) untouched. A rerun
  with other parameters or another definition version is a new run, with trigger kind
  `rerun` and a link to the original.
- **The token fences the attempt.** It is minted when the attempt opens, given only to its
  worker, and stored as a hash. A worker's report counts only for the attempt whose number
  and token it carries, and only the current attempt may commit output
  ([outcomes-and-fencing.md](outcomes-and-fencing.md), 'Fencing').

"""

TABLE_RULES = """### What the table allows, and what it does not

- QUEUED needs the executor's acknowledgement, and RUNNING a report from the current
  attempt's worker. Calling the executor and writing RUNNING would hide the queue time; the
  table has no such edge.
- SUCCESS and FAILED need completion evidence: an exit code from the worker or from the
  engine. A failed instance never goes back to RUNNING: another try goes through
  UP_FOR_RETRY and SCHEDULED as attempt N+1.
- A lease that runs out moves RUNNING to LOST and nowhere else. From LOST the reconciler
  decides on evidence ([scheduling.md](scheduling.md), section 4); a report of the same,
  unfenced attempt that the lease decision had not seen brings it back to RUNNING, and so
  does the engine's answer that the attempt's process runs (a silent worker is not a dead
  task): that answer renews the lease, and only evidence of an end, or of absence past the
  evidence window, ends the attempt.
- A cancel moves it to CANCELLING; CANCELLED when the engine confirms the stop;
  CANCEL_FAILED when it does not within the cancel window. A completion that arrives first
  decides instead, and its reason says the cancel lost the race.
- A timeout is a stop the monitor requests: CANCELLING, then TIMEOUT when the engine
  confirms it or the worker reports that it enforced the timeout itself.
- Retries follow the task's policy ([definitions.md](definitions.md), 'Policy fields'):
  FAILED, START_FAILED and TIMEOUT are retried by default, CANCELLED never. The wait's
  jitter is computed from the instance and the attempt number, so every fold gives the same
  `retry_at`. NOT_RECEIVED resubmits at once and counts against `max_resubmits` (3 by
  default), not against `max_retries`.
- An **override** is an operator's decision (who, why, and its scope: the instance, the
  instance and its downstream, or the whole run) that sets SUCCESS or FAILED on the current
  epoch. It erases no fact and is shown as an override everywhere.
- **A terminal instance may still change, on completion evidence only**
  (`stronger_completion_overrules`). The fold decides on the strongest evidence it holds
  ([outcomes-and-fencing.md](outcomes-and-fencing.md), 'The fold's precedence'), so a
  completion of the current attempt that arrives after a weaker ending outranks it: the
  worker's exit 0 after the engine's exit record said FAILED, a completion after the engine
  confirmed a stop (CANCELLED). Two completions that disagree are a `conflict`, kept both and
  alerted. Nothing else moves a finished instance: no lease, no reconciler decision, no
  request; an operator's override (the strongest decision) and a clear or rerun (a new epoch)
  are deliberate acts, recorded as such. A fenced (ABANDONED) attempt is never revived: a
  completion after the fence is kept as a note. A late change does not undo what was already
  decided on the old state: downstream instances skipped, failed upstream or run, and a run
  that ended or published on it, stay as recorded. When there is any such decision, the
  change raises one `reconciliation` alert, "late completion evidence of attempt N changed
  the instance from FAILED to SUCCESS; decided on the old state and left as it is: …",
  naming each downstream instance with its state, the run's end and its publication state;
  an operator clears them (a clear is a new epoch, decided on the new state) or leaves them.
  The alert is raised whichever way the completion came, the outbox or the callback API.
- The trigger rules decide a CREATED instance on its upstream states with Airflow's
  precedence when they mix (failed, upstream failed and skipped together):
  [trigger-rules.md](trigger-rules.md), 'Precedence when states mix'.
- A RUNNING attempt the engine no longer knows (found at a restart) is not a failure: the
  `reconciliation` alert is raised at once, and `fenced_after_the_evidence_window` applies
  only once the evidence window has passed since that answer
  ([scheduling.md](scheduling.md), section 5).
- The table includes the edges a late or lost event implies (QUEUED → SUCCESS when the
  `started` report never arrived). A request that is illegal *now*, such as cancelling a
  finished instance, is refused by the API with 409 and never reaches the ledger.

"""


RUN_RULES = """What moves a run, besides its instances:

- **Cancel.** A cancelled run ends CANCELLED when the cancel stopped at least one instance.
  If every instance had already ended by itself, the run ends in the state they imply, its
  reason ending "the cancel came too late"; its publication steps are cancelled anyway, so a
  cancelled run never publishes.
- **Override.** An override with `scope: downstream` or `scope: run` is all or nothing: every
  instance is judged, then all are recorded in one transaction with the run's new state, or
  none is (409 when they kept moving). `scope: run` reaches the run's tasks, never its
  publication steps: an override never publishes, a run made SUCCESS publishes through its
  own steps, and a run whose publication has started cannot be made FAILED.
- **Clear.** A clear is all or nothing too: the `cleared` decision of every instance in scope
  and the run's return to RUNNING (its publication to PENDING, when it had moved on) are one
  transaction, each instance against the version it was judged on. Another writer moving one
  of them meanwhile records none; the scope is judged again, and 409 if it keeps moving.
- **Late evidence.** A finished run's execution state follows its instances' final states.
  When late decisive evidence changes an instance after its run ended SUCCESS or FAILED (a
  worker's exit 0 after the engine's exit record said FAILED), the run moves to the state its
  instances now imply by a `run_state_changed` event whose evidence (`late_evidence`) names
  the instance, the task, the attempt and the event that changed it, and whose reason says
  so. Decisions other instances took on the old state stay as recorded (downstream tasks
  skipped or failed upstream are still instances of the run, so a run whose leaf is
  UPSTREAM_FAILED stays FAILED); the alert of 'What the table allows' names them, for an
  operator to clear. `verify` and `doctor` report a finished run whose instances imply
  another state, and `verify --repair` moves it there by a recorded `run_state_changed`.
- **Waiting for a publication.** A `wait_for` holds a run's roots CREATED until the other
  definition's run of the same logical time (minus `lag`) is PUBLISHED, never merely
  executed. One on a definition that publishes nothing could never end, so applying it is
  refused ([definitions.md](definitions.md), 'wait_for'). A run still waiting past its
  `expected_finish` raises a `dependency` alert naming what it waits for; past the wait's
  `timeout` its roots are UPSTREAM_FAILED, alerted too.
- **Started by a publication.** A definition with `trigger: {on_published: [...]}` gets a run
  of kind `published` when its upstreams' runs are PUBLISHED (all of them for one logical
  time, or any one), with their logical time, never when they merely executed; the run names
  the upstream runs ([scheduling.md](scheduling.md), 'Runs started by published data').
- **Checked at rest.** `veritask verify` and `doctor` check every run's stored execution and
  publication states against its run events, an ended run against its instances, and every
  definition's versions and lifecycle against its own events ([operations.md](operations.md)).

"""


OUTCOMES_RULES = """## Choices in the rules

- **A worker report beats `submit_failed`.** A submit error could be read as decisive. But a
  worker that reports proves the engine did start the attempt; letting the submit error win
  would open a retry while the first copy runs. Veritask decides START_FAILED on
  `submit_failed` only while no worker report is held.
- **LOST is cleared by sequence, not by arrival time.** Worker reports carry a per-attempt
  sequence number; `lease_expired` records the highest one it saw. A report with a higher
  sequence revives the attempt. This means "a report observed after the LOST decision", but
  it needs no clock comparison between servers. The engine's word is compared by time
  instead, both sides being the platform's own decisions: an `engine_observed` saying
  `running` revives the attempt only when it was recorded after the latest `lease_expired`.
- **No attempt opens beside one the engine says still runs.** A fenced attempt's successor
  waits while the engine reports the old one pending or running, and the stop is sent again
  (and escalated) until the engine says it ended.
- **A cancel while nothing runs is an instance decision.** Cancelling a CREATED or UP_FOR_RETRY
  instance has no process to stop, so it takes effect at once (CANCELLED, reason "while it
  waited to retry"); a cancel of a running attempt waits for the engine's confirmation.
- **A cancel that loses to a failure does not retry.** The operator wanted it stopped.
- **Attempts can end SKIPPED.** SKIPPED is otherwise a decision about an instance; a task that
  exits with its skip code (99) ends its attempt SKIPPED so the record says what the task said.

## What is guaranteed

The property tests (`tests/unit/test_properties.py`), the golden histories
(`tests/unit/test_histories.py`) and the fault tests (`tests/scheduling/test_faults.py`, the
random kills of the scheduler) check these; other pages refer to them by number.

1. **Convergence.** For one set of recorded events the snapshot is the same whatever order
   they are applied in, and applying an event twice changes nothing: duplicated, delayed
   and reordered facts never change the outcome. A decision is recorded only on the snapshot
   it saw.
2. **Fencing.** No event of an attempt older than the current one changes the instance, and
   a commit of output from a fenced attempt is refused.
3. **Legal paths.** Every recorded history (the successive snapshots) is a path of the
   transition table of [state-machine.md](state-machine.md).
4. **Attribution.** No state changes without an event with a unique id, an allowed actor,
   its evidence, `event_time` and `observed_at`.
5. **Unknown is not failure.** The loss of heartbeats alone never yields FAILED, nor SUCCESS.
6. **Idempotence.** One run per idempotency key; attempt N opened at most once; one engine
   submission per attempt.
7. **Nothing lost.** An event acknowledged to its sender is durable; worker events are
   delivered at least once and recorded exactly once; the event table is append-only.
8. **History kept.** A retry never changes an earlier attempt's record.
9. **Confirmed stops.** CANCELLED and TIMEOUT only on the engine's (or the worker's)
   confirmation that the process stopped.
10. **Crash safety.** Kill any platform process at any point: after the restart every
    instance converges to what the engine says happened, with no duplicate submission.
11. **Published means published.** A dependency on another pipeline is released only by a
    PUBLISHED run, never by one that merely executed.
12. **Overrides are audited.** An override names its operator, reason and scope, and erases
    no fact.
"""

"""Every sentence the platform records is a phrase the web UI can read back and translate.

The phrases themselves (both catalogs, their fields, the round trip from a sentence to its
fields), then coverage: the reasons real folds, judgements, run verdicts and trigger rules
produce, and the messages of every alert the platform raises, are all recognised, so that no
English is left for a reader of another language.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.simulation import Fate, Scenario, simulate
from tests.unit.story import Story
from veritask.core import alert_messages, decide, judge, phrasebook, reasons
from veritask.core.phrases import Phrase, Slot
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.run_state import RunGraph, TaskNode, TaskRole, execution_state
from veritask.core.states import EngineState, InstanceState, PublicationState, RunExecutionState
from veritask.core.trigger_rules import TriggerRule, evaluate
from veritask.ui import i18n

PHRASES = phrasebook.BOOK.phrases
PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: Names joined by ", " (task keys, run ids) are data, never words to translate.
NAMES = re.compile(r"[\w.:@-]+(?:, [\w.:@-]+)*")
#: A recorded time (``datetime.isoformat``) is data too.
MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d)?")

SAMPLES: dict[Slot, object] = {
    Slot.NUMBER: 7,
    Slot.STATE: "UP_FOR_RETRY",
    Slot.STATES: "FAILED, SUCCESS",
    Slot.EVENT_KIND: "lease_expired",
    Slot.OPEN_REASON: "unknown_retry",
    Slot.LIFECYCLE: "disabled",
    Slot.ACTOR: "operator:alice",
    Slot.TIME: "2026-11-29T22:29:07.594596+00:00",
    Slot.DURATION: "1 day, 0:10:00",
    Slot.CODE: "all_success",
    Slot.FIELD: "tasks.load",
}


def sample(phrase: Phrase) -> dict[str, object]:
    """A value for each field that no other template would claim."""
    return {
        name: SAMPLES.get(slot, f"<{name} {slot.value}>") for name, slot in phrase.slots.items()
    }


def recorded_text(phrase: Phrase, values: dict[str, object]) -> dict[str, str]:
    """Each field as the template writes it (``{name!r}`` quotes it)."""
    shown = {}
    for _, name, spec, conversion in string.Formatter().parse(phrase.template):
        if name is not None:
            converted: object = repr(values[name]) if conversion == "r" else values[name]
            shown[name] = format(converted, spec or "")
    return shown


@pytest.mark.parametrize("language", list(i18n.Language))
def test_every_phrase_is_in_the_catalog_with_the_same_fields(language: i18n.Language) -> None:
    catalog = i18n.catalog(language)
    for phrase in PHRASES:
        assert phrase.key in catalog, phrase.key
        assert set(PLACEHOLDER.findall(catalog[phrase.key])) == phrase.fields, phrase.key


def test_the_english_catalog_says_what_the_template_writes() -> None:
    english = i18n.catalog(i18n.Language.EN)
    for phrase in PHRASES:
        plain = re.sub(r"\{(\w+)(?:![rsa])?(?::[^}]*)?\}", r"{\1}", phrase.template)
        assert english[phrase.key] == plain


def test_keys_and_templates_are_unique() -> None:
    assert len({p.key for p in PHRASES}) == len(PHRASES)
    assert len({p.template for p in PHRASES}) == len(PHRASES)


@pytest.mark.parametrize("phrase", PHRASES, ids=lambda p: p.key)
def test_a_formatted_phrase_is_recognised_with_its_fields(phrase: Phrase) -> None:
    values = sample(phrase)
    text = phrase.format(**values)
    assert phrasebook.match(text) == (phrase, recorded_text(phrase, values))


def test_format_refuses_missing_or_unknown_fields() -> None:
    with pytest.raises(TypeError):
        reasons.FENCED.format()
    with pytest.raises(TypeError):
        reasons.FENCED.format(why="x", extra="y")


def test_a_sentence_no_phrase_wrote_is_not_recognised() -> None:
    assert phrasebook.match("the moon is made of cheese") is None
    assert isinstance(phrasebook.read("the moon is made of cheese"), phrasebook.Plain)


def test_the_most_specific_template_wins() -> None:
    label = reasons.ATTEMPT.format(attempt_no=2, reason=reasons.NEVER_RECEIVED.format())
    text = reasons.NO_RETRIES_ALLOWED.format(reason=label, allowed=3)
    assert phrasebook.match(text) == (reasons.NO_RETRIES_ALLOWED, {"reason": label, "allowed": "3"})


def test_joined_clauses_are_read_one_by_one() -> None:
    running = "; ".join(
        [reasons.ACTIVE.format(tasks="a, b"), reasons.WAITING_FOR_UPSTREAM.format(tasks="c")]
    )
    reading = phrasebook.read(running)
    assert isinstance(reading, phrasebook.Joined)
    assert [part.phrase for part in reading.parts if isinstance(part, phrasebook.Said)] == [
        reasons.ACTIVE,
        reasons.WAITING_FOR_UPSTREAM,
    ]


# -- coverage: what the core really writes is recognised ------------------------------------


def unread(text: str, free: Iterable[str] = ()) -> list[str]:
    """The parts of ``text`` that no phrase wrote and that are not names or ``free`` text."""
    allowed = set(free)
    left: list[str] = []

    def walk(reading: phrasebook.Reading) -> None:
        match reading:
            case phrasebook.Plain(text=plain):
                if plain not in allowed and not (NAMES.fullmatch(plain) or MOMENT.fullmatch(plain)):
                    left.append(plain)
            case phrasebook.Joined(parts=parts):
                for part in parts:
                    walk(part)
            case phrasebook.Said(nested=nested):
                for _, inner in nested:
                    walk(inner)

    top = phrasebook.read(text)
    if isinstance(top, phrasebook.Plain):
        return [text]
    walk(top)
    return left


def scenarios(count: int) -> Iterator[Scenario]:
    rng = random.Random(20260101)
    for seed in range(count):
        yield Scenario(
            fates=tuple(rng.choice(list(Fate)) for _ in range(6)),
            durations=tuple(rng.randint(1, 10) for _ in range(6)),
            max_retries=rng.randint(0, 3),
            on_unknown=rng.choice(list(OnUnknown)),
            timeout=rng.choice([None, rng.randint(4, 20)]),
            max_delay=rng.randint(0, 6),
            duplicate_rate=rng.choice([0.0, 0.2, 0.5]),
            cancel_at=rng.choice([None, rng.randint(1, 60)]),
            override_at_end=rng.random() < 0.3,
            seed=seed,
            steps=100,
            requires_commit=rng.random() < 0.3,
        )


def test_every_reason_of_simulated_histories_is_recognised() -> None:
    seen: dict[str, str] = {}
    for scenario in scenarios(150):
        for r in simulate(scenario).recorded:
            texts = [r.reason, r.after.reason]
            for attempt in r.after.attempts:
                texts += [attempt.reason, *attempt.late]
            for text in texts:
                seen.setdefault(text, text)
    # The simulation's operator cancels "wrong parameters": a person's words, kept.
    left = {text: unread(text, {"wrong parameters"}) for text in seen}
    assert {text: parts for text, parts in left.items() if parts} == {}
    assert len(seen) > 100  # the histories did reach many different reasons


def story_reasons() -> Iterator[str]:
    """Paths the simulation rarely takes, told as stories."""
    policy = TaskPolicy(retry=RetryPolicy(max_retries=1), max_resubmits=1)
    stories: list[Story] = []
    s = Story(policy)  # refused by the engine, which says retrying cannot help
    s.open()
    s.submit_failed(retryable=False)
    stories.append(s)
    s = Story(policy)  # never received, twice
    for _ in range(2):
        s.open()
        s.ack()
        s.never_received()
    stories.append(s)
    s = Story(policy)  # lost, fenced, fail
    s.run_until_lost()
    s.fence("fail")
    s.complete(0)
    stories.append(s)
    s = Story(policy)  # a cancel the engine never confirmed
    s.open()
    s.ack()
    s.start()
    s.cancel()
    s.unconfirm_stop()
    stories.append(s)
    s = Story(policy)  # the engine's word against the worker's
    s.open()
    s.ack()
    s.start()
    s.complete(0)
    s.engine(EngineState.FAILED, exit_code=1)
    s.override("FAILED")
    stories.append(s)
    s = Story(policy)  # cancelled while it waited to retry
    s.open()
    s.ack()
    s.start()
    s.complete(1, "task_error")
    s.cancel()
    stories.append(s)
    for story in stories:
        for verdict in story.verdicts:
            yield verdict.reason
            yield verdict.after.reason
            for attempt in verdict.after.attempts:
                yield attempt.reason
                yield from attempt.late


def test_every_reason_of_the_stories_is_recognised() -> None:
    # The story's fence and cancel carry made-up words; the engine's error is kept as is.
    free = {"window closed", "wrong input", "checked by hand"}
    left = {text: unread(text, free) for text in set(story_reasons())}
    assert {text: parts for text, parts in left.items() if parts} == {}


def run_graphs() -> Iterator[tuple[RunGraph, dict[str, InstanceState], frozenset[str]]]:
    chain = RunGraph(
        (
            TaskNode("setup", role=TaskRole.SETUP),
            TaskNode("extract", ("setup",)),
            TaskNode("load", ("extract",)),
            TaskNode("report", ("extract",), TriggerRule.ALL_DONE),
            TaskNode("teardown", ("load", "report", "setup"), role=TaskRole.TEARDOWN),
        )
    )
    for states in _state_choices(chain.keys):
        yield chain, states, frozenset()
        yield chain, states, frozenset(k for k, v in states.items() if v.name == "UP_FOR_RETRY")
    wide = RunGraph(tuple(TaskNode(f"t{i}") for i in range(8)))
    yield wide, {f"t{i}": InstanceState.FAILED for i in range(8)}, frozenset()
    yield wide, {f"t{i}": InstanceState.RUNNING for i in range(8)}, frozenset()
    # Instances that wait for each other: a deadlock, with its cycle.
    cycle = RunGraph((TaskNode("a", ("c",)), TaskNode("b", ("a",)), TaskNode("c", ("b",))))
    yield cycle, {}, frozenset()
    stuck = RunGraph((TaskNode("a"), TaskNode("b", ("a",))))
    yield stuck, {"a": InstanceState.CANCELLING}, frozenset()


def _state_choices(keys: tuple[str, ...]) -> Iterator[dict[str, InstanceState]]:
    rng = random.Random(7)
    for _ in range(400):
        yield {key: rng.choice(list(InstanceState)) for key in keys}


def test_every_run_verdict_is_recognised() -> None:
    found = set()
    for graph, states, timed in run_graphs():
        verdict = execution_state(graph, states, waiting_for_time=timed)
        found.add(verdict.reason)
        if verdict.blocking:
            found.add(
                reasons.BLOCKING.format(reason=verdict.reason, tasks=", ".join(verdict.blocking))
            )
    left = {text: unread(text) for text in found}
    assert {text: parts for text, parts in left.items() if parts} == {}
    assert any(text.startswith("deadlock:") for text in found)


def test_every_trigger_rule_reason_is_recognised() -> None:
    rng = random.Random(11)
    found = set()
    for rule in TriggerRule:
        for _ in range(60):
            upstream = {key: rng.choice(list(InstanceState)) for key in ("a", "b", "c")}
            decision = evaluate(rule, upstream, setup_upstreams=frozenset({"a"}))
            said = reasons.RULE_SAYS.format(rule=rule, reason=decision.reason)
            found.add(reasons.TRIGGER_RULE.format(rule=said))
        found.add(evaluate(rule, {}).reason)
    left = {text: unread(text) for text in found}
    assert {text: parts for text, parts in left.items() if parts} == {}


# -- alert messages: what the scheduler, its sweeps and the deadline pass write ---------------

AT = datetime(2026, 3, 1, 4, 5, 6, 789000, tzinfo=UTC)


def _conflict_reason() -> str:
    """The judge's reason for the engine's word against the worker's (a real conflict)."""
    story = Story(TaskPolicy())
    story.open()
    story.ack()
    story.start()
    story.complete(0)
    verdict = story.engine(EngineState.FAILED, exit_code=1)
    assert verdict.outcome is judge.Outcome.CONFLICT
    return verdict.reason


def _inconclusive() -> str:
    """The reconciler's alert for a LOST attempt whose policy says wait."""
    story = Story(TaskPolicy(on_unknown=OnUnknown.WAIT))
    story.run_until_lost()
    later = story.clock + timedelta(days=1)
    result = decide.reconcile(story.snapshot, story.policy, None, now=later, next_id=story.next_id)
    assert result.alert is not None
    return result.alert


def _dependency_timed_out() -> str:
    """A ``wait_for`` past its timeout, as ``scheduling/dependencies.py`` words it."""
    return reasons.DEPENDENCY_TIMED_OUT.format(
        what=reasons.DEPENDENCY_AT.format(definition="ingest", at=AT.isoformat()),
        timeout=timedelta(hours=2),
        seen=reasons.PUBLICATION_IS.format(state=PublicationState.PUBLISH_FAILED),
    )


def written_alerts() -> Iterator[tuple[str, str]]:
    """Each alert message as its producer writes it, beside the English it wrote before it was
    a phrase (the old f-strings, copied as they were): the stored text must not change."""
    n, seconds, queued = 3, timedelta(seconds=30).total_seconds(), AT.isoformat()
    half = timedelta(milliseconds=500).total_seconds()
    yield alert_messages.MONITOR_FAILED.format(), "the monitor failed on this instance"
    yield alert_messages.RECONCILER_FAILED.format(), "the reconciler failed on this instance"
    yield alert_messages.ADVANCE_FAILED.format(), "the scheduler failed to advance this run"
    conflict = _conflict_reason()
    yield (
        alert_messages.CONFLICTING_EVIDENCE.format(reason=conflict),
        f"conflicting evidence: {conflict}",
    )
    for lease in (seconds, half):
        yield (
            alert_messages.LOST.format(attempt_no=n, seconds=lease),
            f"attempt {n} is LOST: no report within its lease "
            f"({lease:g} s); reconciling with the engine",
        )
    yield (
        alert_messages.RETRY_LATE.format(retry_at=queued),
        f"UP_FOR_RETRY since {queued} and not retried yet",
    )
    for deferred in ("", "connection refused (errno 111)"):
        written = (
            alert_messages.NOT_ACKNOWLEDGED_DEFERRED.format(
                attempt_no=n, seconds=seconds, error=deferred
            )
            if deferred
            else alert_messages.NOT_ACKNOWLEDGED.format(attempt_no=n, seconds=seconds)
        )
        yield (
            written,
            f"attempt {n} was opened but not acknowledged within "
            f"{seconds:g} s; submitting it again"
            + (f" (the engine said: {deferred})" if deferred else ""),
        )
    for since in (queued, alert_messages.UNKNOWN_TIME.format()):
        yield (
            alert_messages.STILL_PENDING.format(attempt_no=n, since=since, source="describe"),
            f"attempt {n} has been QUEUED since {since}; "
            f"the engine still holds it pending (describe)",
        )
    assert alert_messages.UNKNOWN_TIME.format() == "an unknown time"
    yield (
        alert_messages.POOL_FULL.format(pool="wh", since=queued, used=3, slots=3, waiting=12),
        f"pool wh has kept tasks waiting since {queued} (3 of 3 slots used, 12 task(s) waiting)",
    )
    yield (
        alert_messages.STOP_UNCONFIRMED.format(attempt_no=n, seconds=seconds),
        f"the engine did not confirm the stop of attempt {n} within {seconds:g} s",
    )
    stray = "container:veritask-box-1a2b3c-a3"
    yield (
        alert_messages.STRAY_STOPPED.format(external_id=stray, attempt_no=n),
        f"the engine ran {stray} for attempt {n} of an instance this platform does not hold "
        "(its run is this platform's): it was asked to stop",
    )
    for seen in (EngineState.RUNNING.value, alert_messages.UNREACHABLE.format()):
        yield (
            alert_messages.FENCED_STILL_RUNNING.format(
                attempt_no=n, seconds=half, engine=seen, next_no=n + 1
            ),
            f"attempt {n} was fenced but the engine did not confirm it "
            f"stopped within {half:g} s (engine: {seen}); "
            f"attempt {n + 1} waits until the engine says it ended",
        )
    assert alert_messages.UNREACHABLE.format() == "unreachable"
    yield (
        alert_messages.DEADLINE.format(due=queued),
        f"the run was expected to finish by {queued} and is still active",
    )
    yield (
        alert_messages.WAIT_OVERDUE.format(
            task="arrive",
            definition="ingest",
            seconds=seconds,
            since=queued,
            seen="no such file or directory /data/_SUCCESS",
        ),
        f"the wait arrive of ingest still checks 30 s after it began ({queued}), past its "
        "expected duration; its last check saw: no such file or directory /data/_SUCCESS",
    )
    waiting = reasons.WAITING_FOR.format(
        what=reasons.PENDING_NO_RUN.format(
            what=reasons.DEPENDENCY_LATEST.format(definition="ingest")
        )
    )
    yield (
        alert_messages.STILL_WAITING.format(due=queued, reason=waiting),
        f"the run was expected to finish by {queued} and has not started: {waiting}",
    )
    yield (
        alert_messages.ABSENT_AT_RECOVERY.format(
            attempt_no=n, engine="not_found", source="attempt_dir", seconds=600.0
        ),
        f"attempt {n} is RUNNING in the ledger but the engine answers not_found (attempt_dir); "
        "on_unknown decides after the 600 s evidence window",
    )
    yield (
        alert_messages.ENGINE_VOUCHES.format(attempt_no=n, source="process_table"),
        f"attempt {n} went silent past its lease but the engine reports its process running "
        "(process_table); monitoring resumed: nothing is fenced while the engine says it runs",
    )
    inconclusive = _inconclusive()
    yield inconclusive, "attempt 1 is LOST and the evidence stays inconclusive"
    yield (
        reasons.ABSENT_INCONCLUSIVE.format(attempt_no=1),
        "attempt 1 is RUNNING in the ledger, the engine still does not know it and the "
        "evidence stays inconclusive",
    )
    timed_out = _dependency_timed_out()
    yield (
        timed_out,
        f"wait_for ingest at {queued}: not PUBLISHED within 2:00:00 (publication PUBLISH_FAILED)",
    )
    yield (
        alert_messages.FOREIGN_LOG_PATH.format(attempt_no=n, path="/srv/veritask/token"),
        f"refused a report of attempt {n} whose log_path names another file "
        "('/srv/veritask/token'): a forged report or a broken worker",
    )
    decided = [
        alert_messages.DOWNSTREAM_DECIDED.format(task="load", state=InstanceState.UPSTREAM_FAILED),
        alert_messages.RUN_ENDED_ON.format(state=RunExecutionState.FAILED),
        alert_messages.PUBLICATION_ON.format(state=PublicationState.PUBLISHED),
    ]
    yield decided[0], "downstream task load is UPSTREAM_FAILED"
    yield decided[1], "the run ended FAILED"
    yield decided[2], "its publication is PUBLISHED"
    yield (
        alert_messages.DECIDED_ON_THE_OLD_STATE.format(
            attempt_no=n,
            previous=InstanceState.FAILED,
            state=InstanceState.SUCCESS,
            decided="; ".join(decided),
        ),
        f"late completion evidence of attempt {n} changed the instance from FAILED to SUCCESS; "
        "decided on the old state and left as it is: downstream task load is UPSTREAM_FAILED; "
        "the run ended FAILED; its publication is PUBLISHED; an operator may clear them to "
        "decide again",
    )
    yield (
        alert_messages.RUN_FAILED.format(reason=reasons.LEAF_ENDED.format(ended="load failed")),
        "the run failed: leaf load failed",
    )
    yield (
        alert_messages.RUN_FOLLOWED.format(
            attempt_no=n,
            previous=InstanceState.FAILED,
            state=InstanceState.SUCCESS,
            run_previous=RunExecutionState.FAILED,
            run_state=RunExecutionState.SUCCESS,
        ),
        f"late completion evidence of attempt {n} changed the instance from FAILED to SUCCESS; "
        "the run followed its instances from FAILED to SUCCESS",
    )


def test_alert_messages_are_written_as_before() -> None:
    changed = [(new, old) for new, old in written_alerts() if new != old]
    assert changed == []


def test_every_alert_message_is_recognised() -> None:
    written = [new for new, _ in written_alerts()]
    # The engine's error is kept as the engine wrote it.
    left = {text: unread(text, {"connection refused (errno 111)"}) for text in written}
    assert {text: parts for text, parts in left.items() if parts} == {}
    keys = {found[0].key for found in map(phrasebook.match, written) if found is not None}
    every_alert_phrase = {
        phrase.key
        for phrase in phrasebook.BOOK.phrases
        if phrase.key.startswith("alert.")
        and phrase not in (alert_messages.UNKNOWN_TIME, alert_messages.UNREACHABLE)
    }
    assert every_alert_phrase <= keys

"""Both catalogs say the same things, and every word a page shows comes from them."""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest

from veritask.core import transitions
from veritask.core.events import ActorKind, ErrorCategory, EventKind, OpenReason, OverrideScope
from veritask.core.explanation import ChangeKind
from veritask.core.states import (
    AttemptState,
    DefinitionLifecycle,
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.definitions.model import ConcurrencyPolicy, Schedule
from veritask.definitions.schedule import SchedulePattern, describe_schedule, schedule_words
from veritask.ledger.vocabulary import AlertCategory, AlertStatus, EventOutcome, TokenRole
from veritask.services.durations import Phase
from veritask.ui import i18n, rendering

UI = Path(str(resources.files("veritask.ui")))
TEMPLATES = sorted((UI / "templates").glob("*.html"))
SOURCES = [*sorted((UI / "pages").glob("*.py")), UI / "context.py", UI / "rendering.py"]
LITERAL_KEY = re.compile(r"""\bt\(\s*["']([a-z_]+\.[a-z_.]+)["']""")
# Jinja blocks, expressions and comments, then tags: what is left is text a reader sees.
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
TAG = re.compile(r"<[^>]*>", re.S)
SHOWN_ATTRIBUTES = re.compile(r'\b(?:title|placeholder|aria-label|alt)="([^"]*)"')
# Not words: the product's name (the same in both languages) and HTML entities.
ALLOWED_TEXT = {"Veritask"}


def _ones(catalog: Iterable[str]) -> set[str]:
    return {key for key in catalog if key.endswith(i18n.ONE)}


def test_both_catalogs_have_the_same_keys() -> None:
    english, chinese = i18n.catalog(i18n.Language.EN), i18n.catalog(i18n.Language.ZH)
    # Only English has forms for a count of one (Chinese nouns have no plural).
    assert set(english) - _ones(english) - set(chinese) == set()
    assert set(chinese) - set(english) == set()
    assert _ones(chinese) == set()


def test_a_form_for_one_has_its_key_and_only_its_placeholders() -> None:
    english = i18n.catalog(i18n.Language.EN)
    for key in _ones(english):
        base = key.removesuffix(i18n.ONE)
        assert base in english, key
        placeholders = set(re.findall(r"\{(\w+)\}", english[base]))
        assert set(re.findall(r"\{(\w+)\}", english[key])) <= placeholders, key
        assert placeholders & set(i18n.COUNTS), key  # a count chooses it


def test_a_count_of_one_reads_in_the_singular_in_english_only() -> None:
    en, zh = i18n.Translator(i18n.Language.EN), i18n.Translator(i18n.Language.ZH)
    assert en("clear.will_clear", count=1) == "This instance will be cleared"
    assert en("clear.will_clear", count=2) == "These 2 instances will be cleared"
    assert en("nav.open_alerts", n=1) == "1 open alert"
    assert en("nav.open_alerts", n=0) == "0 open alerts"
    assert en(
        "backfill.progress_counts",
        intervals=1,
        created=1,
        pending=0,
        running=0,
        succeeded=0,
        failed=0,
        cancelled=0,
        skipped=0,
    ).startswith("1 interval:")
    assert zh("nav.open_alerts", n=1) == i18n.catalog(i18n.Language.ZH)["nav.open_alerts"].format(
        n=1
    )


def test_no_english_sentence_hedges_its_plural() -> None:
    english = i18n.catalog(i18n.Language.EN)
    hedged = {
        key for key, text in english.items() if "(s)" in text and not key.startswith("reason.")
    }
    assert hedged == {"alert.pool_full"}  # its count is {waiting}, among other numbers


def test_both_catalogs_use_the_same_placeholders() -> None:
    english, chinese = i18n.catalog(i18n.Language.EN), i18n.catalog(i18n.Language.ZH)
    for key, text in english.items():
        if key.endswith(i18n.ONE):
            continue
        assert set(re.findall(r"\{(\w+)\}", text)) == set(re.findall(r"\{(\w+)\}", chinese[key])), (
            key
        )


def test_the_chinese_catalog_is_translated() -> None:
    english, chinese = i18n.catalog(i18n.Language.EN), i18n.catalog(i18n.Language.ZH)
    same = {
        k
        for k in set(english) & set(chinese)
        if english[k] == chinese[k] and re.search("[a-z]{3}", english[k])
    }
    assert same == {"app.name"}


@pytest.mark.parametrize("path", TEMPLATES + SOURCES, ids=lambda p: p.name)
def test_every_key_used_is_in_the_catalog(path: Path) -> None:
    english = i18n.catalog(i18n.Language.EN)
    used = set(LITERAL_KEY.findall(path.read_text()))
    assert used - set(english) == set()


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_show_no_text_outside_the_catalog(path: Path) -> None:
    source = path.read_text()
    without_code = JINJA.sub(" ", source)
    shown = TAG.sub(" ", without_code)
    words = set(re.findall(r"[A-Za-z\u4e00-\u9fff]{2,}", shown))
    assert words - ALLOWED_TEXT == set(), f"text not in the catalog in {path.name}"
    for value in SHOWN_ATTRIBUTES.findall(without_code):
        assert not re.search(r"[A-Za-z]{2,}", value), f"attribute text {value!r} in {path.name}"


@pytest.mark.parametrize(
    ("prefix", "values"),
    [
        ("state", InstanceState),
        ("state", AttemptState),
        ("state", RunExecutionState),
        ("state", PublicationState),
        ("lifecycle", DefinitionLifecycle),
        ("trigger_kind", TriggerKind),
        ("role", TokenRole),
        ("outcome", [*EventOutcome, "rejected"]),
        ("outcome_explain", [*EventOutcome, "rejected"]),
        ("phase", Phase),
        ("scope", OverrideScope),
        ("open_reason", OpenReason),
        ("error_category", ErrorCategory),
        ("concurrency", ConcurrencyPolicy),
        ("event_kind", EventKind),
        ("actor_kind", ActorKind),
        ("alert_category", AlertCategory),
        ("alert_category_explain", AlertCategory),
        ("alert_status", AlertStatus),
        ("alert_filter", [*AlertStatus, "unresolved", "all"]),
        ("schedule", SchedulePattern),
        ("weekday", range(7)),
        ("month", range(1, 13)),
        ("rule_why", [rule.name for rule in transitions.INSTANCE_RULES]),
        ("change_kind", ChangeKind),
    ],
)
def test_every_state_and_kind_has_a_name(prefix: str, values: Iterable[object]) -> None:
    english = i18n.catalog(i18n.Language.EN)
    missing = {f"{prefix}.{value}" for value in values} - set(english)
    assert missing == set()


def test_the_language_is_the_cookies_then_the_browsers() -> None:
    assert i18n.pick_language("zh", "en-US") is i18n.Language.ZH
    assert i18n.pick_language(None, "zh-CN,zh;q=0.9") is i18n.Language.ZH
    assert i18n.pick_language("klingon", "fr, en;q=0.5") is i18n.Language.EN
    assert i18n.pick_language(None, None) is i18n.DEFAULT_LANGUAGE


def test_a_missing_key_shows_as_itself() -> None:
    assert i18n.Translator(i18n.Language.ZH)("no.such.key") == "no.such.key"
    assert i18n.Translator(i18n.Language.ZH)("editor.line", line=3) == "第 3 行"


SCHEDULES = [
    "0 2 * * *",
    "0 2,14,20 * * *",
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "20 * * * *",
    "0 */6 * * *",
    "30 8 * * 1-5",
    "0 10 * * 0,6",
    "0 9 * * 1",
    "0 9 * * mon,wed,fri",
    "0 3 1 * *",
    "0 0 25 12 *",
    "0 0 L * *",
]


@pytest.mark.parametrize("cron", SCHEDULES)
def test_the_ui_phrases_a_schedule_in_english_exactly_as_the_api(cron: str) -> None:
    schedule = Schedule(cron, "Europe/Berlin")
    phrase = rendering.schedule_in(i18n.Translator(i18n.Language.EN))
    assert phrase(schedule_words(schedule)) == describe_schedule(schedule)


@pytest.mark.parametrize(
    ("cron", "chinese"),
    [
        ("0 2,14 * * *", "每天 02:00和14:00（Asia/Shanghai）"),
        ("30 8 * * 1-5", "每个工作日（周一至周五）08:30（Asia/Shanghai）"),
        ("0 9 * * mon,wed,fri", "每周一、周三和周五 09:00（Asia/Shanghai）"),
        ("0 0 25 12 *", "每年 12 月 25 日 00:00（Asia/Shanghai）"),
        ("*/15 * * * *", "每 15 分钟（Asia/Shanghai）"),
        ("0 0 L * *", "cron 表达式 0 0 L * *（Asia/Shanghai）"),
    ],
)
def test_the_ui_phrases_a_schedule_in_chinese(cron: str, chinese: str) -> None:
    phrase = rendering.schedule_in(i18n.Translator(i18n.Language.ZH))
    assert phrase(schedule_words(Schedule(cron, "Asia/Shanghai"))) == chinese


def test_an_actors_kind_is_translated_and_a_persons_name_is_not() -> None:
    actor = rendering.actor_in(i18n.Translator(i18n.Language.ZH))
    assert actor("operator:ann") == "操作员:ann"
    assert actor("reconciler") == "对账器"
    assert actor("robot:x") == "robot:x"  # not a kind we know: shown as recorded
    assert rendering.actor_in(i18n.Translator(i18n.Language.EN))("operator:ann") == "operator:ann"


@pytest.mark.parametrize(
    ("seconds", "english", "chinese"),
    [
        (3, "just now", "刚刚"),
        (-4, "just now", "刚刚"),
        (42, "42 s ago", "42 秒前"),
        (185, "3 min ago", "3 分钟前"),
        (2 * 3600 + 59, "2 h ago", "2 小时前"),
        (3 * 86400, "3 d ago", "3 天前"),
        (-600, "in 10 min", "10 分钟后"),
    ],
)
def test_a_time_says_how_long_ago_it_was_in_the_viewers_language(
    seconds: int, english: str, chinese: str
) -> None:
    now = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
    moment = now - timedelta(seconds=seconds)
    assert rendering.relative(i18n.Translator(i18n.Language.EN), moment, now) == english
    assert rendering.relative(i18n.Translator(i18n.Language.ZH), moment, now) == chinese


def test_a_time_is_shown_in_the_viewers_zone_with_utc_on_hover_and_how_long_ago() -> None:
    now = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
    when = rendering.when_in(
        zoneinfo.ZoneInfo("Asia/Shanghai"), i18n.Translator(i18n.Language.EN), now
    )
    shown = str(when(now - timedelta(minutes=5)))
    assert shown == (
        '<time datetime="2026-12-02T07:55:00+00:00" title="2026-12-02 07:55:00 UTC">'
        '2026-12-02 15:55:00 CST</time> <span class="ago">5 min ago</span>'
    )
    moment = rendering.moment_in(zoneinfo.ZoneInfo("Asia/Shanghai"))
    assert moment(now) == "2026-12-02 16:00:00 CST"  # tooltips are in the viewer's zone too


def test_the_english_of_each_transition_rule_is_the_tables_own() -> None:
    english = i18n.catalog(i18n.Language.EN)
    for rule in transitions.INSTANCE_RULES:
        assert english[f"rule_why.{rule.name}"] == rule.why, rule.name

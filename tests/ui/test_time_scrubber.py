"""The run page as of an instant and the instance page's explain panel, over HTTP without a
browser: ``?as_of=T`` renders what the platform had recorded by T, marks the events that
arrived late, and a time that is not one is named on the page; the panel speaks English and
Chinese. The histories are recorded with a stepped clock, so every instant is known."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.ui.conftest import Ui
from veritask.core import decide, judge, new_events
from veritask.core.events import Event, EventKind
from veritask.core.states import InstanceState
from veritask.services import explanations, runs
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole
from veritask.ui import scrubber

TOKEN = "token-of-the-story"


class Clock:
    """The ledger's clock, moved by the story: each event is recorded when the story says."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


@dataclass
class Story:
    """A run recorded at known instants: ``t0`` its creation."""

    run_id: str
    instances: dict[str, str]
    t0: datetime
    clock: Clock

    def at(self, seconds: float) -> datetime:
        return self.t0 + timedelta(seconds=seconds)


def begin(platform: Platform, definition: str) -> Story:
    """A run of ``definition`` created an hour ago, at a whole second, by a stepped clock."""
    t0 = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
    clock = Clock(t0)
    platform.ledger.clock = clock
    run_id = runs.trigger_run(platform, definition, actor="operator:ann").run_id
    instances = {i.task: i.id for i in runs.get_run(platform, run_id).instances}
    return Story(run_id, instances, t0, clock)


def record(platform: Platform, story: Story, event: Event, *, seconds: float) -> None:
    """Record ``event`` at ``t0 + seconds`` (its own time is its sender's)."""
    story.clock.at = story.at(seconds)
    applied = platform.ledger.apply(event)
    assert applied.outcome is judge.Outcome.APPLIED, applied


def _event(
    instance_id: str, kind: EventKind, actor: str, when: datetime, **evidence: object
) -> Event:
    return Event(str(uuid.uuid4()), instance_id, 1, kind, actor, when, dict(evidence))  # type: ignore[arg-type]


def runs_to_the_end(
    platform: Platform, story: Story, task: str, *, start: float, late_by: float = 0.0
) -> None:
    """Attempt 1 of ``task`` opens at ``start`` s, starts 1 s later and exits 0 at 2 s;
    its completion is recorded ``late_by`` seconds after it happened."""
    instance_id = story.instances[task]
    loaded = platform.ledger.snapshot(instance_id)
    assert loaded is not None
    opened = decide.open_attempt(
        loaded[0],
        token_hash=judge.hash_token(TOKEN),
        now=story.at(start),
        event_id=str(uuid.uuid4()),
    )
    assert opened is not None
    record(platform, story, opened, seconds=start)
    acknowledged = _event(
        instance_id,
        EventKind.SUBMIT_ACKNOWLEDGED,
        "executor",
        story.at(start + 0.25),
        external_id=f"test:{instance_id}",
        executor="test",
    )
    record(platform, story, acknowledged, seconds=start + 0.25)
    started = _event(
        instance_id,
        EventKind.STARTED,
        "worker",
        story.at(start + 1),
        worker="test:1",
        host="test",
        pid=1,
        pid_start_time=1,
        pgid=1,
    )
    record(platform, story, replace_seq(started, 1), seconds=start + 1)
    if late_by:
        lost = new_events.lease_expired(
            event_id=str(uuid.uuid4()),
            instance_id=instance_id,
            attempt_no=1,
            event_time=story.at(start + 1.5),
            last_report_seq=1,
            lease_expires_at=story.at(start + 1.4),
            last_report_at=story.at(start + 1),
            lease_seconds=0.4,
        )
        record(platform, story, lost, seconds=start + 1.5)
    completed = _event(
        instance_id,
        EventKind.COMPLETED,
        "worker",
        story.at(start + 2),
        exit_code=0,
        signal=None,
        error_category="none",
        commit_marker=None,
        log_path="",
        output=None,
    )
    record(platform, story, replace_seq(completed, 2), seconds=start + 2 + late_by)


def replace_seq(event: Event, seq: int) -> Event:
    """A worker's report: its sequence number and the attempt's token."""
    return replace(event, seq=seq, attempt_token=TOKEN)


def late_story(platform: Platform) -> Story:
    """``extract`` starts at 1 s and goes silent: LOST at 2.5 s. It had exited 0 at 3 s, but
    that report is recorded at 13 s. ``transform`` then runs from 14 s to 16 s."""
    story = begin(platform, "pipeline")
    runs_to_the_end(platform, story, "extract", start=1, late_by=10)
    runs_to_the_end(platform, story, "transform", start=14)
    return story


def _rows(page: str) -> dict[str, str]:
    """The instances table's states, by task."""
    return dict(
        re.findall(r'<tr data-instance="([^"]+)" data-id="[^"]+" data-state="([A-Z_]+)"', page)
    )


def test_as_of_an_instant_the_run_page_shows_what_was_recorded_then_and_marks_late_news(
    ui: Ui,
) -> None:
    story = late_story(ui.platform)
    viewer = ui.signed_in(TokenRole.VIEWER).http
    as_of = story.at(5).isoformat()

    page = viewer.get(f"/ui/runs/{story.run_id}", params={"as_of": as_of})

    assert page.status_code == 200, page.text
    assert _rows(page.text) == {"extract": "LOST", "transform": "CREATED", "load": "CREATED"}
    assert 'id="scrub-banner"' in page.text and "As of" in page.text
    assert 'id="scrub-live"' in page.text  # the way back to live
    # The late completion: marked on the instance's row, its graph box and in the list.
    extract = story.instances["extract"]
    assert re.search(rf'data-id="{extract}" data-state="LOST">.*?data-late="yes"', page.text, re.S)
    assert re.search(r'class="node late" data-task="extract" data-state="LOST"', page.text)
    assert re.search(rf'<li data-instance="{extract}" data-event="[^"]+">', page.text)
    # The timeline as known then: extract's execution still going on at T.
    bars = re.findall(
        rf'data-instance="{extract}" data-phase="execution"[^>]*data-end="([^"]*)"', page.text
    )
    assert bars == [""]
    # Stepping: the instants recorded just before and after T.
    assert re.search(r'id="scrub-previous" data-scrub-to="[^"]*"', page.text)
    assert f'data-scrub-to="{story.at(13).isoformat().replace("+00:00", "Z")}"' in page.text

    live = viewer.get(f"/ui/runs/{story.run_id}").text
    assert _rows(live) == {"extract": "SUCCESS", "transform": "SUCCESS", "load": "CREATED"}
    assert 'id="scrub-banner"' not in live and 'data-late="yes"' not in live
    # Before the run existed is its creation: every instance CREATED.
    early = viewer.get(f"/ui/runs/{story.run_id}", params={"as_of": "2000-01-01T00:00:00Z"}).text
    assert set(_rows(early).values()) == {"CREATED"}


def test_a_time_that_is_not_one_is_named_on_the_page(ui: Ui) -> None:
    story = late_story(ui.platform)
    viewer = ui.signed_in(TokenRole.VIEWER).http

    page = viewer.get(f"/ui/runs/{story.run_id}", params={"as_of": "yesterday-ish"})

    assert page.status_code == 422
    assert 'id="scrub-error"' in page.text
    assert "as_of" in page.text and "yesterday-ish" in page.text
    assert _rows(page.text)["extract"] == "SUCCESS"  # the page stays live
    instance = viewer.get(
        f"/ui/instances/{story.instances['extract']}", params={"as_of": "yesterday-ish"}
    )
    assert instance.status_code == 422 and 'id="explain-error"' in instance.text


def _cells(page: str, row: str) -> Sequence[str]:
    found = re.search(rf'<tr id="{row}">(.*?)</tr>', page, re.S)
    assert found is not None, row
    return re.findall(r'<td data-column="\w+">(.*?)</td>', found.group(1), re.S)


def test_the_explain_panel_in_english_and_chinese(ui: Ui) -> None:
    story = late_story(ui.platform)
    viewer = ui.signed_in(TokenRole.VIEWER)
    extract = story.instances["extract"]
    path = f"/ui/instances/{extract}"

    page = viewer.http.get(path, params={"as_of": story.at(5).isoformat()}).text

    then, now = _cells(page, "explain-state")
    assert 'data-state="LOST"' in then and 'data-state="SUCCESS"' in now
    made_then, made_now = _cells(page, "explain-made-by")
    assert "lease_expired" in made_then and "monitor" in made_then
    assert "completed" in made_now and 'data-late="yes"' in made_now
    rule_then, rule_now = _cells(page, "explain-rule")
    assert "<code>lease_expires</code>" in rule_then and "unknown, not failed" in rule_then
    assert "<code>completion_decides</code>" in rule_now
    assert re.search(r'<li data-kind="late_evidence"><span class="tag">Late evidence</span>', page)
    assert 'id="explain-late"' in page

    viewer.http.post("/ui/language", data={"csrf": viewer.csrf, "language": "zh", "next": "/ui"})
    chinese = viewer.http.get(path, params={"as_of": story.at(5).isoformat()}).text
    assert "当时已知" in chinese and "现在对当时所知" in chinese
    assert "租约内没有报告：结果未知，而非失败" in chinese
    assert "迟到的证据" in chinese
    assert str(InstanceState.LOST) in _cells(chinese, "explain-state")[0]


def test_a_run_of_many_instants_steps_to_the_same_neighbours_without_reading_them_all(
    ui: Ui, monkeypatch: pytest.MonkeyPatch
) -> None:
    story = late_story(ui.platform)
    viewer = ui.signed_in(TokenRole.VIEWER).http
    as_of = story.at(5).isoformat()
    few = viewer.get(f"/ui/runs/{story.run_id}", params={"as_of": as_of}).text
    every = explanations.moments(ui.platform, story.run_id)
    assert len(every) > 2

    # As if the run had more instants than the scrubber draws: no ticks, and the steps come
    # from the two instants around T (the served app runs in this process).
    monkeypatch.setattr(scrubber, "MOST_TICKS", 1)
    many = viewer.get(f"/ui/runs/{story.run_id}", params={"as_of": as_of}).text

    steps = r'id="scrub-(previous|next)" data-scrub-to="([^"]*)"'
    assert re.findall(steps, many) == re.findall(steps, few)
    assert re.findall(steps, many)  # both steps are there
    assert explanations.moment_bounds(ui.platform, story.run_id) == (len(every), every[-1])

"""``/ui/runs`` (filters, pages, links, live) and a definition's grid (order, cells, ``?runs=``),
served with the API as ``veritask up`` serves them, on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.integration.test_run_lists import T0, Seeded, _run
from tests.ui.conftest import Ui, served_ui
from veritask.core.events import OverrideScope
from veritask.core.run_state import pipeline_order
from veritask.core.states import InstanceState, PublicationState, RunExecutionState, TriggerKind
from veritask.services import overrides, runs
from veritask.services.tokens import TokenRole

#: Definition order zeta, load, alpha, transform, report; alphabetical order differs, and
#: so does every order that ignores the edges or the definition's order of ready tasks.
#: Both allow overlapping runs: the tests make many, and no scheduler here ends them.
BRANCHY = """\
name: branchy
concurrency: allow
tasks:
  zeta: {run: "true"}
  load: {run: "true", after: [transform]}
  alpha: {run: "true"}
  transform: {run: "true", after: [zeta, alpha]}
  report: {run: "true", after: [zeta]}
"""
PIPELINE_ORDER = ["zeta", "alpha", "transform", "load", "report"]
HELLO = "name: hello\nconcurrency: allow\ntasks:\n  greet: {run: 'echo hello'}\n"
CELL = re.compile(
    r'<a href="/ui/instances/([^"]+)" class="cell tone-[a-z]+" data-state="([A-Z_]+)" '
    r'title="([^"]*)"'
)


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[Ui]:
    with served_ui(database_url, tmp_path / "home", BRANCHY, HELLO) as found:
        yield found


def _trigger(ui: Ui, name: str) -> str:
    return runs.trigger_run(ui.platform, name, actor="operator:test").run_id


# -- the runs list --------------------------------------------------------------------------


def test_the_runs_list_filters_by_every_field_of_its_form(served: Ui) -> None:
    seeded = Seeded(
        scheduled=_run(
            served.platform,
            "hello",
            key="hello:a",
            kind=TriggerKind.SCHEDULE,
            execution=RunExecutionState.SUCCESS,
            publication=PublicationState.NOT_REQUIRED,
            created_at=T0,
            logical_time=T0 - timedelta(days=1),
        ),
        backfilled=_run(
            served.platform,
            "hello",
            key="hello:backfilled",
            kind=TriggerKind.BACKFILL,
            execution=RunExecutionState.FAILED,
            publication=PublicationState.NOT_REQUIRED,
            created_at=T0 + timedelta(hours=1),
            logical_time=T0 - timedelta(days=2),
        ),
        manual=_trigger(served, "branchy"),
        api_run=_trigger(served, "hello"),
    )
    http = served.signed_in(TokenRole.VIEWER).http
    every = http.get("/ui/runs")
    assert every.status_code == 200
    assert _listed(every.text) == [
        seeded.api_run,
        seeded.manual,
        seeded.backfilled,
        seeded.scheduled,
    ]
    assert 'data-live id="run-list"' in every.text
    assert 'data-live-stream="/ui/live?since=' in every.text
    assert f'href="/ui/runs/{seeded.manual}"' in every.text
    assert 'href="/ui/definitions/branchy"' in every.text
    assert 'href="/ui/definitions/branchy/grid"' in every.text
    cases = {
        "definition=hello&execution_state=FAILED": [seeded.backfilled],
        "trigger_kind=schedule": [seeded.scheduled],
        "publication_state=NOT_REQUIRED&definition=branchy": [seeded.manual],
        # The form's times are in the viewer's zone (UTC here, no zone cookie).
        "logical_from=2024-02-28T00:00&logical_to=2024-02-29T00:00": [seeded.backfilled],
        "created_from=2024-03-01T00:00&created_to=2024-03-01T01:00:00": [seeded.scheduled],
        # Not a prefix a run's own random key could have (hex): "hello:b" matched one in 16.
        "q=HELLO:BACKFILLED": [seeded.backfilled],
        "execution_state=&publication_state=&q=": [
            seeded.api_run,
            seeded.manual,
            seeded.backfilled,
            seeded.scheduled,
        ],
    }
    for query, expected in cases.items():
        page = http.get(f"/ui/runs?{query}")
        assert page.status_code == 200, (query, page.text)
        assert _listed(page.text) == expected, query


def test_the_form_keeps_the_times_in_the_viewers_zone(served: Ui) -> None:
    run_id = _run(
        served.platform,
        "hello",
        key="hello:zone",
        kind=TriggerKind.SCHEDULE,
        execution=RunExecutionState.SUCCESS,
        publication=PublicationState.NOT_REQUIRED,
        created_at=T0,  # 08:00 in Shanghai
    )
    http = served.signed_in(TokenRole.VIEWER).http
    http.cookies.set("veritask_tz", "Asia%2FShanghai")  # as the page's script writes it
    assert _listed(http.get("/ui/runs?created_from=2024-03-01T08:00").text) == [run_id]
    assert _listed(http.get("/ui/runs?created_to=2024-03-01T08:00").text) == []


def test_pages_go_older_and_back_newer_by_cursor(served: Ui) -> None:
    made = [_trigger(served, "hello") for _ in range(53)]
    newest_first = made[::-1]
    http = served.signed_in(TokenRole.VIEWER).http
    first = http.get("/ui/runs?definition=hello")
    assert _listed(first.text) == newest_first[:50]
    assert 'id="newer-runs"' not in first.text
    older = _link(first.text, "older-runs")
    assert parse_qs(urlparse(older).query)["definition"] == ["hello"]  # the filters stay
    second = http.get(older)
    assert _listed(second.text) == newest_first[50:]
    assert 'id="older-runs"' not in second.text
    back = http.get(_link(second.text, "newer-runs"))
    assert _listed(back.text) == newest_first[:50]
    assert 'id="newer-runs"' not in back.text


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("execution_state=DONE", "execution_state"),
        ("publication_state=shipped", "publication_state"),
        ("trigger_kind=cron", "trigger_kind"),
        ("logical_from=yesterday", "logical_from"),
        ("created_from=2024-03-02T00:00&created_to=2024-03-01T00:00", "created_to"),
        ("cursor=garbage", "cursor"),
    ],
)
def test_a_bad_filter_is_a_422_page_naming_it(served: Ui, query: str, field: str) -> None:
    http = served.signed_in(TokenRole.VIEWER).http
    page = http.get(f"/ui/runs?{query}")
    assert page.status_code == 422
    assert field in html.unescape(page.text)


def test_an_unknown_definition_is_a_404_page(served: Ui) -> None:
    http = served.signed_in(TokenRole.VIEWER).http
    assert http.get("/ui/runs?definition=nope").status_code == 404


def test_the_nav_leads_to_the_runs_list_and_it_needs_a_sign_in(served: Ui) -> None:
    http = served.signed_in(TokenRole.VIEWER).http
    assert 'href="/ui/runs" id="nav-runs"' in http.get("/ui/definitions").text
    anonymous = served.client().get("/ui/runs")
    assert anonymous.status_code == 303
    assert anonymous.headers["location"].startswith("/ui/sign-in")


# -- the grid ---------------------------------------------------------------------------------


def test_runs_made_together_show_different_short_ids_that_search_finds(served: Ui) -> None:
    # Ids start with their millisecond: two runs a moment apart share their first characters.
    made = [_trigger(served, "hello") for _ in range(2)]
    assert made[0][:8] == made[1][:8]
    http = served.signed_in(TokenRole.VIEWER).http
    page = http.get("/ui/runs?definition=hello").text
    shown = dict(
        re.findall(r'<a class="run-link" href="/ui/runs/([^"]+)"><code>([^<]+)</code>', page)
    )
    assert set(shown) == set(made)
    assert len(set(shown.values())) == 2
    for run_id, short in shown.items():
        assert run_id.endswith(short) and len(short) == 8
        found = http.get("/ui/runs", params={"q": short}).text
        assert re.findall(r'<tr data-run="([^"]+)"', found) == [run_id]


def test_pipeline_order_is_topological_with_ties_in_definition_order() -> None:
    from veritask.definitions import parse

    graph = parse.parse_definition(BRANCHY).run_graph()
    assert list(pipeline_order(graph)) == PIPELINE_ORDER


def test_the_grid_puts_tasks_in_pipeline_order_and_the_newest_run_at_the_right(
    served: Ui,
) -> None:
    made = [_trigger(served, "branchy") for _ in range(3)]
    detail = runs.get_run(served.platform, made[1])
    failed = next(i for i in detail.instances if i.task == "transform")
    overrides.override(
        served.platform,
        failed.id,
        to_state=InstanceState.FAILED,
        scope=OverrideScope.INSTANCE,
        reason="bad <input> data",
        actor="operator:test",
    )
    http = served.signed_in(TokenRole.VIEWER).http
    definition_page = http.get("/ui/definitions/branchy")
    assert 'href="/ui/definitions/branchy/grid"' in definition_page.text
    page = http.get("/ui/definitions/branchy/grid")
    assert page.status_code == 200
    assert re.findall(r'<tr data-task="([^"]+)">', page.text) == PIPELINE_ORDER
    assert re.findall(r'<th class="run"><a href="/ui/runs/([^"]+)"', page.text) == made
    cells = CELL.findall(page.text)
    assert len(cells) == 3 * len(PIPELINE_ORDER)
    by_instance = {instance: (state, title) for instance, state, title in cells}
    state, title = by_instance[failed.id]
    assert state == "FAILED"
    # The reason is on hover, escaped: a person's words are never markup.
    assert "bad &lt;input&gt; data" in title
    # Every cell shows its instance's state, as the run page does.
    for run_id in made:
        for instance in runs.get_run(served.platform, run_id).instances:
            assert by_instance[instance.id][0] == instance.state.value
    # Row "transform", column 2 (the middle run) is the instance overridden.
    rows = page.text.split('<tr data-task="')[1:]
    transform_row = next(row for row in rows if row.startswith("transform"))
    assert [instance for instance, _, _ in CELL.findall(transform_row)][1] == failed.id
    assert 'data-live id="grid"' in page.text
    assert 'data-live-stream="/ui/live?since=' in page.text
    assert http.get(f"/ui/instances/{failed.id}").status_code == 200


def test_the_grid_labels_its_run_rows_with_each_runs_logical_time_and_duration(
    served: Ui,
) -> None:
    now = served.platform.now()
    ended = _run(
        served.platform,
        "hello",
        key="hello:ended",
        kind=TriggerKind.SCHEDULE,
        execution=RunExecutionState.SUCCESS,
        publication=PublicationState.NOT_REQUIRED,
        created_at=now - timedelta(hours=1),
        logical_time=T0 - timedelta(days=1),
    )
    going = _run(
        served.platform,
        "hello",
        key="hello:going",
        kind=TriggerKind.SCHEDULE,
        execution=RunExecutionState.RUNNING,
        publication=PublicationState.NOT_REQUIRED,
        created_at=now - timedelta(seconds=90),
        logical_time=T0,
    )
    page = served.signed_in(TokenRole.VIEWER).http.get("/ui/definitions/hello/grid").text

    def row(row_id: str) -> list[str]:
        found = re.search(
            rf'<tr id="{row_id}"><th class="task" scope="row">([^<]*)</th>(.*?)</tr>', page
        )
        assert found is not None, row_id
        cells = re.findall(r'<th class="(?:run|when)">(.*?)</th>', found.group(2))
        return [found.group(1), *cells]

    label, *columns = row("grid-runs-row")
    assert label == "Run" and len(columns) == 2
    assert re.findall(r'<th class="run"><a href="/ui/runs/([^"]+)"', page) == [ended, going]
    label, *times = row("grid-logical-times")
    assert label == "Logical time"
    assert [re.sub(r"<[^>]+>", "", shown) for shown in times] == ["02-29 00:00", "03-01 00:00"]
    label, *durations = row("grid-durations")
    assert label == "Duration"
    assert durations[0] == "—"  # ended, with no change of state recorded
    assert re.fullmatch(r"1m \d+s", durations[1]), durations


def test_runs_picks_how_many_newest_runs_the_grid_shows(served: Ui) -> None:
    made = [_trigger(served, "hello") for _ in range(4)]
    http = served.signed_in(TokenRole.VIEWER).http
    page = http.get("/ui/definitions/hello/grid?runs=2")
    assert re.findall(r'<th class="run"><a href="/ui/runs/([^"]+)"', page.text) == made[-2:]
    assert http.get("/ui/definitions/hello/grid?runs=100").status_code == 200
    assert http.get("/ui/definitions/hello/grid?runs=1").status_code == 200


@pytest.mark.parametrize("runs_given", ["0", "101", "-3", "many"])
def test_runs_out_of_range_is_a_422_page(served: Ui, runs_given: str) -> None:
    http = served.signed_in(TokenRole.VIEWER).http
    page = http.get(f"/ui/definitions/hello/grid?runs={runs_given}")
    assert page.status_code == 422
    assert "runs" in page.text
    assert "100" in page.text


def test_the_grid_of_an_unknown_definition_is_a_404_page(served: Ui) -> None:
    http = served.signed_in(TokenRole.VIEWER).http
    assert http.get("/ui/definitions/nope/grid").status_code == 404


def test_the_grid_reads_with_two_statements_whatever_the_number_of_runs(served: Ui) -> None:
    import sqlalchemy as sa

    from veritask.services import grid

    for _ in range(6):
        _trigger(served, "branchy")
    grid.definition_grid(served.platform, "branchy", runs=6)  # the versions' orders cached
    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    sa.event.listen(served.platform.engine, "before_cursor_execute", count)
    try:
        grid.definition_grid(served.platform, "branchy", runs=6)
        six = len(statements)
        statements.clear()
        grid.definition_grid(served.platform, "branchy", runs=2)
        two = len(statements)
    finally:
        sa.event.remove(served.platform.engine, "before_cursor_execute", count)
    assert six == two
    # The definition by name, the newest runs, and their instances at once.
    assert six <= 3 + _transaction_statements(served)


def _transaction_statements(ui: Ui) -> int:
    # SQLite's read transaction may add a BEGIN of its own.
    return 1 if ui.platform.engine.dialect.name == "sqlite" else 0


def _listed(page: str) -> list[str]:
    return re.findall(r'<tr data-run="([^"]+)"', page)


def _link(page: str, link_id: str) -> str:
    found = re.search(rf'<a href="([^"]+)" id="{link_id}"', page)
    assert found is not None, f"no link {link_id}"
    return html.unescape(found.group(1))

"""A grid row's cells as HTML, written here rather than in the template: a grid of 100 runs by
200 tasks has 20,000 cells, and a Jinja loop over them costs more than the rest of the page.

Each cell is a link to its instance, with the state badge's tone and icon and, on hover, the
task, the state and the reason in the viewer's language. The title of a (task, state, reason)
is written once per page: most cells of a row share one.
"""

from __future__ import annotations

from collections.abc import Callable

from markupsafe import Markup, escape

from veritask.services import grid
from veritask.ui import i18n, rendering


def row_writer(
    t: i18n.Translator, sentence: Callable[[str | None], str]
) -> Callable[[grid.Row], Markup]:
    """``cells(row)``: the row's ``<td>`` cells, oldest run first."""
    titles: dict[tuple[object, ...], str] = {}

    def title(task: str, cell: grid.Cell) -> str:
        key = (task, cell.state.value, cell.reason, cell.instances, cell.counts)
        found = titles.get(key)
        if found is None:
            words = f"{task} · {t(f'state.{cell.state.value}')}"
            if cell.counts:
                counted = ", ".join(f"{t(f'state.{s.value}')} {n}" for s, n in cell.counts)
                words += f" · {t('grid.mapped', n=cell.instances)} ({counted})"
            elif cell.instances > 1:
                words += f" · {t('grid.mapped', n=cell.instances)}"
            found = str(escape(f"{words}: {sentence(cell.reason)}"))
            titles[key] = found
        return found

    def cells(row: grid.Row) -> Markup:
        written = []
        for cell in row.cells:
            if cell is None:
                written.append('<td class="absent"></td>')
                continue
            state = cell.state.value
            # A mapped task's cell opens its row of the run page, which lists its instances.
            href = (
                f"/ui/runs/{escape(cell.run_id)}#mapped-{escape(row.task)}"
                if cell.counts
                else f"/ui/instances/{escape(cell.instance_id)}"
            )
            mapped = f' data-mapped="{cell.instances}"' if cell.counts else ""
            written.append(
                f'<td><a href="{href}" '
                f'class="cell tone-{rendering.tone(state)}" data-state="{state}"{mapped} '
                f'title="{title(row.task, cell)}">{rendering.glyph(state)}</a></td>'
            )
        return Markup("".join(written))

    return cells

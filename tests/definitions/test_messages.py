"""Every problem the validator reports is a phrase the web UI can show in another language."""

from __future__ import annotations

import pytest

from tests.unit.test_phrases import unread
from veritask.definitions.parse import DefinitionError, parse_definition
from veritask.ui import i18n, rendering

INVALID = [
    "name: Bad Name\ntasks:\n  a: {run: echo}\n",
    "name: x\ntasks: 3\n",
    "name: x\ntasks: {}\n",
    "name: x\ntasks:\n  - {run: echo}\n",
    "name: x\ntasks:\n  a: {run: echo, after: [b]}\n  b: {run: echo, after: [a]}\n",
    "name: x\ntasks:\n  a: {run: echo, after: [a, missing, c]}\n  c: {run: echo}\n",
    "name: x\ntasks:\n  a: {run: echo, after: [c, c]}\n  c: {run: echo}\n",
    "name: x\ntasks:\n  a: {run: echo, after: {x: 1}}\n",
    "name: x\ntasks:\n  a: {run: echo, after: [1]}\n",
    "name: x\ntasks:\n  a: {run: echo, call: 'm:f'}\n",
    "name: x\ntasks:\n  a: {}\n",
    "name: x\ntasks:\n  a: {run: '  '}\n",
    "name: x\ntasks:\n  a: {call: 'not callable'}\n",
    "name: x\ntasks:\n  a: {sql: '', run: echo, connection: Bad}\n",
    "name: x\ntasks:\n  a: {sql: select 1}\n",
    "name: x\ntasks:\n  a: {run: echo, connection: db}\n",
    "name: x\ntasks:\n  a: {run: echo, role: teardown, trigger_rule: all_success}\n",
    "name: x\ntasks:\n  a: {run: echo, decides_run: true, trigger_rule: al_success}\n",
    "name: x\ntasks:\n  a: {run: echo, role: 3, skip_exit_code: 300, requires_commit: 1}\n",
    "name: x\ntasks:\n  a: {run: echo, skip_exit_code: 0, timeout: -5, lease: 0s}\n",
    "name: x\ntasks:\n  a: {run: echo, timeout: 1x, lease: [1], evidence_window: true}\n",
    "name: x\ntasks:\n  a: {run: echo, retry: {max_retries: -1, jitter: 2, max_delay: 1m}}\n",
    "name: x\ntasks:\n  a: {run: echo, retry: {delay: 2h, max_delay: 1h}}\n",
    "name: x\ntasks:\n  a: {run: echo, retry: {max_retries: x, jitter: 'a'}, with: 3}\n",
    "name: x\ntasks:\n  a: {run: echo, retries: 3, tmeout: 3}\n",
    "name: x\nschedule: {cron: '61 * * * *', timezone: Asia/Shangai}\ntasks:\n  a: {run: echo}\n",
    "name: x\nschedule: {cron: '* * *'}\ntasks:\n  a: {run: echo}\n",
    "name: x\nschedule: {cron: '@sometimes', timezone: Nowhere}\ntasks:\n  a: {run: echo}\n",
    "name: x\nschedule: {cron: '0 0 31 2 *'}\ntasks:\n  a: {run: echo}\n",
    "name: x\nschedule: {cron: '0 0 * 13 *'}\ntasks:\n  a: {run: echo}\n",
    "name: x\nschedule: {cron: '0 25 * * *'}\ntasks:\n  a: {run: echo}\n",
    "name: x\nschedule: {cron: '0 0 0 * *'}\ntasks:\n  a: {run: echo}\n",
    "name: x\nschedule: {cron: '0 0 * * 9', catchup: {max_runs: 0}}\ntasks:\n  a: {run: echo}\n",
    "name: x\nconcurrency: sometimes\ntasks:\n  a: {run: echo}\n",
    "name: x\nwait_for:\n  - {definition: x, published: false}\ntasks:\n  a: {run: echo}\n",
    "name: x\ntrigger: {on_published: [y, y, x], when: some}\ntasks:\n  a: {run: echo}\n",
    "name: x\ntrigger: {on_published: []}\ntasks:\n  a: {run: echo}\n",
    "name: x\npublish:\n  checks:\n    - {name: c, run: echo}\n    - {name: c, run: echo}\n"
    "  commit: {}\ntasks:\n  a: {run: echo}\n",
    "name: x\nname: y\ntasks:\n  a: {run: echo}\n",
    "tasks: [\n",
    "",
    "- a list\n",
    "name: x\nexpected_finish: 0s\nparameters: 3\ntasks:\n  a: {run: echo}\n",
]


def problems_of(source: str) -> list[str]:
    with pytest.raises(DefinitionError) as refused:
        parse_definition(source)
    return [problem.message for problem in refused.value.problems]


def test_every_problem_message_is_recognised() -> None:
    found = {message for source in INVALID for message in problems_of(source)}
    # The YAML parser's and the cron library's own words are kept as they said them.
    free = {message for message in found if message.startswith(("invalid YAML", "'0 0 31"))}
    left = {message: unread(message, free) for message in found - free}
    assert {message: parts for message, parts in left.items() if parts} == {}
    assert len(found) > 40


def test_a_problem_reads_in_chinese() -> None:
    [message] = problems_of("name: x\ntasks:\n  a: {run: echo, after: [b]}\n")
    assert message == "no task named 'b'"
    sentence = rendering.sentence_in(i18n.Translator(i18n.Language.ZH))
    assert sentence(message) == "没有名为 'b' 的任务"

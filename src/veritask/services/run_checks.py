"""The run checks of ``verify`` and ``doctor`` that need a run's definition.

The ledger follows each run's events (ledger/run_audit.py); what it cannot know alone is
where a run's publication starts (its definition's publish section says) and which
execution state its instances imply (its definition's graph says). Both come from the
definition version the run was made from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from veritask.core import run_state
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.definitions import parse
from veritask.definitions.model import Definition
from veritask.ledger import dialects, queries, run_audit
from veritask.services.platform import Platform

#: The execution states the instances alone decide (a cancel decides CANCELLED, a trigger
#: QUEUED, and RUNNING is the scheduler's to move on).
_DECIDED_BY_INSTANCES = frozenset({RunExecutionState.SUCCESS, RunExecutionState.FAILED})


@dataclass
class _Definitions:
    """The definitions runs were made from, each parsed once."""

    platform: Platform
    parsed: dict[tuple[str, int], Definition | None] = field(default_factory=dict)

    def of(self, definition_id: str, version: int) -> Definition | None:
        key = (definition_id, version)
        if key not in self.parsed:
            with dialects.read_transaction(self.platform.engine) as connection:
                row = queries.get_definition_version(
                    connection, definition_id=definition_id, version=version
                )
            self.parsed[key] = None if row is None else parse.definition_from_json(row.spec)
        return self.parsed[key]

    def publication_start(self, definition_id: str, version: int) -> PublicationState | None:
        definition = self.of(definition_id, version)
        if definition is None:
            return None
        if definition.publication_required:
            return PublicationState.PENDING
        return PublicationState.NOT_REQUIRED


def publication_start(platform: Platform) -> Callable[[str, int], PublicationState | None]:
    """Where runs of (definition id, version) start their publication, for ``audit.verify``."""
    return _Definitions(platform).publication_start


def disagreements_with_instances(platform: Platform) -> list[str]:
    """Finished runs whose events say one execution state and whose instances another."""
    definitions = _Definitions(platform)
    with dialects.read_transaction(platform.engine) as connection:
        histories = run_audit.run_histories(connection)
        instances = run_audit.instance_states_of_runs(connection)
    found = []
    for history in histories:
        recorded = run_audit.check_run(history, None).execution
        if recorded is None or recorded.state not in _DECIDED_BY_INSTANCES:
            continue
        definition = definitions.of(history.definition_id, history.definition_version)
        if definition is None:
            continue
        states: dict[str, InstanceState] = instances.get(history.run_id, {})
        verdict = run_state.execution_state(definition.run_graph(), states)
        if verdict.state.value != recorded.state:
            found.append(
                f"run {history.run_id}: its events say {recorded.state}, "
                f"its instances say {verdict.state} ({verdict.reason})"
            )
    return found


@dataclass(frozen=True)
class RunFindings:
    """Every run check's findings: stored states against events, broken chains, instances."""

    runs: int
    mismatches: list[str]
    violations: list[str]

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.violations


def check_runs(platform: Platform) -> RunFindings:
    """The run half of ``verify``, without re-folding any instance (what ``doctor`` runs)."""
    start = publication_start(platform)
    with dialects.read_transaction(platform.engine) as connection:
        histories = run_audit.run_histories(connection)
    mismatches: list[str] = []
    violations: list[str] = []
    for history in histories:
        check = run_audit.check_run(
            history, start(history.definition_id, history.definition_version)
        )
        mismatches.extend(f"run {history.run_id}: {p}" for p in check.problems)
        violations.extend(f"run {history.run_id}: {p}" for p in check.broken_links)
    violations.extend(disagreements_with_instances(platform))
    return RunFindings(len(histories), mismatches, violations)

"""The run checks of ``verify`` and ``doctor`` that need a run's definition.

The ledger follows each run's events (ledger/run_audit.py); what it cannot know alone is
where a run's publication starts (its definition's publish section says) and which
execution state its instances imply (its definition's graph says). Both come from the
definition version the run was made from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from veritask import ids
from veritask.core import reasons, run_state
from veritask.core.states import PublicationState, RunExecutionState
from veritask.definitions import parse
from veritask.definitions.model import Definition
from veritask.ledger import definition_audit, dialects, queries, run_audit, run_store
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


@dataclass(frozen=True)
class Disagreement:
    """A finished run whose events say one execution state and whose instances another."""

    run_id: str
    recorded: RunExecutionState
    implied: run_state.RunVerdict

    @property
    def message(self) -> str:
        return (
            f"run {self.run_id}: its events say {self.recorded}, "
            f"its instances say {self.implied.state} ({self.implied.reason})"
        )


def disagreements(platform: Platform) -> list[Disagreement]:
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
        verdict = run_state.implied_by_instances(
            definition.run_graph(), instances.get(history.run_id, [])
        )
        if verdict.state.value != recorded.state:
            found.append(Disagreement(history.run_id, RunExecutionState(recorded.state), verdict))
    return found


def disagreements_with_instances(platform: Platform) -> list[str]:
    """What :func:`disagreements` finds, as sentences."""
    return [found.message for found in disagreements(platform)]


def follow_instances(platform: Platform, *, actor: str) -> int:
    """``verify --repair``: move each finished run to the state its instances imply, by a
    recorded ``run_state_changed`` that names them (a finished run follows its instances'
    final states; docs/operations.md). A run moved meanwhile is left to the next look.
    The number of runs moved."""
    moved = 0
    for found in disagreements(platform):
        with platform.engine.begin() as connection:
            version, state = run_store.run_version(connection, found.run_id, lock=True)
            if state is not found.recorded:
                continue
            instances = run_audit.instance_states_of_runs(connection, run_id=found.run_id)
            run_store.set_execution_state(
                connection,
                run_id=found.run_id,
                expected_version=version,
                state=found.implied.state,
                reason=reasons.REPAIRED_FROM_INSTANCES.format(
                    reason=found.implied.reason, previous=found.recorded
                ),
                previous=found.recorded,
                actor=actor,
                event_id=ids.time_ordered_id(),
                now=platform.now(),
                evidence={
                    "repair": True,
                    **run_state.states_evidence(
                        {
                            run_state.instance_key(key, index): value
                            for key, index, value in instances.get(found.run_id, [])
                        }
                    ),
                },
            )
        moved += 1
    return moved


@dataclass(frozen=True)
class RunFindings:
    """Every run check's findings: stored states against events, broken chains, instances;
    and the same of the definitions against their own events."""

    runs: int
    mismatches: list[str]
    violations: list[str]
    definitions: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.violations


def check_runs(platform: Platform) -> RunFindings:
    """The run and definition halves of ``verify``, without re-folding any instance (what
    ``doctor`` runs)."""
    start = publication_start(platform)
    with dialects.read_transaction(platform.engine) as connection:
        histories = run_audit.run_histories(connection)
        definitions = definition_audit.definition_histories(connection)
    mismatches: list[str] = []
    violations: list[str] = []
    for history in histories:
        check = run_audit.check_run(
            history, start(history.definition_id, history.definition_version)
        )
        mismatches.extend(f"run {history.run_id}: {p}" for p in check.problems)
        violations.extend(f"run {history.run_id}: {p}" for p in check.broken_links)
    violations.extend(disagreements_with_instances(platform))
    followed = 0
    for definition in definitions:
        found = definition_audit.check_definition(definition)
        if found is None:
            continue
        followed += 1
        subject = f"definition {definition.name} ({definition.definition_id})"
        mismatches.extend(f"{subject}: {p}" for p in found.problems)
        violations.extend(f"{subject}: {p}" for p in found.broken_links)
    return RunFindings(len(histories), mismatches, violations, followed)

"""One run per idempotency key, one instance per task, attempt N opened at most once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.contract import builders, race
from veritask.core import states
from veritask.ledger import definitions, errors, runs, schema

WRITERS = 8
PROCESSES = 4


def _run_count(engine: Engine) -> int:
    with engine.connect() as connection:
        count = connection.execute(sa.select(sa.func.count()).select_from(schema.runs)).scalar()
    return int(count or 0)


def _definition(engine: Engine) -> tuple[str, int]:
    with engine.begin() as connection:
        return builders.a_definition(connection)


def test_the_same_key_returns_the_existing_run(engine: Engine) -> None:
    definition = _definition(engine)

    first = race.trigger_run(engine, definition=definition, key="k")
    second = race.trigger_run(engine, definition=definition, key="k")

    assert first[1] is True
    assert second == (first[0], False)
    assert _run_count(engine) == 1


def test_racing_threads_create_one_run(engine: Engine) -> None:
    definition = _definition(engine)

    results = race.in_threads(
        WRITERS, lambda: race.trigger_run(engine, definition=definition, key="nightly@2024-05-01")
    )

    assert len({run_id for run_id, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert _run_count(engine) == 1


@pytest.mark.slow
def test_racing_processes_create_one_run(engine: Engine, database_url: str) -> None:
    definition = _definition(engine)

    results = race.trigger_in_processes(
        PROCESSES, url=database_url, definition=definition, key="nightly@2024-05-02"
    )

    assert len(results) == PROCESSES
    assert len({run_id for run_id, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert _run_count(engine) == 1


def test_a_reused_run_id_with_another_key_is_a_duplicate(engine: Engine) -> None:
    definition = _definition(engine)
    with engine.begin() as connection:
        run_id = builders.a_run(connection, definition, key="a")

    with pytest.raises(errors.DuplicateKey), engine.begin() as connection:
        runs.create_run(
            connection,
            idempotency_key="b",
            run_id=run_id,
            definition_id=definition[0],
            definition_version=definition[1],
            trigger_kind=states.TriggerKind.MANUAL,
            execution_state=states.RunExecutionState.QUEUED,
            publication_state=states.PublicationState.NOT_REQUIRED,
            created_at=builders.T0,
        )


def test_one_instance_per_run_task_and_map_index(engine: Engine) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")
        first = builders.an_instance(connection, run_id, "extract")
        again = builders.an_instance(connection, run_id, "extract")
        mapped = builders.an_instance(connection, run_id, "extract", map_index=0)

    assert again == first
    assert mapped != first
    with pytest.raises(errors.DuplicateKey), engine.begin() as connection:
        connection.execute(
            schema.task_instances.insert().values(
                id="other",
                run_id=run_id,
                task_key="extract",
                state="CREATED",
                policy={},
            )
        )


def test_racing_instance_creation_creates_one(engine: Engine) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")

    def create() -> tuple[str, bool]:
        with engine.begin() as connection:
            return runs.create_instance(
                connection,
                run_id=run_id,
                task_key="load",
                state=states.InstanceState.CREATED,
                policy=builders.POLICY,
            )

    results = race.in_threads(WRITERS, create)

    assert len({instance_id for instance_id, _ in results}) == 1
    assert sum(created for _, created in results) == 1


def test_attempt_n_is_inserted_at_most_once(engine: Engine) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")
        instance_id = builders.an_instance(connection, run_id, "extract")

    def open_attempt(attempt_no: int) -> bool:
        with engine.begin() as connection:
            return runs.insert_attempt(
                connection,
                instance_id=instance_id,
                attempt_no=attempt_no,
                state=states.AttemptState.SCHEDULED,
                token_hash=f"hash-{attempt_no}",
            )

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        opened = list(pool.map(open_attempt, [1] * WRITERS))
    assert opened.count(True) == 1
    assert open_attempt(2) is True

    with pytest.raises(errors.DuplicateKey), engine.begin() as connection:
        connection.execute(
            schema.attempts.insert().values(instance_id=instance_id, attempt_no=1, state="QUEUED")
        )
    with pytest.raises(ValueError, match="start at 1"):
        open_attempt(0)


def test_an_attempt_of_an_unknown_instance_is_refused(engine: Engine) -> None:
    with pytest.raises(errors.IntegrityViolation), engine.begin() as connection:
        runs.insert_attempt(
            connection, instance_id="nobody", attempt_no=1, state=states.AttemptState.SCHEDULED
        )


def test_the_same_content_returns_the_existing_version(engine: Engine) -> None:
    def save(content_hash: str) -> tuple[str, int, bool]:
        with engine.begin() as connection:
            return definitions.save_definition_version(
                connection,
                name="daily",
                spec={"hash": content_hash},
                source=f"# {content_hash}\n",
                content_hash=content_hash,
                now=builders.T0,
            )

    first = save("aaa")
    second = save("bbb")
    again = save("aaa")

    assert first[1:] == (1, True)
    assert second == (first[0], 2, True)
    assert again == (first[0], 1, False)


def test_racing_applies_of_different_content_get_distinct_versions(engine: Engine) -> None:
    counter = iter(range(WRITERS))

    def save() -> tuple[str, bool]:
        content_hash = f"content-{next(counter)}"
        with engine.begin() as connection:
            definition_id, version, created = definitions.save_definition_version(
                connection,
                name="raced",
                spec={},
                source="",
                content_hash=content_hash,
                now=builders.T0,
            )
        return f"{definition_id}:{version}", created

    results = race.in_threads(WRITERS, save)

    assert len({result for result, _ in results}) == WRITERS
    assert all(created for _, created in results)
    assert len({result.split(":")[0] for result, _ in results}) == 1


def test_compare_and_set_refuses_a_stale_version(engine: Engine) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")
        instance_id = builders.an_instance(connection, run_id, "extract")
        new_version = runs.compare_and_set(
            connection,
            schema.task_instances,
            row_id=instance_id,
            expected_version=0,
            values={"state": "SCHEDULED", "epoch": 1},
        )
    assert new_version == 1

    with pytest.raises(errors.LedgerConflict) as conflict, engine.begin() as connection:
        runs.compare_and_set(
            connection,
            schema.task_instances,
            row_id=instance_id,
            expected_version=0,
            values={"state": "QUEUED"},
        )
    assert conflict.value.retryable

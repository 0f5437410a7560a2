"""``executor: container``: a task's ``run`` in an ``image``, with the container's limits."""

from __future__ import annotations

import pytest

from veritask.definitions.codec import definition_to_json
from veritask.definitions.errors import DefinitionError
from veritask.definitions.model import ContainerPull, ContainerSpec
from veritask.definitions.parse import definition_from_json, parse_definition

DEFINITION = """\
name: boxes
tasks:
  build:
    executor: container
    image: registry.example/build:1.2
    run: make all
    cpus: 1.5
    memory: 512MiB
    workdir: /src
    pull: never
  plain: {run: "true"}
"""


def test_a_container_task_is_read_with_its_image_and_limits_and_stored_alike() -> None:
    definition = parse_definition(DEFINITION)

    build = definition.tasks["build"]
    assert build.executor == "container" and build.run == "make all"
    assert build.container == ContainerSpec(
        image="registry.example/build:1.2",
        cpus=1.5,
        memory=512 * 1024**2,
        workdir="/src",
        pull=ContainerPull.NEVER,
    )
    assert definition.tasks["plain"].container is None
    assert "image" not in str(definition_to_json(definition)["tasks"][1])  # type: ignore[index]
    again = definition_from_json(definition_to_json(definition))
    assert again.tasks["build"].container == build.container


def test_an_image_alone_picks_the_container_executor() -> None:
    definition = parse_definition("name: x\ntasks:\n  a: {image: alpine, run: 'true'}\n")

    assert definition.tasks["a"].executor == "container"
    assert definition.tasks["a"].container == ContainerSpec(image="alpine")


@pytest.mark.parametrize(
    ("task", "field", "line", "message"),
    [
        ("    executor: container\n    run: 'true'\n", "tasks.a.image", 3, "needs image"),
        ("    image: alpine\n    call: m:f\n", "tasks.a", 3, "runs run (a shell line)"),
        ("    image: alpine\n    run: 'true'\n    memory: lots\n", "tasks.a.memory", 6, "size"),
        ("    image: alpine\n    run: 'true'\n    memory: 1KiB\n", "tasks.a.memory", 6, "range"),
        ("    image: alpine\n    run: 'true'\n    cpus: 0\n", "tasks.a.cpus", 6, "0"),
        ("    image: alpine\n    run: 'true'\n    pull: always\n", "tasks.a.pull", 6, "always"),
        ("    run: 'true'\n    workdir: /x\n", "tasks.a.workdir", 5, "container tasks"),
    ],
)
def test_a_bad_container_task_is_refused_naming_the_field_and_the_line(
    task: str, field: str, line: int, message: str
) -> None:
    with pytest.raises(DefinitionError) as refused:
        parse_definition(f"name: x\ntasks:\n  a:\n{task}")

    found = [(p.field, p.line) for p in refused.value.problems]
    assert (field, line) in found, refused.value.problems
    assert any(message in p.message for p in refused.value.problems), refused.value.problems


def test_apply_refuses_a_container_task_where_no_container_engine_is_configured() -> None:
    from veritask.execution import engines

    def check(name: str) -> str | None:
        return engines.executor_problem(name, {"DOCKER_HOST": "unix:///nonexistent.sock"})

    with pytest.raises(DefinitionError) as refused:
        parse_definition("name: x\ntasks:\n  a: {image: alpine, run: 'true'}\n", executors=check)

    [problem] = refused.value.problems
    assert problem.field == "tasks.a.executor"
    assert "VERITASK_CONTAINER_HOST" in problem.message


def test_a_run_list_is_the_containers_argv_passed_as_written() -> None:
    definition = parse_definition(
        "name: x\ntasks:\n  a:\n    image: alpine\n    run: [python, -c, 'print(1)']\n"
    )

    task = definition.tasks["a"]
    assert task.container is not None
    assert task.container.argv == ("python", "-c", "print(1)")
    assert task.run == "python -c 'print(1)'"
    again = definition_from_json(definition_to_json(definition))
    assert again.tasks["a"].container == task.container


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ("[echo, '{{ params.day }}']", "passed as it is written"),
        ("[echo, 3]", "expected a string"),
    ],
)
def test_a_bad_run_list_is_refused_naming_the_item(run: str, message: str) -> None:
    with pytest.raises(DefinitionError) as refused:
        parse_definition(f"name: x\ntasks:\n  a:\n    image: alpine\n    run: {run}\n")

    [problem] = refused.value.problems
    assert (problem.field, problem.line) == ("tasks.a.run[1]", 5)
    assert message in problem.message


def test_a_run_list_is_for_container_tasks_only() -> None:
    with pytest.raises(DefinitionError) as refused:
        parse_definition("name: x\ntasks:\n  a:\n    run: [echo, hi]\n")

    assert [(p.field, p.line) for p in refused.value.problems] == [("tasks.a.run", 4)]
    assert "container tasks" in refused.value.problems[0].message

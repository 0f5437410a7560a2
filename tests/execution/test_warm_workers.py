"""Warm workers: a supervised worker done with an attempt is given the next one.

What must hold: each attempt still has exactly one worker, recorded before it runs; a signal
meant for an attempt never reaches the attempt its worker took afterwards; a worker that dies
while it waits, or before it read the attempt it was given, costs nothing but a fork.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.execution.conftest import Engine, FakePlatform, engine_on, evidence, wait_until
from veritask.execution import local, port, procfs, records


@pytest.fixture
def one_slot(tmp_path: Path, platform: FakePlatform) -> Iterator[Engine]:
    with engine_on(tmp_path, platform, slots=1) as engine:
        yield engine


def _worker_of(engine: Engine, spec: port.AttemptSpec) -> records.ProcessRecord:
    worker = records.read_process_record(engine.attempt(spec).worker_record)
    assert worker is not None, "the attempt has no worker record"
    return worker


def _idle_workers(engine: Engine) -> int:
    status = engine.executor.supervisor_status()
    assert status is not None, "no supervisor answers"
    idle = status["idle_workers"]
    assert isinstance(idle, int)
    return idle


def _wait_idle(engine: Engine, count: int = 1) -> None:
    wait_until(lambda: _idle_workers(engine) == count, what=f"{count} idle worker(s)")


def _waiting_worker(engine: Engine) -> records.ProcessRecord:
    """Run an attempt of ``true`` to its end and return its worker, once it waits warm."""
    spec = engine.spec("true")
    engine.run(spec)
    _wait_idle(engine)
    return _worker_of(engine, spec)


def _gated(gate: Path) -> str:
    return f"while [ ! -e {gate} ]; do sleep 0.02; done"


def _ended(pid: int) -> bool:
    stat = procfs.read_stat(pid)
    return stat is None or stat.ended


def test_a_worker_done_with_an_attempt_runs_the_next_one(one_slot: Engine) -> None:
    specs = [one_slot.spec(f"echo attempt {n}") for n in range(3)]

    observations = []
    descriptors = []
    for spec in specs:
        observations.append(one_slot.run(spec))
        one_slot.wait_delivered(spec)
        _wait_idle(one_slot)
        # Whatever an attempt opens, it closes: a warm worker runs hundreds of them.
        descriptors.append(len(os.listdir(f"/proc/{_worker_of(one_slot, spec).pid}/fd")))

    assert all(o.error_category is port.ErrorCategory.NONE for o in observations)
    workers = {_worker_of(one_slot, spec).engine_id for spec in specs}
    assert len(workers) == 1, f"each attempt forked a worker of its own: {workers}"
    assert len(descriptors) == 3 and len(set(descriptors)) == 1, (
        f"the worker's open descriptors changed from attempt to attempt: {descriptors}"
    )
    for n, spec in enumerate(specs):  # each attempt has its own log and its own events
        assert one_slot.attempt(spec).log.read_text().startswith(f"attempt {n}\n")
        assert one_slot.platform.kinds_of(spec.instance_id) == ["started", "completed"]


def test_cancelling_an_ended_attempt_never_reaches_the_next_one(one_slot: Engine) -> None:
    gate = one_slot.workspace / "gate"
    first = one_slot.spec("true")
    first_id = one_slot.executor.submit(spec=first).external_id
    one_slot.wait_ended(first_id)
    _wait_idle(one_slot)
    second = one_slot.spec(_gated(gate))
    second_id = one_slot.executor.submit(spec=second).external_id
    one_slot.wait_state(second_id, port.EngineState.RUNNING)
    assert _worker_of(one_slot, second).engine_id == _worker_of(one_slot, first).engine_id

    one_slot.executor.cancel(external_id=first_id)
    gate.touch()
    observation = one_slot.wait_ended(second_id)

    # A stop signal at any time during the second attempt would have made it CANCELLED.
    assert observation.error_category is port.ErrorCategory.NONE
    assert one_slot.executor.describe(external_id=first_id).error_category is (
        port.ErrorCategory.NONE
    )


def test_cleanup_of_an_ended_attempt_spares_its_worker_busy_with_the_next(
    one_slot: Engine,
) -> None:
    gate = one_slot.workspace / "gate"
    first = one_slot.spec("true")
    first_id = one_slot.executor.submit(spec=first).external_id
    one_slot.wait_ended(first_id)
    one_slot.wait_delivered(first)
    _wait_idle(one_slot)
    second = one_slot.spec(_gated(gate))
    second_id = one_slot.executor.submit(spec=second).external_id
    one_slot.wait_state(second_id, port.EngineState.RUNNING)
    worker = _worker_of(one_slot, second)

    one_slot.executor.cleanup(external_id=first_id)

    assert not one_slot.attempt(first).path.exists()
    assert procfs.is_running(worker.pid, worker.start_ticks)
    gate.touch()
    assert one_slot.wait_ended(second_id).error_category is port.ErrorCategory.NONE


def test_cleanup_still_stops_a_worker_that_is_delivering_the_attempt(one_slot: Engine) -> None:
    # Delivery to a platform that refuses keeps the worker on the attempt after its task ended.
    one_slot.platform.events_status = 503
    spec = one_slot.spec("true")
    external_id = one_slot.executor.submit(spec=spec).external_id
    one_slot.wait_ended(external_id)
    worker = _worker_of(one_slot, spec)
    wait_until(lambda: one_slot.platform.refused > 0, what="a refused delivery")
    assert procfs.is_running(worker.pid, worker.start_ticks)

    one_slot.executor.cleanup(external_id=external_id)

    assert _ended(worker.pid)


def test_a_warm_worker_that_dies_while_it_waits_is_replaced(one_slot: Engine) -> None:
    dead = _waiting_worker(one_slot)
    os.kill(dead.pid, signal.SIGKILL)
    wait_until(lambda: _idle_workers(one_slot) == 0, what="the supervisor to see it gone")

    second = one_slot.spec("true")
    observation = one_slot.run(second)

    assert observation.error_category is port.ErrorCategory.NONE
    assert _worker_of(one_slot, second).engine_id != dead.engine_id


def test_a_stop_signal_to_a_waiting_worker_ends_it(one_slot: Engine) -> None:
    waiting = _waiting_worker(one_slot)

    os.kill(waiting.pid, signal.SIGTERM)

    wait_until(lambda: _ended(waiting.pid), what="the waiting worker to end")
    wait_until(lambda: _idle_workers(one_slot) == 0, what="the supervisor to see it gone")
    assert one_slot.run(one_slot.spec("true")).error_category is port.ErrorCategory.NONE


def test_an_attempt_its_worker_never_read_goes_to_another_worker(one_slot: Engine) -> None:
    frozen = _waiting_worker(one_slot)
    os.kill(frozen.pid, signal.SIGSTOP)  # it cannot read what it is given
    second = one_slot.spec("true")
    second_id = one_slot.executor.submit(spec=second).external_id
    wait_until(
        lambda: one_slot.attempt(second).worker_record.exists(),
        what="the attempt to be given to the stopped worker",
    )
    assert _worker_of(one_slot, second).engine_id == frozen.engine_id

    os.kill(frozen.pid, signal.SIGKILL)
    observation = one_slot.wait_ended(second_id)

    assert observation.error_category is port.ErrorCategory.NONE
    assert _worker_of(one_slot, second).engine_id != frozen.engine_id
    one_slot.wait_delivered(second)
    assert one_slot.platform.kinds_of(second.instance_id) == ["started", "completed"]


def test_a_cancel_that_reaches_a_worker_before_it_read_the_attempt_is_confirmed(
    one_slot: Engine,
) -> None:
    frozen = _waiting_worker(one_slot)
    os.kill(frozen.pid, signal.SIGSTOP)
    second = one_slot.spec("sleep 30")
    second_id = one_slot.executor.submit(spec=second).external_id
    wait_until(
        lambda: one_slot.attempt(second).worker_record.exists(),
        what="the attempt to be given to the stopped worker",
    )

    # Still waiting, the worker takes the SIGTERM for itself and ends without the attempt;
    # the worker the attempt then goes to finds the cancel request before it starts the task.
    one_slot.executor.cancel(external_id=second_id)
    with contextlib.suppress(ProcessLookupError):
        os.kill(frozen.pid, signal.SIGCONT)
    observation = one_slot.wait_ended(second_id)

    assert observation.error_category is port.ErrorCategory.CANCELLED
    assert _worker_of(one_slot, second).engine_id != frozen.engine_id
    assert evidence(one_slot.wait_delivered(second))["error_category"] == "cancelled"
    assert "started" not in one_slot.platform.kinds_of(second.instance_id)


def test_waiting_workers_beyond_the_slots_are_let_go(
    tmp_path: Path, platform: FakePlatform
) -> None:
    with engine_on(tmp_path, platform, slots=2) as engine:
        gate = engine.workspace / "gate"
        ids = [engine.executor.submit(spec=engine.spec(_gated(gate))).external_id for _ in "ab"]
        for external_id in ids:
            engine.wait_state(external_id, port.EngineState.RUNNING)
        gate.touch()
        for external_id in ids:
            engine.wait_ended(external_id)
        _wait_idle(engine, 2)

        fewer = local.LocalExecutor(home=engine.executor.home.path.parent, slots=1)
        fewer.ensure_supervisor()  # configures the running supervisor with one slot

        _wait_idle(engine, 1)

"""How a revoke with ``terminate`` finds the delivery it names (task.Deliveries)."""

from __future__ import annotations

from veritask.execution.celery.task import Deliveries


def test_a_stop_reaches_the_running_delivery_of_its_task_id_only() -> None:
    deliveries = Deliveries()
    stopped: list[str] = []
    with (
        deliveries.running("celery:a/1", lambda: stopped.append("a")),
        deliveries.running("celery:b/1", lambda: stopped.append("b")),
    ):
        assert deliveries.stop("celery:b/1")
    assert stopped == ["b"]


def test_a_stop_for_a_delivery_that_ended_or_never_began_here_does_nothing() -> None:
    deliveries = Deliveries()
    stopped: list[str] = []
    with deliveries.running("celery:a/1", lambda: stopped.append("a")):
        pass
    assert not deliveries.stop("celery:a/1")
    assert not deliveries.stop("celery:never/1")
    assert stopped == []

"""A Veritask cluster on loopback, every piece a real process.

``Cluster`` starts API servers (``veritask server``), schedulers (``python -m
veritask.scheduling``) on one PostgreSQL database, and Veritask Celery workers ("hosts", each
with its own home, hostname and API server to report to), all on a queue of the test's own.
Needs PostgreSQL, RabbitMQ and Redis: without them the tests skip, or fail under
``VERITASK_REQUIRE_SERVICES=1``.

Every task of :func:`marked_fanout` leaves ``<dir>/<instance>.<attempt>.start`` (one line per
start: wall-clock ns, pid) and ``.stop`` files, which say what really ran whatever the ledger
says; :func:`read_markers` and :func:`assert_no_overlap` judge them.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.execution.celery.conftest import AMQP_URL, REDIS_URL, Hosts, require_celery_services
from tests.scheduling.harness import FAST_FLAGS, REPO_ROOT, SECRET, Ledgers, wait_for
from veritask.core.states import RunExecutionState
from veritask.ledger import dialects, schema

#: The Celery lease in Redis and the task's lease in the ledger: a dead host's attempts are
#: LOST after this long, and the reconciler reads ``unknown`` from Redis soon after.
LEASE_SECONDS = 2.0


@pytest.fixture
def cluster_services() -> None:
    require_celery_services()


def marked_fanout(name: str, tasks: int, markers: Path, *, sleep: float, chains: int = 0) -> str:
    """A definition of ``tasks`` Celery tasks that leave start and stop markers: independent,
    or in ``chains`` chains (each task after the one before it in its chain), so that new
    attempts are submitted all through the run."""
    where = f'{markers}/"$VERITASK_INSTANCE_ID.$VERITASK_ATTEMPT_NO"'
    command = (
        f'echo "$(date +%s%N) $$" >> {where}.start; sleep {sleep}; '
        f'echo "$(date +%s%N) $$" >> {where}.stop'
    )
    lines = [
        f"name: {name}",
        "concurrency: allow",
        "defaults:",
        f"  lease: {LEASE_SECONDS:g}s",
        "  evidence_window: 1s",
        "  on_unknown: retry",
        "  retry: {max_retries: 3, backoff: fixed, delay: 0.2s, max_delay: 1s, jitter: 0}",
        "tasks:",
    ]
    for n in range(tasks):
        after = f", after: [t{n - chains:04d}]" if chains and n >= chains else ""
        lines.append(f"  t{n:04d}: {{run: {json.dumps(command)}, executor: celery{after}}}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Marker:
    """What the files of one attempt say: its start lines and its stop time, if it stopped."""

    starts: tuple[int, ...]
    stop: int | None


def read_markers(markers: Path) -> dict[str, dict[int, Marker]]:
    """instance -> attempt number -> marker."""
    found: dict[str, dict[int, Marker]] = {}
    for path in markers.glob("*.start"):
        instance, _, number = path.name.removesuffix(".start").rpartition(".")
        starts = tuple(int(line.split()[0]) for line in path.read_text().splitlines() if line)
        stop_path = path.with_suffix(".stop")
        stop = int(stop_path.read_text().split()[0]) if stop_path.exists() else None
        found.setdefault(instance, {})[int(number)] = Marker(starts, stop)
    return found


def assert_no_overlap(found: dict[str, dict[int, Marker]], *, killed_at: int | None) -> None:
    """No attempt started twice, and no two attempts of an instance ran at the same time.

    An attempt without a stop marker was killed with its host: it ran until ``killed_at``
    (every process of the host was gone by then), so its interval ends there.
    """
    for instance, attempts in found.items():
        intervals: list[tuple[int, int, int]] = []
        for number, marker in attempts.items():
            assert len(marker.starts) == 1, f"{instance} attempt {number} started twice"
            if marker.stop is not None:
                end = marker.stop
            else:
                assert killed_at is not None, f"{instance} attempt {number} never stopped"
                end = killed_at
            intervals.append((marker.starts[0], end, number))
        intervals.sort()
        for (_, end, before), (start, _, after) in itertools.pairwise(intervals):
            assert end < start, f"{instance}: attempts {before} and {after} ran at the same time"


def successes_per_instance(db: Ledgers) -> Counter[str]:
    """How many applied events took each instance into SUCCESS (the ledger's history).

    Events recorded while it already was SUCCESS (a worker's late reports) are not counted:
    they are kept, and change nothing.
    """
    e = schema.events.c
    with dialects.read_transaction(db.engine) as connection:
        rows = connection.execute(
            sa.select(e.instance_id, sa.func.count())
            .where(
                e.to_state == "SUCCESS",
                e.from_state != "SUCCESS",
                e.outcome == "applied",
                e.instance_id.is_not(None),
            )
            .group_by(e.instance_id)
        ).all()
    return Counter({str(row[0]): int(row[1]) for row in rows})


def lost_attempts(db: Ledgers) -> set[tuple[str, int]]:
    """The (instance, attempt) pairs that the ledger recorded going LOST."""
    e = schema.events.c
    with dialects.read_transaction(db.engine) as connection:
        rows = connection.execute(
            sa.select(e.instance_id, e.attempt_no).where(
                e.to_state == "LOST", e.outcome == "applied"
            )
        ).all()
    return {(str(row[0]), int(row[1])) for row in rows}


def count_states(db: Ledgers, run_id: str) -> Counter[str]:
    return Counter(state.value for state in db.states(run_id).values())


def wait_for_run(db: Ledgers, run_id: str, *, timeout: float) -> RunExecutionState:
    """Poll until the run has finished; on timeout, fail with what the stuck instances say."""
    give_up_at = time.monotonic() + timeout
    active = (RunExecutionState.RUNNING, RunExecutionState.QUEUED, RunExecutionState.CANCELLING)
    while time.monotonic() < give_up_at:
        state, _ = db.run(run_id)
        if state not in active:
            return state
        time.sleep(0.2)
    stuck = [row for row in db.instances(run_id).values() if row.state.value != "SUCCESS"]
    lines = [f"the run did not finish in {timeout}s: {count_states(db, run_id)}"]
    for row in stuck[:3]:
        lines.append(f"{row.task_key} {row.id} {row.state.value} epoch {row.epoch}:")
        lines += [f"    {event}" for event in db.history(row.id)]
        lines += [f"    attempt {attempt}" for attempt in db.attempts(row.id)]
    pytest.fail("\n".join(lines), pytrace=False)


@dataclass
class Cluster:
    """API servers, schedulers and Celery hosts on one database; all killed at the end."""

    database_url: str
    tmp_path: Path
    broker_url: str = AMQP_URL
    backend_url: str = REDIS_URL
    queue: str = field(default_factory=lambda: f"vt-cluster-{secrets.token_hex(4)}")
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    hosts: Hosts = field(init=False)

    def __post_init__(self) -> None:
        self.db = Ledgers(dialects.create_engine(self.database_url))
        self.hosts = Hosts(
            self.tmp_path,
            queue=self.queue,
            broker_url=self.broker_url,
            backend_url=self.backend_url,
        )

    def env(self) -> dict[str, str]:
        """What every platform process gets: the database, the secret, the executor."""
        env = dict(os.environ)
        env.update(
            VERITASK_DATABASE_URL=self.database_url,
            VERITASK_SECRET=SECRET,
            VERITASK_CELERY_BROKER=self.broker_url,
            VERITASK_CELERY_BACKEND=self.backend_url,
            VERITASK_CELERY_QUEUE=self.queue,
            VERITASK_CELERY_LEASE_SECONDS=str(LEASE_SECONDS),
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
        )
        return env

    def _popen(self, command: list[str], name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(self.tmp_path / f"{name}.log", "ab") as output:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=output, stderr=output, env=env
            )
        self.processes.append(process)
        return process

    def start_server(self, name: str) -> str:
        """``veritask server`` on a free port; returns its URL once it announced it."""
        home = self.tmp_path / name
        env = {**self.env(), "VERITASK_HOME": str(home)}
        veritask = Path(sys.executable).with_name("veritask")
        process = self._popen([str(veritask), "server", "--port", "0"], name, env)
        log = self.tmp_path / f"{name}.log"

        def announced() -> str | None:
            assert process.poll() is None, f"{name} exited: {log.read_text()[-2000:]}"
            for line in log.read_text().splitlines():
                if line.startswith("Veritask is up at "):
                    return line.removeprefix("Veritask is up at ").strip()
            return None

        return wait_for(announced, what=f"{name} to listen", timeout=60, interval=0.1)

    def start_scheduler(self, name: str, *, api_url: str | None) -> subprocess.Popen[bytes]:
        """A scheduler whose Celery attempts report to ``api_url`` unless a host says else
        (None: to this scheduler's outbox, which workers on this machine can reach)."""
        env = self.env()
        command = [
            sys.executable,
            "-m",
            "veritask.scheduling",
            f"--home={self.tmp_path / name}",
            f"--url={self.database_url}",
            "--no-migrate",
            *FAST_FLAGS,
        ]
        if api_url is not None:
            env["VERITASK_CELERY_CALLBACK_URL"] = api_url
            command.append(f"--commit-url={api_url}")
        return self._popen(command, name, env)

    def start_host(self, name: str, *, api_url: str | None, concurrency: int) -> str:
        """A Celery worker host reporting to ``api_url``; returns its Celery hostname."""
        extra = {} if api_url is None else {"VERITASK_CELERY_CALLBACK_URL": api_url}
        return self.hosts.start(name, concurrency=concurrency, env=extra)

    def schedulers_registered(self) -> int:
        with dialects.read_transaction(self.db.engine) as connection:
            return int(
                connection.execute(
                    sa.select(sa.func.count()).select_from(schema.schedulers)
                ).scalar_one()
            )

    def assert_alive(self) -> None:
        for process in self.processes:
            assert process.poll() is None, f"{process.args!r} exited with {process.returncode}"

    def close(self) -> None:
        self.hosts.stop_all()
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.db.engine.dispose()


@pytest.fixture
def cluster(cluster_services: None, database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(database_url, tmp_path)
    try:
        yield made
    finally:
        made.close()


def elapsed_since(started: float) -> str:
    return f"{time.monotonic() - started:.1f}s"

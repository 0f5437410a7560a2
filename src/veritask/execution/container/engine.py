"""``ContainerExecutor``: each attempt is one container of a container engine (Docker or
Podman) reached over the Docker Engine API (``client``).

The container's name is derived from the attempt alone (``container_name``), so submitting the
same attempt twice, from this process or after a restart, finds the container made the first
time instead of making a second one. Its labels say which definition, run, instance and
attempt it runs, and a hash of the attempt token (never the token). The engine is the source
of truth: no worker of ours runs beside the task and nothing reports for it; ``describe``
reads the container's state (exit code, ``OOMKilled``, ``StartedAt``/``FinishedAt``) and the
reconciler turns what it says into the attempt's events, as it does for any engine.

The external id is ``container:<name>``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from veritask.core import jsontypes
from veritask.execution import endings, engine_watch, errors, port, secrets
from veritask.execution.container import client, mounts, registration, watch

EXTERNAL_ID_PREFIX: Final = "container:"
NAME_PREFIX: Final = "veritask-"
LABEL_PREFIX: Final = "io.veritask."
LABEL_INSTANCE: Final = LABEL_PREFIX + "instance"
LABEL_ATTEMPT: Final = LABEL_PREFIX + "attempt"
LABEL_TOKEN: Final = LABEL_PREFIX + "token-sha256"
LABEL_DEFINITION: Final = LABEL_PREFIX + "definition"
LABEL_RUN: Final = LABEL_PREFIX + "run"
LABEL_SKIP_EXIT_CODE: Final = LABEL_PREFIX + "skip-exit-code"
LABEL_TIMEOUT: Final = LABEL_PREFIX + "timeout-seconds"
#: How long a stop may take beyond the grace period before the request gives up (the stop is
#: confirmed by ``describe`` anyway).
STOP_SLACK_SECONDS: Final = 10.0
#: How long a submission that found the container's name in use waits for the engine to show
#: the container another submission is making.
NAME_IN_USE_PATIENCE_SECONDS: Final = 10.0
#: How long cleanup waits for the copy of an ended container's output to finish.
FOLLOWER_PATIENCE_SECONDS: Final = 5.0
#: How many times an inspection the engine failed (HTTP 5xx) is asked before describe fails.
INSPECT_TRIES: Final = 5
#: How much sooner than its timeout a container may have ended by a stop that was its timeout's
#: (the engine's times and the timer's differ by the moment it takes to start).
TIMEOUT_SLACK: Final = timedelta(seconds=0.5)
#: A container made this long ago and never started was left by a process that died between
#: making and starting it: a submission of the same attempt starts it.
UNSTARTED_AFTER: Final = timedelta(seconds=10)
_SAFE = re.compile(r"[^a-zA-Z0-9_.-]+")
_RUNNING = ("running", "paused", "restarting", "removing")
_ENDED = ("exited", "dead", "stopped")
log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def container_name(instance_id: str, attempt_no: int) -> str:
    """The one name an attempt's container has: readable, and unique by the instance's hash."""
    digest = hashlib.sha256(instance_id.encode()).hexdigest()[:12]
    readable = _SAFE.sub("-", instance_id).strip("-.")[:80]
    return f"{NAME_PREFIX}{readable}-{digest}-a{attempt_no}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ContainerExecutor:
    """Runs ``ContainerRun`` attempts on the engine at ``host`` (``unix://…`` or ``tcp://…``).

    ``log_dir``, when given, keeps each container's log as ``<name>.log`` when ``cleanup``
    removes the container (the engine drops a container's log with it).
    ``allowed_volumes`` are the host directories a task's ``volumes`` may mount (under);
    ``secret_dir`` is where each attempt's ``secret_files`` are written (``mounts``).
    """

    def __init__(
        self,
        *,
        host: str,
        log_dir: Path | None = None,
        secret_providers: Sequence[secrets.SecretProvider] | None = None,
        unstarted_after: timedelta = UNSTARTED_AFTER,
        clock: Callable[[], datetime] = _utc_now,
        allowed_volumes: Sequence[str] = (),
        secret_dir: Path | None = None,
    ) -> None:
        self.client = client.Client(host)
        self.allowed_volumes = tuple(allowed_volumes)
        self.secret_files = mounts.SecretFiles(secret_dir or Path(registration.DEFAULT_SECRET_DIR))
        self.unstarted_after = unstarted_after
        self.clock = clock
        self.log_dir = log_dir
        self._closed = threading.Event()
        self._secret_providers = secret_providers
        self._lock = threading.Lock()
        #: Containers this process was asked to stop: their end is a cancellation.
        self._cancelled: set[str] = set()
        #: Containers a thread of this process is stopping now: a new request waits for it.
        self._stopping: set[str] = set()
        #: Containers a thread of this process watches and reports on, by name.
        self._watchers = engine_watch.Watchers(self._closed)
        #: The threads that copy a container's output into its kept log as it comes.
        self._followers: dict[str, threading.Thread] = {}

    # --- the port -----------------------------------------------------------------------

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        task = spec.task
        if not isinstance(task, port.ContainerRun):
            raise errors.ExecutorError(
                "the container executor runs container tasks only (a task with image: and run:)",
                retryable=False,
            )
        name = container_name(spec.instance_id, spec.attempt_no)
        external_id = EXTERNAL_ID_PREFIX + name
        found = self._inspect(name)
        if found.status == 200:
            self._adopt(spec, name, found.json())
            self._watch(spec, name)
            return port.Submission(external_id, created=False)
        if found.status != 404:
            raise _failure("inspect", name, found)
        self._ensure_image(task)
        body = self._body(spec, task)
        if task.secret_files:
            host = _object(body["HostConfig"])
            host["Binds"] = [*_strings(host.get("Binds")), self._write_secret_files(task, name)]
        made = self.client.call("POST", "/containers/create", params={"name": name}, body=body)
        if made.status != 201:
            if made.status != 409 and "already in use" not in made.message:
                self.secret_files.remove(name)
                raise _failure("create", name, made)
            # The name is in use (Docker answers 409, Podman 500): another submission made it
            # at the same moment, and starts it. The engine may answer its inspection only
            # once that one is made.
            self._adopt(spec, name, self._inspect_made(name, made))
            self._watch(spec, name)
            return port.Submission(external_id, created=False)
        self._start(name)
        self._watch(spec, name)
        if spec.timeout is not None:
            timer = threading.Timer(
                spec.timeout.total_seconds(), self._stop_in_background, args=(name,)
            )
            timer.daemon = True
            timer.start()
        return port.Submission(external_id, created=True)

    def describe(self, *, external_id: str) -> port.Observation:
        name = _name(external_id)
        found = self._inspect(name)
        details: dict[str, port.DetailValue] = {"container": name}
        observe = port.ObservationDraft(external_id, details)
        if found.status == 404:
            return observe.make(port.EngineState.NOT_FOUND, registration.Source.INSPECT)
        if found.status != 200:
            raise _failure("inspect", name, found)
        inspected = found.json()
        state = _object(inspected.get("State"))
        status = str(state.get("Status") or "")
        details["status"] = status
        container_id = inspected.get("Id")
        if isinstance(container_id, str):
            observe.engine_id = container_id
        observe.started_at = client.parse_time(state.get("StartedAt"))
        # The engine's times, in the details too: they are the evidence the ledger keeps.
        if observe.started_at is not None:
            details["started_at"] = observe.started_at.isoformat()
        config = _object(inspected.get("Config"))
        labels = _object(config.get("Labels"))
        image = config.get("Image")
        if isinstance(image, str):
            details["image"] = image
        timeout = _seconds(labels.get(LABEL_TIMEOUT))
        if status in _RUNNING:
            started = observe.started_at
            late = (
                timeout is not None
                and started is not None
                and self.clock() - started >= timedelta(seconds=timeout)
            )
            if late:
                # Past its timeout: stopped whichever process asks (the timer of the one that
                # made it may have died with it).
                details["timed_out"] = True
                self._stop_in_background(name)
            return observe.make(port.EngineState.RUNNING, registration.Source.INSPECT)
        if status not in _ENDED:
            return observe.make(port.EngineState.PENDING, registration.Source.INSPECT)
        observe.ended_at = client.parse_time(state.get("FinishedAt"))
        if observe.ended_at is not None and observe.started_at is not None:
            # Podman records StartedAt after the process started: one that ends at once may
            # show a FinishedAt a few microseconds before it.
            observe.ended_at = max(observe.ended_at, observe.started_at)
        if observe.ended_at is not None:
            details["finished_at"] = observe.ended_at.isoformat()
        exit_code = state.get("ExitCode")
        code = exit_code if isinstance(exit_code, int) else None
        details["exit_code"] = code
        # The engine says 128 + n for a process a signal ended (its init passes it on).
        signal = code - 128 if code is not None and 128 < code < 160 else None
        if signal is not None:
            details["signal"] = signal
        oom = state.get("OOMKilled") is True
        details["oom_killed"] = oom
        limit = _object(inspected.get("HostConfig")).get("Memory")
        if isinstance(limit, int) and limit > 0:
            details["memory_limit"] = limit
        problem = state.get("Error")
        if isinstance(problem, str) and problem:
            details["error_message"] = problem
        ran = (
            observe.ended_at - observe.started_at
            if observe.ended_at is not None and observe.started_at is not None
            else None
        )
        timed_out = (
            timeout is not None
            and ran is not None
            and signal in (9, 15)
            and ran >= timedelta(seconds=timeout) - TIMEOUT_SLACK
        )
        with self._lock:
            cancelled = name in self._cancelled
        stopped_by_us = (
            port.ErrorCategory.TIMEOUT
            if timed_out
            # Exit 0 is the task's own end: the stop came after its work was done.
            else port.ErrorCategory.CANCELLED
            if cancelled and code != 0
            else None
        )
        if not oom and stopped_by_us is None and signal == 9 and "memory_limit" in details:
            oom = self._killed_by_kernel(inspected, details)
        category = endings.categorize(
            endings.Ending(
                exit_code=code,
                signal=signal,
                skip_exit_code=_skip_code(labels),
                stopped_by_us=stopped_by_us,
                started=not (
                    isinstance(problem, str) and problem and code in (None, 125, 126, 127)
                ),
                out_of_memory=oom,
            )
        )
        engine_state = (
            port.EngineState.SUCCEEDED
            if category in (port.ErrorCategory.NONE, port.ErrorCategory.SKIPPED)
            else port.EngineState.FAILED
        )
        made = observe.make(engine_state, registration.Source.INSPECT, category=category)
        return port.Observation(
            external_id=made.external_id,
            engine_state=made.engine_state,
            source=made.source,
            engine_id=made.engine_id,
            exit_code=None if signal is not None else code,
            error_category=category,
            started_at=made.started_at,
            ended_at=made.ended_at,
            details=made.details,
        )

    def cancel(self, *, external_id: str) -> None:
        """Ask the engine to stop the container: SIGTERM, then SIGKILL after the attempt's
        grace period (kept in the container's stop timeout). Returns at once."""
        name = _name(external_id)
        with self._lock:
            self._cancelled.add(name)
        self._stop_in_background(name)

    def cleanup(self, *, external_id: str) -> None:
        name = _name(external_id)
        observation = self.describe(external_id=external_id)
        if observation.engine_state is port.EngineState.NOT_FOUND:
            self.secret_files.remove(name)
            return
        if not observation.ended:
            raise errors.ExecutorError(
                f"{external_id} is {observation.engine_state}: cancel it before cleanup",
                retryable=True,
            )
        with self._lock:
            follower = self._followers.pop(name, None)
        if follower is not None:
            # Its stream ends with the container's output; removing the container under it
            # would end it with the engine's error instead.
            follower.join(FOLLOWER_PATIENCE_SECONDS)
        self._keep_log(name)
        removed = self.client.call("DELETE", f"/containers/{client.path_name(name)}")
        if removed.status not in (200, 204, 404):
            raise _failure("remove", name, removed)
        self.secret_files.remove(name)
        with self._lock:
            self._cancelled.discard(name)

    def resume(self, *, spec: port.AttemptSpec) -> bool:
        """Watch and report on an attempt whose container the engine still runs and no thread
        of this process watches (the process that started it died); True if watched now."""
        if not isinstance(spec.task, port.ContainerRun):
            return False
        name = container_name(spec.instance_id, spec.attempt_no)
        if self._watchers.watching(name):
            return True
        found = self._inspect(name)
        if found.status == 404:
            return False
        if found.status != 200:
            raise _failure("inspect", name, found)
        inspected = found.json()
        labels = _object(_object(inspected.get("Config")).get("Labels"))
        if labels.get(LABEL_TOKEN) != token_hash(spec.attempt_token):
            raise errors.ExecutorError(
                f"the container {name} runs attempt {spec.attempt_no} under another token",
                retryable=False,
            )
        if _object(inspected.get("State")).get("Status") in _ENDED:
            return False  # ended: describe tells how
        self._watch(spec, name)
        return True

    def held_attempts(self) -> list[port.Held]:
        """Every container with Veritask's labels the engine holds (``port.Listing``): the
        reconciler stops those of this platform's attempts that are no longer live."""
        listed = self.client.call(
            "GET",
            "/containers/json",
            params={"all": "1", "filters": json.dumps({"label": [LABEL_INSTANCE]})},
        )
        if listed.status != 200:
            raise _failure("list", "the containers", listed)
        found: list[port.Held] = []
        for item in listed.list():
            held = _held(item) if isinstance(item, dict) else None
            if held is not None:
                found.append(held)
        return found

    def wait_for_watchers(self, timeout: float) -> None:
        """Wait until this process has reported the end of what it watches (tests, shutdown)."""
        self._watchers.wait(timeout)

    def read_log(self, *, instance_id: str, attempt_no: int) -> bytes | None:
        """The container's output (stdout and stderr as written), from the engine while the
        container exists, else from the copy kept when it was removed; None when neither."""
        name = container_name(instance_id, attempt_no)
        found = self.client.call(
            "GET",
            f"/containers/{client.path_name(name)}/logs",
            params={"stdout": "1", "stderr": "1"},
        )
        if found.status == 200:
            return client.demultiplex(found.body)
        if found.status != 404:
            raise _failure("read the log of", name, found)
        kept = self._kept_log(name)
        if kept is not None and kept.exists():
            return kept.read_bytes()
        return None

    def close(self) -> None:
        self._closed.set()
        self.client.close()

    # --- helpers ------------------------------------------------------------------------

    def _adopt(self, spec: port.AttemptSpec, name: str, inspected: jsontypes.JSONObject) -> None:
        labels = _object(_object(inspected.get("Config")).get("Labels"))
        if labels.get(LABEL_TOKEN) != token_hash(spec.attempt_token):
            raise errors.ExecutorError(
                f"the container {name} runs attempt {spec.attempt_no} under another token",
                retryable=False,
            )
        # Starting an ended container runs it again: only one made and never started for a
        # while (the process that made it died before it started it) is started here.
        made_at = client.parse_time(inspected.get("Created"))
        status = _object(inspected.get("State")).get("Status")
        if (
            status in ("created", "configured")
            and made_at is not None
            and self.clock() - made_at > self.unstarted_after
        ):
            self._start(name)

    def _watch(self, spec: port.AttemptSpec, name: str) -> None:
        if self._watchers.watching(name):
            return
        external_id = EXTERNAL_ID_PREFIX + name
        self._watchers.start(
            name,
            # Once it has ended, nothing reads its secret files again.
            lambda: watch.Watch(
                spec, self.client.host, done=lambda: self.secret_files.remove(name)
            ),
            lambda: self.describe(external_id=external_id),
        )
        kept = self._kept_log(name)
        if kept is not None:
            follower = threading.Thread(
                target=watch.follow_log,
                args=(self.client.host, name, kept, spec.log_cap_bytes, self._closed.is_set),
                name=f"container-log-{name}",
                daemon=True,
            )
            with self._lock:
                self._followers[name] = follower
            follower.start()

    def _killed_by_kernel(
        self, inspected: jsontypes.JSONObject, details: dict[str, port.DetailValue]
    ) -> bool:
        """Whether a container under a memory limit that died of SIGKILL was killed by the
        kernel for its memory: nobody asked the engine to kill or stop it. Docker sets
        ``OOMKilled``; Podman 4 does not (it sees the SIGKILL only), so the engine's own event
        log is asked for a ``kill`` (every stop and kill of ours sends one first)."""
        container_id = inspected.get("Id")
        since = client.parse_time(inspected.get("Created"))
        if not isinstance(container_id, str) or since is None:
            return False
        asked = self.client.call(
            "GET",
            "/events",
            params={
                "since": str(int(since.timestamp()) - 1),
                "until": str(int(self.clock().timestamp()) + 1),
                "filters": json.dumps({"event": ["kill"]}),
            },
        )
        if asked.status != 200:
            return False
        for line in asked.body.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("id") == container_id:
                details["killed_by"] = "a kill or stop asked of the engine"
                return False
        details["oom_inferred"] = (
            "exit 137 under a memory limit, and no kill or stop was asked of the engine"
        )
        return True

    def _inspect(self, name: str) -> client.Answer:
        """The engine's inspection of the container. Podman answers 500 for a moment while a
        container exits (it reads the cgroup of a process that just ended): asked again."""
        for _ in range(INSPECT_TRIES - 1):
            found = self.client.call("GET", f"/containers/{client.path_name(name)}/json")
            if found.status < 500:
                return found
            time.sleep(0.05)
        return self.client.call("GET", f"/containers/{client.path_name(name)}/json")

    def _inspect_made(self, name: str, refusal: client.Answer) -> jsontypes.JSONObject:
        deadline = time.monotonic() + NAME_IN_USE_PATIENCE_SECONDS
        while True:
            again = self._inspect(name)
            if again.status == 200:
                return again.json()
            if again.status != 404 or time.monotonic() > deadline:
                raise _failure("create", name, refusal)
            time.sleep(0.05)

    def _start(self, name: str) -> None:
        started = self.client.call("POST", f"/containers/{client.path_name(name)}/start")
        if started.status not in (204, 304):
            raise _failure("start", name, started)

    def _ensure_image(self, task: port.ContainerRun) -> None:
        found = self.client.call("GET", f"/images/{client.path_name(task.image)}/json")
        if found.status == 200:
            return
        if found.status != 404:
            raise _failure("inspect the image", task.image, found)
        if task.pull is port.Pull.NEVER:
            raise errors.ExecutorError(
                f"the image {task.image!r} is not on the container engine's host "
                "and the task says pull: never",
                retryable=False,
            )
        image, _, tag = task.image.partition("@")[0].rpartition(":")
        if not image or "/" in tag:
            image, tag = task.image, "latest"
        pulled = self.client.call(
            "POST",
            "/images/create",
            params={"fromImage": image, "tag": tag},
            timeout=600.0,
        )
        if pulled.status != 200:
            raise _failure("pull", task.image, pulled)

    def _body(self, spec: port.AttemptSpec, task: port.ContainerRun) -> jsontypes.JSONObject:
        env = dict(spec.env)
        env.update(self._secrets(spec))
        labels: dict[str, jsontypes.JSONValue] = {
            LABEL_INSTANCE: spec.instance_id,
            LABEL_ATTEMPT: str(spec.attempt_no),
            LABEL_TOKEN: token_hash(spec.attempt_token),
            LABEL_SKIP_EXIT_CODE: str(spec.skip_exit_code),
        }
        if spec.timeout is not None:
            labels[LABEL_TIMEOUT] = str(spec.timeout.total_seconds())
        for label, variable in (
            (LABEL_DEFINITION, "VERITASK_DEFINITION"),
            (LABEL_RUN, "VERITASK_RUN_ID"),
        ):
            if variable in spec.env:
                labels[label] = spec.env[variable]
        host: dict[str, jsontypes.JSONValue] = {"Init": True}
        if task.cpus is not None:
            host["NanoCpus"] = int(task.cpus * 1_000_000_000)
        if task.memory is not None:
            host["Memory"] = task.memory
            host["MemorySwap"] = task.memory  # no swap beyond the limit: OOM is OOM
        binds = mounts.binds(
            task, allowed=self.allowed_volumes, local_engine=self.client.host.startswith("unix://")
        )
        if binds:
            host["Binds"] = list[jsontypes.JSONValue](binds)
        body: dict[str, jsontypes.JSONValue] = {
            "Image": task.image,
            "Cmd": list(task.command),
            "Env": [f"{key}={value}" for key, value in env.items()],
            "Labels": labels,
            "HostConfig": host,
            "StopTimeout": max(1, int(spec.grace_period.total_seconds())),
            "StopSignal": "SIGTERM",
        }
        if task.workdir:
            body["WorkingDir"] = task.workdir
        return body

    def _secrets(self, spec: port.AttemptSpec) -> dict[str, str]:
        return self._resolve(spec.secret_env)

    def _resolve(self, wanted: Mapping[str, str]) -> dict[str, str]:
        if not wanted:
            return {}
        providers = self._secret_providers
        if providers is None:
            providers = secrets.providers_from_environment(os.environ)
        try:
            return secrets.resolve(wanted, providers=providers)
        except secrets.SecretError as exc:
            raise errors.ExecutorError(str(exc), retryable=False) from None

    def _write_secret_files(self, task: port.ContainerRun, name: str) -> str:
        """The task's secret files, written for its container: the bind that mounts them."""
        if not self.client.host.startswith("unix://"):
            raise errors.ExecutorError(
                f"secret_files need the container engine on the scheduler's host (a unix "
                f"socket): the files are mounted from it, and the engine is {self.client.host}",
                retryable=False,
            )
        return self.secret_files.write(name, self._resolve(task.secret_files))

    def _stop_in_background(self, name: str) -> None:
        with self._lock:
            if name in self._stopping:
                return
            self._stopping.add(name)
        threading.Thread(
            target=self._stop_once, args=(name,), name=f"container-stop-{name}", daemon=True
        ).start()

    def _stop_once(self, name: str) -> None:
        try:
            self._stop(name)
        except errors.ExecutorError as exc:
            log.warning("could not stop the container %s: %s", name, exc)
        finally:
            with self._lock:
                self._stopping.discard(name)

    def _stop(self, name: str) -> None:
        inspected = self._inspect(name)
        if inspected.status != 200:
            return
        grace = _object(inspected.json().get("Config")).get("StopTimeout")
        seconds = grace if isinstance(grace, int) else 10
        try:
            # A kill of SIGTERM first: the engine's event log then says a stop was asked of it
            # (Podman's stop leaves no event), so a SIGKILL that follows is not the kernel's.
            self.client.call(
                "POST",
                f"/containers/{client.path_name(name)}/kill",
                params={"signal": "SIGTERM"},
            )
            stopped = self.client.call(
                "POST",
                f"/containers/{client.path_name(name)}/stop",
                params={"t": str(seconds)},
                timeout=seconds + STOP_SLACK_SECONDS,
            )
        except errors.ExecutorError as exc:
            log.warning("could not stop the container %s: %s", name, exc)
            return
        if stopped.status not in (204, 304, 404):
            log.warning("could not stop the container %s: %s", name, stopped.message)

    def _kept_log(self, name: str) -> Path | None:
        return None if self.log_dir is None else self.log_dir / f"{name}.log"

    def _keep_log(self, name: str) -> None:
        kept = self._kept_log(name)
        if kept is None:
            return
        found = self.client.call(
            "GET",
            f"/containers/{client.path_name(name)}/logs",
            params={"stdout": "1", "stderr": "1"},
        )
        if found.status == 200:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(client.demultiplex(found.body))


def _name(external_id: str) -> str:
    name = external_id.removeprefix(EXTERNAL_ID_PREFIX)
    if not external_id.startswith(EXTERNAL_ID_PREFIX) or not name.startswith(NAME_PREFIX):
        raise errors.ExecutorError(f"not a container external id: {external_id!r}")
    return name


def _held(item: jsontypes.JSONObject) -> port.Held | None:
    """An attempt's container as the engine lists it; None for one whose labels or name are
    not those of an attempt's container."""
    labels = _object(item.get("Labels"))
    names = item.get("Names")
    name = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else ""
    name = name.lstrip("/")  # Docker lists "/name"
    instance, attempt, token = (labels.get(k) for k in (LABEL_INSTANCE, LABEL_ATTEMPT, LABEL_TOKEN))
    if not (
        name.startswith(NAME_PREFIX)
        and isinstance(instance, str)
        and isinstance(token, str)
        and isinstance(attempt, str)
        and attempt.isdigit()
        and int(attempt) >= 1
    ):
        return None
    status = str(item.get("State") or "")
    details: dict[str, port.DetailValue] = {"container": name, "status": status}
    for key, field_name in (("Id", "engine_id"), ("Image", "image")):
        value = item.get(key)
        if isinstance(value, str):
            details[field_name] = value
    run, definition = labels.get(LABEL_RUN), labels.get(LABEL_DEFINITION)
    return port.Held(
        instance_id=instance,
        attempt_no=int(attempt),
        external_id=EXTERNAL_ID_PREFIX + name,
        token_hash=token,
        running=status in _RUNNING,
        source=registration.Source.LIST,
        run_id=run if isinstance(run, str) else None,
        definition=definition if isinstance(definition, str) else None,
        details=details,
    )


def _strings(value: object) -> list[jsontypes.JSONValue]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _skip_code(labels: jsontypes.JSONObject) -> int:
    found = labels.get(LABEL_SKIP_EXIT_CODE)
    return int(found) if isinstance(found, str) and found.isdigit() else 99


def _seconds(value: object) -> float | None:
    try:
        return float(str(value)) if value is not None else None
    except ValueError:
        return None


def _object(value: object) -> jsontypes.JSONObject:
    return value if isinstance(value, dict) else {}


def _failure(what: str, name: str, answer: client.Answer) -> errors.ExecutorError:
    """A refusal of the engine: a server error may pass, a bad request will not."""
    return errors.ExecutorError(
        f"the container engine could not {what} {name}: {answer.message} (HTTP {answer.status})",
        retryable=answer.status >= 500,
    )

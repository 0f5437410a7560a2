"""The engines' registry: every executor name, what configures each, how each is built.

The built-in engines are ``local`` (the embedded supervisor), ``wait`` (conditions the
scheduler process checks itself), ``sql`` (``execution/sql/``), ``celery``
(``execution/celery/``, the ``celery`` extra), ``container`` (``execution/container/``) and
``spark`` (``execution/spark/``).
Another distribution adds an engine with an entry point in the group ``veritask.engines``
whose object is a :class:`port.Engine` (or a function without arguments that returns one),
named as the engine::

    [project.entry-points."veritask.engines"]
    nomad = "veritask_nomad.registration:ENGINE"

An entry point that fails to load does not stop the platform: it is logged, and a definition
that names its engine is refused with the reason. A scheduler builds every engine that its
environment configures (``from_environment``); a definition may name only those.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Final

from veritask.core import problems
from veritask.execution import local, port, task_env, waits
from veritask.execution.celery import registration as celery_registration
from veritask.execution.container import registration as container_registration
from veritask.execution.spark import registration as spark_registration
from veritask.execution.sql import registration as sql_registration

log = logging.getLogger(__name__)

#: The entry-point group another distribution registers its engines in.
ENTRY_POINT_GROUP: Final = "veritask.engines"
LOCAL_EXECUTOR: Final = "local"
#: The scheduler process checks a ``wait:`` task's condition itself (``execution/waits.py``).
WAIT_EXECUTOR: Final = "wait"
SQL_EXECUTOR: Final = sql_registration.NAME
CELERY_EXECUTOR: Final = celery_registration.NAME
CONTAINER_EXECUTOR: Final = container_registration.NAME
SPARK_EXECUTOR: Final = spark_registration.NAME

BUILT_IN: Final = (
    port.Engine(
        name=LOCAL_EXECUTOR,
        description="processes on this host, run by the embedded supervisor",
        sources=frozenset(local.Source),
    ),
    port.Engine(
        name=WAIT_EXECUTOR,
        description="a condition the scheduler process checks on an interval",
        sources=frozenset(waits.Source),
    ),
    sql_registration.ENGINE,
    celery_registration.ENGINE,
    container_registration.ENGINE,
    spark_registration.ENGINE,
)


@dataclass(frozen=True)
class Registry:
    """The engines this platform has, by name, and the registered ones that failed to load."""

    engines: Mapping[str, port.Engine]
    #: Why each engine whose entry point failed cannot be used, by its name.
    broken: Mapping[str, str]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.engines)


def _entry_point_engine(entry: metadata.EntryPoint) -> port.Engine:
    """The engine an entry point names; ValueError when it is no engine or another one."""
    loaded = entry.load()
    found = loaded if isinstance(loaded, port.Engine) else loaded() if callable(loaded) else None
    if not isinstance(found, port.Engine):
        raise ValueError(f"{entry.value} is not a veritask engine registration")
    if found.name != entry.name:
        raise ValueError(f"{entry.value} registers the engine {found.name!r}, not {entry.name!r}")
    return found


def _shared_sources(engine: port.Engine, others: Iterable[port.Engine]) -> str | None:
    """Why ``engine`` may not be registered beside ``others``: it declares an observation
    source another engine declares (evidence would not tell which engine answered)."""
    for other in others:
        shared = {str(source) for source in engine.sources} & {str(s) for s in other.sources}
        if shared:
            return (
                f"it declares the observation source {min(shared)!r} of the engine {other.name!r}"
            )
    return None


@functools.cache
def registry() -> Registry:
    """The built-in engines, then those the installed distributions register (read once)."""
    found = {engine.name: engine for engine in BUILT_IN}
    broken: dict[str, str] = {}
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in found:
            log.warning(
                "the engine entry point %s = %s is ignored: %r is already an engine",
                entry.name,
                entry.value,
                entry.name,
            )
            continue
        try:
            engine = _entry_point_engine(entry)
        except Exception as exc:  # a third party's import: anything may fail
            problem = f"its entry point {entry.value} failed to load ({type(exc).__name__}: {exc})"
        else:
            shared = _shared_sources(engine, found.values())
            if shared is None:
                found[entry.name] = engine
                continue
            problem = shared
        log.error("the engine %r cannot be used: %s", entry.name, problem)
        broken[entry.name] = problem
    return Registry(engines=found, broken=broken)


def missing(engine: port.Engine) -> str | None:
    """Why ``engine`` cannot run in this installation (a package it needs is absent), or None."""
    absent = [name for name in engine.packages if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    how = f": {engine.install}" if engine.install else ""
    return f"the package {', '.join(absent)} is not installed{how}"


def configured(environ: Mapping[str, str]) -> frozenset[str]:
    """The executor names a scheduler started with ``environ`` serves (no engine is built)."""
    return frozenset(
        engine.name for engine in registry().engines.values() if engine.configured(environ)
    )


def unknown_problem(name: str) -> str | None:
    """Why no task may name the executor ``name`` anywhere: no engine has it, or its
    registration failed to load (or None)."""
    found = registry()
    if name in found.engines:
        return None
    if name in found.broken:
        return problems.ENGINE_UNAVAILABLE.format(name=name, reason=found.broken[name])
    return problems.UNKNOWN_EXECUTOR.format(name=name, known=", ".join(found.names))


def executor_problem(name: str, environ: Mapping[str, str]) -> str | None:
    """Why a task may not name the executor ``name`` here, or None when it may: a name no
    engine of this platform has, an engine whose settings ``environ`` lacks, or one whose
    packages are not installed."""
    unknown = unknown_problem(name)
    if unknown is not None:
        return unknown
    engine = registry().engines[name]
    if not engine.configured(environ):
        return problems.EXECUTOR_NOT_CONFIGURED.format(
            name=name, setting=engine.setting or "its settings"
        )
    absent = missing(engine)
    if absent is not None:
        return problems.ENGINE_UNAVAILABLE.format(name=name, reason=absent)
    return None


def volume_problem(host_path: str, environ: Mapping[str, str]) -> str | None:
    """Why a task may not mount the host directory ``host_path`` here, or None when the
    operator's allow-list (``VERITASK_CONTAINER_VOLUMES``) holds it."""
    return container_registration.volume_problem(host_path, environ)


def from_environment(environ: Mapping[str, str]) -> dict[str, port.Executor]:
    """The configured engines' executors (beside ``local`` and ``wait``, which every
    scheduler builds itself); an engine whose settings are absent is not built.

    Raises ValueError for a task pass-through list that names a platform setting, and for a
    configured engine whose packages are not installed (naming what to install): the scheduler
    refuses to start rather than fail every attempt."""
    task_env.passthrough_names(environ)
    found: dict[str, port.Executor] = {}
    for engine in registry().engines.values():
        if engine.build is None or not engine.configured(environ):
            continue
        absent = missing(engine)
        if absent is not None:
            raise ValueError(f"the executor {engine.name!r} is configured, but {absent}")
        found[engine.name] = engine.build(environ)
    return found


def read_log(
    name: str, environ: Mapping[str, str], *, instance_id: str, attempt_no: int
) -> bytes | None:
    """The attempt's log as the engine ``name`` keeps it away from the attempt directory, or
    None when it keeps none (or is not configured, or not installed, here)."""
    engine = registry().engines.get(name)
    if engine is None or engine.logs is None or missing(engine) is not None:
        return None
    reader = engine.logs(environ)
    if reader is None:
        return None
    return reader.read_log(instance_id=instance_id, attempt_no=attempt_no)

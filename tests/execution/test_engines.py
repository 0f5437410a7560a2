"""The engines' registry: built-in engines, engines registered by entry points, and what a
definition may name."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from tests.execution.engine_plugins import Plugin, plugin
from veritask.execution import engines, port
from veritask.execution.celery import registration as celery_registration

__all__ = ["plugin"]


def test_each_engine_declares_its_own_observation_sources() -> None:
    declared = [str(source) for engine in engines.BUILT_IN for source in engine.sources]
    assert len(declared) == len(set(declared))
    assert engines.registry().engines["celery"].sources == frozenset(celery_registration.Source)
    assert {"exit_record", "process_table", "supervisor", "attempt_dir"} == {
        str(source) for source in engines.registry().engines["local"].sources
    }


def test_an_entry_point_engine_is_known_configured_and_built(plugin: Plugin) -> None:
    assert engines.unknown_problem(plugin.engine) is None
    assert engines.executor_problem(plugin.engine, {}) is None
    assert plugin.engine in engines.configured({})
    built = engines.from_environment({"SOME": "setting"})[plugin.engine]
    assert type(built).__name__ == "ThirdPartyExecutor"
    seen = built.describe(external_id="x")
    assert seen.engine_state is port.EngineState.NOT_FOUND
    assert seen.source in engines.registry().engines[plugin.engine].sources
    assert engines.read_log(plugin.engine, {}, instance_id="i", attempt_no=2) == (
        f"i/2 kept by {plugin.engine}\n".encode()
    )


def test_an_entry_point_that_fails_to_import_is_logged_and_refused(
    plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger=engines.__name__):
        problem = engines.executor_problem(plugin.broken, {})
    assert problem is not None
    assert problem.startswith(f"the executor {plugin.broken!r} cannot be used here")
    assert "the client library is missing" in problem
    assert any(plugin.broken in record.getMessage() for record in caplog.records)
    # The platform goes on: the built-in engines and the other entry point still work.
    assert engines.executor_problem("local", {}) is None
    assert plugin.broken not in engines.from_environment({})


def test_an_engine_declaring_another_engines_observation_source_is_refused(
    plugin: Plugin,
) -> None:
    problem = engines.unknown_problem(plugin.clashing)
    assert problem == (
        f"the executor {plugin.clashing!r} cannot be used here: it declares the observation "
        "source 'exit_record' of the engine 'local'"
    )
    assert engines.unknown_problem(plugin.engine) is None


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_scheduler_and_the_api_do_not_import_celery() -> None:
    done = _run(
        """
        import sys
        import veritask.services.runtime, veritask.api.app, veritask.cli.main
        import veritask.scheduling.__main__, veritask.ui.app, veritask.cli.processes
        import veritask.services.logs, veritask.services.log_pages, veritask.services.definitions
        import veritask.pipelines.compile
        from veritask.execution import engines
        engines.configured({}), engines.executor_problem("celery", {})
        engines.from_environment({"VERITASK_SQL_URL_W": "postgresql://127.0.0.1:1/w"})
        engines.read_log("celery", {}, instance_id="i", attempt_no=1)
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("celery", "kombu", "redis")))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_celery_asked_for_but_not_installed_names_the_extra() -> None:
    done = _run(
        """
        import sys
        sys.modules["celery"] = None  # as if the extra were not installed
        from veritask.execution import engines
        environ = {"VERITASK_CELERY_BROKER": "redis://127.0.0.1:1/0"}
        print(engines.executor_problem("celery", environ))
        try:
            engines.from_environment(environ)
        except ValueError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    refused, refused_to_start = done.stdout.splitlines()
    assert refused == (
        "the executor 'celery' cannot be used here: the package celery is not installed: "
        "pip install 'veritask[celery]'"
    )
    assert "pip install 'veritask[celery]'" in refused_to_start


def test_a_celery_worker_without_the_extra_says_what_to_install() -> None:
    done = _run(
        """
        import sys
        sys.modules["celery"] = None  # as if the extra were not installed
        from veritask.execution.celery import __main__
        """
    )
    assert done.returncode == 1
    assert "pip install 'veritask[celery]'" in done.stderr
    assert "Traceback" not in done.stderr

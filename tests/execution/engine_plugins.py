"""A distribution that registers engines through real entry points, written into a folder put
on ``sys.path``: ``importlib.metadata`` finds its ``.dist-info`` as it finds an installed one."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from veritask.execution import engines

#: A third party's engine: its executor, its registration, and a log it keeps itself.
ENGINE_MODULE = """
from enum import StrEnum

from veritask.execution import port


class Source(StrEnum):
    API = f"{NAME}_api"


class ThirdPartyExecutor:
    def __init__(self, environ):
        self.environ = dict(environ)

    def submit(self, *, spec):
        return port.Submission(external_id=f"{NAME}:{spec.instance_id}", created=True)

    def describe(self, *, external_id):
        return port.Observation(
            external_id=external_id,
            engine_state=port.EngineState.NOT_FOUND,
            source=Source.API,
        )

    def cancel(self, *, external_id):
        pass

    def cleanup(self, *, external_id):
        pass


class KeptLogs:
    def read_log(self, *, instance_id, attempt_no):
        return f"{instance_id}/{attempt_no} kept by {NAME}\\n".encode()


ENGINE = port.Engine(
    name=NAME,
    description="a third party's engine",
    build=ThirdPartyExecutor,
    logs=lambda environ: KeptLogs(),
    sources=frozenset(Source),
)
"""

#: An engine whose observations would read as the local executor's.
CLASHING_MODULE = """
from enum import StrEnum

from veritask.execution import port


class Source(StrEnum):
    EXIT = "exit_record"


ENGINE = port.Engine(name={name!r}, description="", sources=frozenset(Source))
"""


@dataclass(frozen=True)
class Plugin:
    """The names the distribution registered."""

    engine: str
    """An engine that loads."""
    broken: str
    """An engine whose module raises on import."""
    clashing: str
    """An engine that declares an observation source of the local executor."""
    module: str


def install(root: Path, entries: Mapping[str, str], modules: Mapping[str, str]) -> None:
    """Write the modules and a ``.dist-info`` declaring ``entries`` in the engines' group."""
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    dist_info = root / f"veritask_plugin_{uuid.uuid4().hex[:8]}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist_info.name.split('-')[0]}\nVersion: 1.0\n"
    )
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (dist_info / "entry_points.txt").write_text(f"[{engines.ENTRY_POINT_GROUP}]\n{lines}")


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Plugin]:
    suffix = uuid.uuid4().hex[:8]
    found = Plugin(
        engine=f"thirdparty{suffix}",
        broken=f"broken{suffix}",
        clashing=f"clashing{suffix}",
        module=f"tp_{suffix}",
    )
    root = tmp_path / "site"
    root.mkdir()
    install(
        root,
        {
            found.engine: f"{found.module}:ENGINE",
            found.broken: f"{found.module}_broken:ENGINE",
            found.clashing: f"{found.module}_clashing:ENGINE",
        },
        {
            found.module: f"NAME = {found.engine!r}\n" + ENGINE_MODULE,
            f"{found.module}_broken": "raise ImportError('the client library is missing')\n",
            f"{found.module}_clashing": CLASHING_MODULE.format(name=found.clashing),
        },
    )
    monkeypatch.syspath_prepend(str(root))
    engines.registry.cache_clear()
    try:
        yield found
    finally:
        engines.registry.cache_clear()
        for name in (found.module, f"{found.module}_broken", f"{found.module}_clashing"):
            sys.modules.pop(name, None)

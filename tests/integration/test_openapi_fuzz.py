"""Schemathesis against the OpenAPI document: no 5xx, and every answer conforms to it.

Every operation is called as each role (admin, operator, viewer) and with no token at all, so
that a refusal is as well-formed as an answer. Bounded: a few examples per operation and role
(``VERITASK_API_FUZZ_EXAMPLES``, 6 unless set; ``make fuzz`` sets more) on one SQLite database,
with a little data (a definition, a run, an attempt) so that some generated ids can hit
something.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.integration.conftest import HELLO, ServerThread, open_attempt
from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.services import definitions, runs, tokens
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole


@dataclass(frozen=True)
class Served:
    url: str
    tokens: dict[TokenRole, str]

    def headers(self, role: TokenRole | None) -> dict[str, str]:
        if role is None:
            return {}
        return {"Authorization": f"Bearer {self.tokens[role]}"}


@pytest.fixture(scope="module")
def served(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("fuzz")
    shutil.copyfile(sqlite_template, folder / "veritask.db")
    url = f"sqlite:///{folder / 'veritask.db'}"
    platform = Platform.open(url, folder)
    made = {
        role: tokens.create_token(platform, role=role, name=f"fuzz-{role}").token
        for role in TokenRole
    }
    definitions.apply_definition(platform, HELLO, actor="api")
    run_id = runs.trigger_run(platform, "hello", actor="api").run_id
    instance_id = runs.get_run(platform, run_id).instances[0].id
    open_attempt(platform, instance_id, uuid.uuid4().hex)
    app = create_app(ApiSettings(url, folder), platform=platform)
    with ServerThread(app) as server:
        yield Served(server.url, made)
    platform.close()


def _document() -> dict[str, object]:
    """The document the app serves; building it needs no database."""
    platform = Platform.open("sqlite://", Path("."))
    try:
        return create_app(ApiSettings("sqlite://", Path(".")), platform=platform).openapi()
    finally:
        platform.close()


schema = schemathesis.openapi.from_dict(_document())


EXAMPLES = int(os.environ.get("VERITASK_API_FUZZ_EXAMPLES", "6"))


@pytest.mark.parametrize("role", [*TokenRole, None], ids=[*TokenRole, "no-token"])
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_conforms_to_the_document(
    # Schemathesis's operation type has four parameters of its own; Any keeps this readable.
    case: schemathesis.Case[Any],
    served: Served,
    role: TokenRole | None,
) -> None:
    case.call_and_validate(
        base_url=served.url,
        headers=served.headers(role),
        # Schema-valid is not always valid: a definition's text, a page cursor or an event
        # time are checked beyond what the schema can say, and refused with 422.
        excluded_checks=[schemathesis.checks.positive_data_acceptance],
    )

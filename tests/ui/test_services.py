"""The service queries the UI added: change positions, the health panel, refused events."""

from __future__ import annotations

import pytest

from tests.ui.conftest import Ui
from veritask.services import activity, definitions, errors, runs, tokens


def test_the_latest_position_grows_and_is_scoped(ui: Ui) -> None:
    before = activity.latest_position(ui.platform)
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    overall = activity.latest_position(ui.platform)
    assert overall > before
    assert activity.latest_position(ui.platform, run_id=run_id) == overall
    instance = runs.get_run(ui.platform, run_id).instances[0]
    assert 0 < activity.latest_position(ui.platform, instance_id=instance.id) <= overall
    assert activity.latest_position(ui.platform, run_id="no-such-run") == 0


def test_the_panel_counts_what_waits_to_start(ui: Ui) -> None:
    quiet = activity.platform_activity(ui.platform)
    assert quiet.schedulers == ()
    assert quiet.reconciler_decisions == ()
    runs.trigger_run(ui.platform, "pipeline", actor="test")
    busy = activity.platform_activity(ui.platform)
    assert busy.instances_waiting_to_start == 0  # CREATED waits for the scheduler, not the engine
    assert busy.observed_at - busy.decisions_since == activity.DECISION_WINDOW


def test_refused_events_of_an_instance_are_read_and_unknown_ones_are_not_found(ui: Ui) -> None:
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    instance = runs.get_run(ui.platform, run_id).instances[0]
    assert runs.rejected_events(ui.platform, instance.id) == ()
    with pytest.raises(errors.NotFound):
        runs.rejected_events(ui.platform, "no-such-instance")


def test_a_version_source_and_a_missing_one(ui: Ui) -> None:
    assert definitions.version_source(ui.platform, "pipeline", 1).startswith("name: pipeline")
    with pytest.raises(errors.NotFound):
        definitions.version_source(ui.platform, "pipeline", 9)


def test_the_delete_preview_changes_nothing(ui: Ui) -> None:
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    preview = definitions.deletion_preview(ui.platform, "pipeline")
    assert preview.runs_to_cancel == (run_id,)
    assert preview.runs_kept == 1
    assert not preview.already_deleting
    assert definitions.get_definition(ui.platform, "pipeline").definition.lifecycle == "active"


def test_a_session_key_is_not_the_platform_secret(ui: Ui) -> None:
    key = tokens.session_key(ui.platform)
    secret = (ui.platform.home / "secret").read_text().strip().encode()
    assert len(key) == 32
    assert key != secret
    assert tokens.session_key(ui.platform) == key


def test_a_principal_is_found_by_its_token_id(ui: Ui) -> None:
    made = tokens.create_token(ui.platform, role=tokens.TokenRole.VIEWER, name="someone")
    found = tokens.principal_by_id(ui.platform, made.id)
    assert found is not None and found.name == "someone"
    assert tokens.principal_by_id(ui.platform, "no-such-token") is None

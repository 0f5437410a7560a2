"""Reports that come through the outbox go through the same checks as over HTTP: a report the
ledger cannot keep as sent is refused and kept as refused evidence, and the rest of its batch
(the attempt's end) is recorded; nothing poisons the batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import sqlalchemy as sa

from tests.scheduling.conftest import MakeHarness
from veritask.core.states import InstanceState, RunExecutionState
from veritask.ledger import schema

#: Written by the task itself, which holds its attempt's token: reports the worker never
#: sends, each breaking one rule, numbered past the worker's own.
FORGE = """
import json, os, sys, uuid
outbox, instance = sys.argv[1], os.environ["VERITASK_INSTANCE_ID"]
attempt = int(os.environ["VERITASK_ATTEMPT_NO"])
def post(seq, event_time, evidence):
    event = {"event_id": str(uuid.uuid4()), "instance_id": instance, "attempt_no": attempt,
             "kind": "progress", "actor": "worker", "event_time": event_time, "seq": seq,
             "attempt_token": os.environ["VERITASK_ATTEMPT_TOKEN"], "evidence": evidence}
    name = f"{instance}.{attempt}.{seq:08d}.json"
    with open(os.path.join(outbox, "." + name), "w") as f:
        f.write(json.dumps(event))
    os.rename(os.path.join(outbox, "." + name), os.path.join(outbox, name))
progress = {"phase": "load", "done": 1, "total": 2, "message": None}
post(1000, "2026-01-02T03:04:05+00:00", {**progress, "done": 2**63})
post(1001, "2026-01-02T03:04:05", progress)
post(1002, "2026-01-02T03:04:06+00:00", {**progress, "message": "a\\u0000b"})
post(1003, "2026-01-02T03:04:07+00:00", {**progress, "total": float("nan")})
"""


def test_reports_the_ledger_cannot_hold_are_refused_and_the_batch_is_recorded(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    harness = make_harness()
    script = tmp_path / "forge.py"
    script.write_text(FORGE)
    outbox = harness.home / "outbox"
    command = f"{sys.executable} {script} {outbox}"
    harness.apply(f"name: forged\ntasks:\n  work: {{run: {json.dumps(command)}}}\n")
    run_id = harness.trigger("forged")

    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    (instance,) = harness.instances(run_id).values()
    assert instance.state is InstanceState.SUCCESS
    x = schema.rejected_events.c
    with harness.engine.connect() as connection:
        kept = connection.execute(
            sa.select(x.event_time, x.payload, x.reason)
            .where(x.instance_id == instance.id)
            .order_by(x.position)
        ).all()
    by_seq = {row.payload["seq"]: row for row in kept}
    assert sorted(by_seq) == [1000, 1001, 1002, 1003]
    assert by_seq[1000].reason.startswith("evidence.done: must be between")
    assert by_seq[1001].reason.startswith("event_time: must carry its UTC offset")
    assert by_seq[1001].event_time is None
    assert by_seq[1002].reason.startswith("evidence.message: must not contain the NUL")
    assert by_seq[1003].reason.startswith("evidence.total: must be a finite number")
    assert [p.name for p in outbox.iterdir() if not p.name.startswith(".")] == []
    harness.assert_snapshots_are_folds()

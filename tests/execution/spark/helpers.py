"""Specs and looks at the master for the Spark executor's tests."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from veritask.execution import port


def spec(
    apps: Path,
    seconds: float,
    *,
    instance_id: str | None = None,
    exit_code: int = 0,
    timeout: float | None = None,
    conf: dict[str, str] | None = None,
) -> port.AttemptSpec:
    """Attempt 1 of a new instance whose task is the sleeper app: it records its start in
    ``<apps>/<instance id>.starts`` (``starts``), sleeps ``seconds`` and exits ``exit_code``."""
    instance_id = instance_id or f"spark-{uuid.uuid4().hex[:12]}"
    args = [str(starts_file(apps, instance_id)), str(seconds)]
    if exit_code:
        args.append(str(exit_code))
    return port.AttemptSpec(
        instance_id=instance_id,
        attempt_no=1,
        attempt_token=f"token-{instance_id}",
        task=port.SparkApplication(app=str(apps / "sleeper.py"), args=tuple(args), conf=conf or {}),
        callback=port.HttpCallback("http://127.0.0.1:9"),
        timeout=None if timeout is None else timedelta(seconds=timeout),
    )


def starts_file(apps: Path, instance_id: str) -> Path:
    return apps / f"{instance_id}.starts"


def starts(apps: Path, instance_id: str) -> int:
    path = starts_file(apps, instance_id)
    return path.read_text().count("started\n") if path.exists() else 0

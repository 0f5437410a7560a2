"""``/api/v2/callbacks``: what workers and task code send, with their attempt token."""

from __future__ import annotations

from fastapi import APIRouter

from veritask.api import problems, schemas
from veritask.api.security import AttemptSender, AttemptToken, PlatformDep
from veritask.core.jsontypes import JSONObject
from veritask.services import callbacks

router = APIRouter(prefix="/callbacks", tags=["callbacks"])


@router.post(
    "/events",
    response_model=schemas.CallbackAnswer,
    responses=problems.documented(404, 413, 422),
    summary="A worker's report (started, heartbeat, progress, completed, output_committed)",
)
def worker_event(
    body: schemas.WorkerEvent,
    platform: PlatformDep,
    token: AttemptToken,
    sender: AttemptSender,
) -> schemas.CallbackAnswer:
    """The ``Authorization`` header carries the attempt token, which must belong to the
    attempt the event names (401 when it belongs to none, before the body is read; 403 when
    it belongs to another). 200 with the outcome; a duplicate answers with its original
    outcome. ``stop: true`` tells the worker to stop its task."""
    payload: JSONObject = body.model_dump(mode="json")
    answer = callbacks.record_worker_report(platform, payload, attempt_token=token, sender=sender)
    return schemas.CallbackAnswer.model_validate(answer)


@router.post(
    "/commit",
    response_model=schemas.CommitAccepted,
    responses=problems.documented(404, 409, 413, 422),
    summary="May this attempt publish its output?",
)
def commit(
    body: schemas.CommitRequest,
    platform: PlatformDep,
    token: AttemptToken,
    sender: AttemptSender,
) -> schemas.CommitAccepted:
    """200 and ``output_committed`` recorded when the attempt is the current one and neither
    fenced nor stopped; 409 (``stale-attempt``) otherwise: the task must not publish."""
    accepted = callbacks.commit_output(
        platform,
        instance_id=body.instance_id,
        attempt_no=body.attempt_no,
        marker=body.marker,
        attempt_token=token,
        sender=sender,
    )
    return schemas.CommitAccepted.model_validate(accepted)

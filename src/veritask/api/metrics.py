"""``/metrics``: Prometheus text, read from the database at scrape time.

No token, like ``/healthz``: Prometheus scrapers rarely carry bearer tokens, and the answer
holds only aggregates whose labels are bounded vocabularies and definition names — never a
run, instance or attempt id, a parameter or a log line. Restrict it at the network if the
definition names themselves are confidential (docs/operations.md).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from veritask.api.security import PlatformDep
from veritask.core.errors import VeritaskError
from veritask.services import metrics

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


@router.get(
    "/metrics",
    response_class=Response,
    summary="Prometheus metrics (no token): see docs/operations.md",
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
def scrape(platform: PlatformDep) -> Response:
    try:
        # This process's own counts and the finished instances since the last pass first, so
        # that a scrape right after a run sees it.
        metrics.flush_process_counts(platform)
        metrics.observe_finished_instances(platform)
    except VeritaskError as exc:  # a busy database still gets the gauges served
        log.warning("metrics: could not bring counters up to date: %s", exc)
    return Response(generate_latest(metrics.registry(platform)), media_type=CONTENT_TYPE_LATEST)

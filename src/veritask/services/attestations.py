"""A PUBLISHED run's signed attestation, as the API and the run page read it
(ledger/attestations.py makes it; docs/integrity.md, 'Attestations')."""

from __future__ import annotations

from veritask.core import refusals
from veritask.ledger import attestations, dialects, queries
from veritask.ledger.attestations import Attestation as Attestation  # re-exported
from veritask.services.errors import NotFound
from veritask.services.platform import Platform


def of_run(platform: Platform, run_id: str) -> Attestation:
    """The run's latest attestation; ``NotFound`` naming why when there is no such run or it
    was never published."""
    with dialects.read_transaction(platform.engine) as connection:
        run = queries.get_run(connection, run_id)
        if run is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        found = attestations.latest(connection, run_id)
    if found is None:
        raise NotFound(
            refusals.NO_ATTESTATION.format(run_id=run_id, state=str(run.publication_state))
        )
    return found


def find(platform: Platform, run_id: str) -> Attestation | None:
    """The run's latest attestation, or None (the run page's section)."""
    with dialects.read_transaction(platform.engine) as connection:
        return attestations.latest(connection, run_id)

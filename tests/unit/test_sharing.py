"""The share function: which scheduler owns a run (scheduling/sharing.py, docs/scheduling.md 6).

Deterministic across processes (a stable hash, not Python's salted ``hash``), balanced within
reason, and a member that leaves moves only its own runs, each to one of the others.
"""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections import Counter

from veritask.scheduling import sharing

#: A thousand run ids, the same in every session: the test's figures are deterministic.
_IDS = random.Random(29)
RUNS = [str(uuid.UUID(int=_IDS.getrandbits(128))) for _ in range(1000)]
TWO = ["host-a:101:aaaa1111", "host-b:202:bbbb2222"]
THREE = [*TWO, "host-c:303:cccc3333"]


def _owners(members: list[str]) -> dict[str, str]:
    return {run_id: sharing.owner(run_id, members) for run_id in RUNS}


def test_the_owner_is_one_of_the_members_and_the_same_whatever_their_order() -> None:
    for run_id in RUNS[:100]:
        found = sharing.owner(run_id, THREE)
        assert found in THREE
        assert sharing.owner(run_id, list(reversed(THREE))) == found
        assert sharing.owner(run_id, [found]) == found


def test_each_members_share_agrees_with_the_owner_and_exactly_one_owns_each_run() -> None:
    shares = [sharing.Share(me, THREE) for me in THREE]
    for run_id in RUNS:
        owning = [share.me for share in shares if share.owns(run_id)]
        assert owning == [sharing.owner(run_id, THREE)]
        assert all(share.owner(run_id) == owning[0] for share in shares)


def test_the_owner_is_the_same_in_another_process() -> None:
    """Python's ``hash`` of a str differs between processes; the share must not."""
    sample = RUNS[:50]
    script = (
        "import sys; from veritask.scheduling import sharing; "
        "members = sys.argv[1].split(','); "
        "print(','.join(sharing.owner(r, members) for r in sys.argv[2].split(',')))"
    )
    printed = subprocess.run(
        [sys.executable, "-c", script, ",".join(THREE), ",".join(sample)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed.split(",") == [sharing.owner(r, THREE) for r in sample]


def test_a_thousand_runs_are_balanced_over_two_and_three_schedulers() -> None:
    for members in (TWO, THREE):
        counts = Counter(_owners(members).values())
        fair = len(RUNS) / len(members)
        assert set(counts) == set(members)
        # Each within 12% of a fair share (one binomial standard deviation is 3-4.5% of it).
        assert all(abs(n - fair) <= 0.12 * fair for n in counts.values()), counts


def test_a_scheduler_that_leaves_moves_only_its_own_runs() -> None:
    before = _owners(THREE)
    leaving = THREE[2]
    after = _owners(THREE[:2])
    moved = {run_id for run_id in RUNS if before[run_id] != after[run_id]}
    assert moved == {run_id for run_id in RUNS if before[run_id] == leaving}
    # ... and they spread over both survivors.
    assert len(Counter(after[run_id] for run_id in moved)) == 2


def test_a_scheduler_that_joins_takes_runs_only_for_itself() -> None:
    before = _owners(TWO)
    after = _owners(THREE)
    moved = [run_id for run_id in RUNS if before[run_id] != after[run_id]]
    assert all(after[run_id] == THREE[2] for run_id in moved)
    assert abs(len(moved) - len(RUNS) / 3) <= 0.15 * len(RUNS) / 3


def test_alone_a_scheduler_owns_every_run_without_hashing() -> None:
    share = sharing.Share("only")
    assert share.solo
    assert share.members == ("only",)
    assert all(share.owns(run_id) for run_id in RUNS)
    # Its own id always counts, even when its heartbeat was not read among the live ones.
    assert sharing.Share("me", ["other"]).members == ("me", "other")

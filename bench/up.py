"""What a user gets from ``veritask up``, beside ``bench.scheduler`` in the same sitting.

For each database (SQLite in a temporary home, PostgreSQL at 127.0.0.1:5432 when it answers)
this starts ``veritask up`` as a user does (its own process: the scheduler, the API and the
housekeeping together), applies the definitions with ``veritask apply``, triggers each run
with ``veritask trigger --wait --json`` and reads the result back over the API:

- **fan-out**: ``--tasks`` independent ``true`` tasks; the rate is the tasks over the time from
  the moment the CLI was started to the last instance's SUCCESS as the ledger recorded it
  (the ``observed_at`` of the event that made it SUCCESS, read from the run's history);
  ``trigger --wait`` itself polls every 0.5 s, which the user also feels (printed apart);
- **chain**: ``--chain`` tasks each after the previous one; per hop, upstream SUCCESS to
  downstream ``started``, both as the ledger recorded them (as ``bench.scheduler`` measures).

Then ``bench.scheduler`` runs in a child process with the same sizes, and the ratios of the
user path to it are printed.

    python -m bench.up
    python -m bench.up --only sqlite --tasks 1000 --chain 50
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from bench import scheduler as scheduler_bench
from bench.scheduler import _chain_yaml as chain_yaml

START_SECONDS = 60.0


@dataclass(frozen=True)
class UserFigures:
    database: str
    fanout_per_s: float
    wait_wall_s: float
    #: From the CLI's start to the run's creation (the ledger's clock).
    trigger_s: float
    hop_p50_ms: float
    hop_p99_ms: float


class Up:
    """``veritask up`` in a process of its own, and the CLI and API that talk to it."""

    def __init__(self, home: Path, database_url: str, slots: int) -> None:
        self.home = home
        examples = home / "no-examples"
        examples.mkdir(parents=True)
        self.env = {
            **os.environ,
            "VERITASK_HOME": str(home),
            "VERITASK_DATABASE_URL": database_url,
        }
        self.env.pop("VERITASK_URL", None)
        self.env.pop("VERITASK_TOKEN", None)
        self.log = open(home / "up.log", "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [_veritask(), "up", "--port", "0", "--slots", str(slots), "--examples", str(examples)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        self.api = self._connect()

    def _connect(self) -> httpx.Client:
        give_up = time.monotonic() + START_SECONDS
        url_file, token_file = self.home / "url", self.home / "token"
        while time.monotonic() < give_up:
            if self.process.poll() is not None:
                raise RuntimeError(f"veritask up exited: see {self.home / 'up.log'}")
            if url_file.exists() and token_file.exists():
                client = httpx.Client(
                    base_url=url_file.read_text().strip() + "/api/v2",
                    headers={"Authorization": f"Bearer {token_file.read_text().strip()}"},
                    timeout=60.0,
                )
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/definitions").status_code == 200:
                        return client
                client.close()
            time.sleep(0.1)
        raise TimeoutError(f"veritask up did not answer in {START_SECONDS:g}s")

    def cli(self, *arguments: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [_veritask(), *arguments],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"veritask {' '.join(arguments)}: {done.stderr or done.stdout}")
        return done.stdout

    def history(self, run_id: str) -> list[dict[str, object]]:
        events: list[dict[str, object]] = []
        after: int | None = None
        while True:
            params = {"limit": 1000} if after is None else {"limit": 1000, "after": after}
            page = self.api.get(f"/runs/{run_id}/events", params=params).raise_for_status().json()
            events += page["events"]
            after = page["next_after"]
            if after is None:
                return events

    def stop(self) -> None:
        self.api.close()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def _veritask() -> str:
    return str(Path(sys.executable).with_name("veritask"))


def _run(up: Up, yaml: str) -> tuple[str, float, float, list[dict[str, object]]]:
    """Apply, trigger and wait as a user does: the run id, the wall clock (epoch) when the
    trigger command started, how long ``trigger --wait`` took, and the run's history."""
    name = re.search(r"^name: (\S+)", yaml, re.MULTILINE)
    assert name is not None
    up.cli("apply", "-f", "-", stdin=yaml)
    started_wall = time.time()
    started = time.perf_counter()
    answer = json.loads(up.cli("trigger", name.group(1), "--wait", "--json", "--timeout", "600"))
    waited = time.perf_counter() - started
    run_id = str(answer.get("id") or answer.get("run_id"))
    if answer.get("execution_state") != "SUCCESS":
        raise RuntimeError(f"run {run_id} ended {answer.get('execution_state')}")
    return run_id, started_wall, waited, up.history(run_id)


def _when(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["observed_at"])).timestamp()


def _successes(events: list[dict[str, object]]) -> dict[str, float]:
    return {
        str(e["instance_id"]): _when(e)
        for e in events
        if e["to_state"] == "SUCCESS" and e["outcome"] == "applied" and e["instance_id"]
    }


def measure(database: str, url: str, home: Path, args: argparse.Namespace) -> UserFigures:
    up = Up(home, url, args.slots)
    try:
        _run(
            up, scheduler_bench._fanout_yaml("warmup", 20)
        )  # imports, the supervisor, the page cache
        run_id, started_wall, waited, events = _run(
            up, scheduler_bench._fanout_yaml("fanout", args.tasks)
        )
        success = _successes(events)
        if len(success) != args.tasks:
            raise RuntimeError(f"{len(success)} of {args.tasks} instances SUCCESS in {run_id}")
        per_s = args.tasks / (max(success.values()) - started_wall)
        created = up.api.get(f"/runs/{run_id}/summary").raise_for_status().json()["created_at"]
        trigger_s = datetime.fromisoformat(created).timestamp() - started_wall

        chain_id, _, _, chain_events = _run(up, chain_yaml("chain", args.chain))
        detail = up.api.get(f"/runs/{chain_id}").raise_for_status().json()
        keys = {i["id"]: i["task"] for i in detail["instances"]}
        done = {keys[i]: t for i, t in _successes(chain_events).items()}
        began = {
            keys[str(e["instance_id"])]: _when(e)
            for e in chain_events
            if e["kind"] == "started" and e["outcome"] == "applied"
        }
        ordered = sorted(done)
        hops = [began[down] - done[up_] for up_, down in itertools.pairwise(ordered)]
    finally:
        up.stop()
    return UserFigures(
        database,
        per_s,
        waited,
        trigger_s,
        statistics.median(hops) * 1000,
        scheduler_bench._percentile(hops, 0.99) * 1000,
    )


_INTERNAL = re.compile(
    r"-- (?P<db>\w+) .*?fan-out:\s+(?P<rate>[\d.]+) tasks/s.*?p50\s+(?P<p50>[\d.]+) ms",
    re.DOTALL,
)


def _internal(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """``bench.scheduler``'s fan-out rate and hop p50 per database, from its own output."""
    command = [sys.executable, "-m", "bench.scheduler", "--tasks", str(args.tasks)]
    command += ["--chain", str(args.chain), "--slots", str(args.slots)]
    if args.only:
        command += ["--only", args.only]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return {m["db"]: (float(m["rate"]), float(m["p50"])) for m in _INTERNAL.finditer(output)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.up", description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--chain", type=int, default=50)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="pairs (user path, then bench.scheduler) alternated; medians are printed",
    )
    args = parser.parse_args(argv)

    user: dict[str, list[UserFigures]] = {}
    internal: dict[str, list[tuple[float, float]]] = {}
    for round_no in range(args.rounds):
        with (
            tempfile.TemporaryDirectory(prefix="veritask-bench-up-") as tmp,
            scheduler_bench._databases(argparse.Namespace(only=args.only, dir=None)) as found,
        ):
            for database, url in found:
                measured = measure(database, url, Path(tmp) / f"home-{database}", args)
                user.setdefault(database, []).append(measured)
        for database, pair in _internal(args).items():
            internal.setdefault(database, []).append(pair)
        print(f"round {round_no + 1} of {args.rounds} done", file=sys.stderr)

    print(f"veritask up, as a user drives it: {args.tasks} fan-out tasks, a chain of ", end="")
    print(f"{args.chain}, {args.slots} slots, `true` everywhere; beside bench.scheduler, ", end="")
    print(f"{args.rounds} alternated pairs (medians)")
    for database, figures in user.items():
        rates = [f.fanout_per_s for f in figures]
        hops = [f.hop_p50_ms for f in figures]
        theirs = internal.get(database, [])
        rate = statistics.median(r for r, _ in theirs) if theirs else float("nan")
        p50 = statistics.median(h for _, h in theirs) if theirs else float("nan")
        mine = statistics.median(rates)
        print(f"-- {database}")
        print(
            f"  fan-out: user path {mine:7.1f} tasks/s ({_spread(rates)}), bench.scheduler "
            f"{rate:7.1f} tasks/s ({_spread([r for r, _ in theirs])}): x{mine / rate:.2f}   "
            "(target >= x0.90)"
        )
        waited = statistics.median(f.wait_wall_s for f in figures)
        created = statistics.median(f.trigger_s for f in figures)
        print(
            f"    `trigger --wait` returned after {waited:.2f} s; the run existed "
            f"{created:.2f} s after the CLI started"
        )
        print(
            f"  chain hop p50: user path {statistics.median(hops):6.1f} ms ({_spread(hops)}), "
            f"bench.scheduler {p50:6.1f} ms   (target p50 <= 10 ms on SQLite)"
        )
    return 0


def _spread(values: Sequence[float]) -> str:
    return "–".join(f"{v:.1f}" for v in (min(values), max(values))) if values else "none"


if __name__ == "__main__":
    raise SystemExit(main())

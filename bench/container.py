"""The container executor's attempts per second beside bare ``podman run --rm <image> true``:
``make bench`` (never a test).

Starts ``podman system service`` on a socket in a temporary directory, makes a tiny image of
busybox-static, then runs ``--count`` attempts one after the other through the executor
(submit, wait for the engine's end as ``describe`` shows it, cleanup; the watcher reports into
an outbox folder) and the same count of bare ``podman run --rm`` in the same run. Prints both
rates and the ratio; the target is at least 0.8 of bare.

    python -m bench.container
    python -m bench.container --count 50
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

from veritask.execution import port
from veritask.execution.container import engine

TARGET_RATIO = 0.8
IMAGE = "veritask-bench-busybox"


def _image(podman: str, work: Path) -> None:
    busybox = shutil.which("busybox")
    if busybox is None:
        sys.exit("busybox (busybox-static) is needed for the bench image")
    root = work / "image"
    (root / "bin").mkdir(parents=True)
    shutil.copy(busybox, root / "bin" / "busybox")
    for applet in ("sh", "true"):
        (root / "bin" / applet).symlink_to("busybox")
    with tarfile.open(work / "image.tar", "w") as tar:
        tar.add(root, arcname=".")
    subprocess.run(
        [podman, "import", str(work / "image.tar"), IMAGE], check=True, capture_output=True
    )


def _serve(podman: str, socket: Path) -> subprocess.Popen[bytes]:
    service = subprocess.Popen(
        [podman, "system", "service", "--time=0", f"unix://{socket}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if socket.exists():
            try:
                with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket))) as http:
                    if http.get("http://engine/_ping").status_code == 200:
                        return service
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    service.kill()
    sys.exit("podman system service did not start")


def _through_veritask(host: str, work: Path, count: int) -> float:
    executor = engine.ContainerExecutor(host=host)
    outbox = work / "outbox"
    outbox.mkdir()
    began = time.perf_counter()
    try:
        for number in range(count):
            spec = port.AttemptSpec(
                instance_id=f"bench-{number}",
                attempt_no=1,
                attempt_token=f"token-{number}",
                task=port.ContainerRun(image=IMAGE, command=("true",), pull=port.Pull.NEVER),
                callback=port.OutboxCallback(outbox),
            )
            external_id = executor.submit(spec=spec).external_id
            while not executor.describe(external_id=external_id).ended:
                time.sleep(0.01)
            executor.cleanup(external_id=external_id)
        return time.perf_counter() - began
    finally:
        executor.wait_for_watchers(10)
        executor.close()


def _bare(podman: str, count: int) -> float:
    began = time.perf_counter()
    for _ in range(count):
        subprocess.run([podman, "run", "--rm", IMAGE, "true"], check=True, capture_output=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=30)
    args = parser.parse_args()
    podman = shutil.which("podman")
    if podman is None:
        sys.exit("podman is not installed")
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        _image(podman, work)
        service = _serve(podman, work / "podman.sock")
        try:
            veritask = _through_veritask(f"unix://{work / 'podman.sock'}", work, args.count)
            bare = _bare(podman, args.count)
        finally:
            service.terminate()
            service.wait(timeout=30)
            subprocess.run([podman, "rmi", "--force", IMAGE], capture_output=True, check=False)
    ours, theirs = args.count / veritask, args.count / bare
    ratio = ours / theirs
    print(f"container executor: {args.count} attempts in {veritask:.2f} s ({ours:.2f}/s)")
    print(f"podman run --rm:    {args.count} runs in {bare:.2f} s ({theirs:.2f}/s)")
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    print(f"ratio {ratio:.2f} of bare ({verdict} the target of {TARGET_RATIO})")


if __name__ == "__main__":
    main()

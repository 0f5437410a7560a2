"""A Podman that serves the Docker Engine API for the container engine's tests.

Nothing is installed here: ``podman`` must be on the PATH (``.ci/run``'s ``install_podman``).
The session starts ``podman system service`` on a socket in a temporary directory and builds a
tiny image (busybox-static and its links) once. Without podman the tests are skipped, unless
``VERITASK_REQUIRE_SERVICES=1``: then they fail.
"""

from __future__ import annotations

import os
import shutil
import socket as socket_module
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from veritask.execution.container import engine

IMAGE = "veritask-test-busybox"
_CONF = Path("/etc/containers/containers.conf")
_APPLETS = ("sh", "sleep", "echo", "cat", "trap", "true", "false", "head", "dd", "env", "tr", "ls")


def _answers(path: Path) -> bool:
    """Whether the service answers a ping on its socket (a raw connection first: a refused
    one is closed here, not left to the garbage collector)."""
    if not path.exists():
        return False
    with socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(path))) as http:
        return http.get("http://engine/_ping").status_code == 200


def _unavailable(message: str) -> None:
    if os.environ.get("VERITASK_REQUIRE_SERVICES") == "1":
        pytest.fail(f"VERITASK_REQUIRE_SERVICES=1 and {message}", pytrace=False)
    pytest.skip(message)


def _configure() -> None:
    """runc instead of crun (crun refuses a hybrid cgroup layout), and default ulimits no
    higher than the host's; written only as root and only when the file lacks them."""
    if os.geteuid() != 0:
        return
    text = _CONF.read_text() if _CONF.exists() else ""
    if "runtime" in text and "default_ulimits" in text:
        return
    if "[containers]" in text or "[engine]" in text:
        return  # a configuration of its own: leave it to its owner
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    _CONF.parent.mkdir(parents=True, exist_ok=True)
    with _CONF.open("a") as out:
        out.write(
            f'[containers]\ndefault_ulimits = ["nofile={hard}:{hard}", "nproc=32768:32768"]\n'
            '[engine]\nruntime = "runc"\n'
        )


def _build_image(podman: str, work: Path) -> None:
    busybox = shutil.which("busybox")
    if busybox is None:
        _unavailable("busybox (busybox-static) is not installed: the test image needs it")
        return
    root = work / "image"
    (root / "bin").mkdir(parents=True)
    shutil.copy(busybox, root / "bin" / "busybox")
    for applet in _APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    archive = work / "image.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    subprocess.run(
        [podman, "import", str(archive), IMAGE], check=True, capture_output=True, timeout=120
    )


def _remove_test_containers(podman: str) -> None:
    """The containers the tests made (of the test image, with Veritask's labels): each run
    leaves none behind in the host's storage."""
    listed = subprocess.run(
        [
            podman,
            "ps",
            "--all",
            "--quiet",
            "--filter",
            f"label={engine.LABEL_INSTANCE}",
            "--filter",
            f"ancestor=localhost/{IMAGE}:latest",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ids = listed.stdout.split()
    if ids:
        subprocess.run([podman, "rm", "--force", *ids], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def container_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``unix://<socket>`` of a Podman service started for the session, with the test image."""
    podman = shutil.which("podman")
    if podman is None:
        _unavailable("podman is not installed")
        return
    _configure()
    work = tmp_path_factory.mktemp("podman")
    socket = work / "podman.sock"
    host = f"unix://{socket}"
    with (work / "service.log").open("wb") as service_log:
        # In its own folder: conmon (Podman 4.3 here) writes its out-of-memory marker, a
        # file named ``oom``, into the service's working directory.
        service = subprocess.Popen(
            [podman, "system", "service", "--time=0", host],
            stdout=subprocess.DEVNULL,
            stderr=service_log,
            cwd=work,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if _answers(socket):
                break
            if service.poll() is not None or time.monotonic() > deadline:
                log = (work / "service.log").read_text(errors="replace")[-2000:]
                _unavailable(f"podman system service did not start: {log}")
            time.sleep(0.05)
        _build_image(podman, work)
        yield host
        _remove_test_containers(podman)
    finally:
        service.terminate()
        try:
            service.wait(timeout=10)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


@pytest.fixture
def container_executor(container_host: str, tmp_path: Path) -> Iterator[engine.ContainerExecutor]:
    executor = engine.ContainerExecutor(host=container_host, log_dir=tmp_path / "container-logs")
    yield executor
    executor.close()

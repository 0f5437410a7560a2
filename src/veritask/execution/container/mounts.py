"""What a container mounts: the host directories of its task's ``volumes:`` (only under the
operator's allow-list) and its ``secret_files`` (on a tmpfs of the scheduler's host).

A secret file's value is never in the image, the container's configuration (its ``Env``, its
labels, the create request), an event or a log line of ours: the executor writes it into a
directory of its own for the attempt, ``<secret dir>/<container name>/files``, and the engine
binds that directory read-only at ``/run/secrets``. The engine's inspection shows the
directory's path, never what it holds. The directory is removed once the container ended.

Why not a tmpfs of the engine's (``HostConfig.Tmpfs``) filled by the archive API before the
start: the engine writes an archive into the container's own layer on disk (the tmpfs is
mounted only at the start; Podman then copies the layer's files into it), so the value would
outlive the attempt in the engine's storage.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from veritask.execution import errors, port
from veritask.execution.container import registration

#: Where a task's secret files are in its container.
SECRET_FILES_DIR: Final = "/run/secrets"


def binds(task: port.ContainerRun, *, allowed: Sequence[str], local_engine: bool) -> list[str]:
    """The ``HostConfig.Binds`` of the task's volumes; ``ExecutorError`` (for good) for one
    that the allow-list of this process's environment does not hold. On an engine of this
    host, a path whose real path (its symbolic links followed) leaves the allow-list is
    refused too."""
    found: list[str] = []
    for volume in task.volumes:
        host = posixpath.normpath(volume.host)
        outside = not registration.under(host, tuple(allowed)) or (
            local_engine
            and not registration.under(
                os.path.realpath(host), tuple(os.path.realpath(top) for top in allowed)
            )
        )
        if outside:
            listed = ", ".join(allowed) or "nothing"
            raise errors.ExecutorError(
                f"the volume {volume.host}:{volume.container} is refused: "
                f"{registration.VOLUMES_ENV} of this scheduler allows {listed}",
                retryable=False,
            )
        found.append(f"{host}:{volume.container}:{'ro' if volume.read_only else 'rw'}")
    return found


class SecretFiles:
    """Each attempt's secret files in a directory of its own under ``root``: ``root`` and the
    attempt's directory are the owner's alone (0700); the files are readable (0444) in a
    readable directory (0755) so that a task running as any user of its image reads them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, name: str, values: Mapping[str, str]) -> str:
        """Write the files of the container ``name``; the bind that mounts them."""
        attempt = self.root / name
        files = attempt / "files"
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)
            attempt.mkdir(mode=0o700, exist_ok=True)
            files.mkdir(mode=0o755, exist_ok=True)
            for file_name, value in values.items():
                target = files / file_name
                partial = files / f".{file_name}.partial"
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(value)
                os.chmod(partial, 0o444)
                os.replace(partial, target)
        except OSError as exc:
            raise errors.ExecutorError(
                f"the secret files of {name} could not be written under {self.root}: "
                f"{exc.strerror}",
                retryable=False,
            ) from None
        return f"{files}:{SECRET_FILES_DIR}:ro"

    def remove(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

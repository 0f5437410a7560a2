"""Secrets a task's environment refers to, looked up by the worker when an attempt starts.

A definition names a secret (``env: {PGPASSWORD: {secret: warehouse_password}}``) and never
holds its value: the spec the scheduler writes carries the name only, and the worker asks its
providers for the value just before it starts the task, in its own process, on its own host.

Providers are asked in order; the first that knows the name answers:

1. the worker's environment: ``VERITASK_SECRET_<NAME>`` (the name upper-cased);
2. the file named by ``VERITASK_SECRETS_FILE``: a JSON object of names to string values,
   refused unless only its owner may read it (mode 0600 or 0400);
3. the provider that ``VERITASK_SECRETS_PROVIDER=module:factory`` makes: ``factory(environ=…)``
   returns any object with ``lookup(*, name)`` (:class:`SecretProvider`), e.g. one that asks
   Vault or a cloud secret manager.

A value's bytes are masked in the attempt's log (``task_process.LogSink.mask``).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

ENV_PREFIX = "VERITASK_SECRET_"
FILE_ENV = "VERITASK_SECRETS_FILE"
PROVIDER_ENV = "VERITASK_SECRETS_PROVIDER"
#: What a reference in a setting looks like (``VERITASK_SQL_URL_<NAME>=secret:<name>``).
REFERENCE_PREFIX = "secret:"


class SecretError(Exception):
    """A secret could not be had: unknown, or its provider refused. The message names the
    secret or the provider's setting, never a value."""


class SecretProvider(Protocol):
    """A place that holds secrets by name."""

    def lookup(self, *, name: str) -> str | None:
        """The value of the secret ``name``; None when this provider does not hold it.
        Raises :class:`SecretError` when the provider cannot answer at all."""
        ...

    def describe(self) -> str:
        """Where this provider looks, for an error message (never a value)."""
        ...


class EnvironmentSecrets:
    """``VERITASK_SECRET_<NAME>`` in the worker's own environment."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def lookup(self, *, name: str) -> str | None:
        return self._environ.get(ENV_PREFIX + name.upper())

    def describe(self) -> str:
        return f"the environment ({ENV_PREFIX}<NAME>)"


class FileSecrets:
    """A JSON object of names to string values, in a file only its owner may read."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lookup(self, *, name: str) -> str | None:
        return self._read().get(name)

    def describe(self) -> str:
        return f"the secrets file {self.path}"

    def _read(self) -> dict[str, str]:
        # Read on every lookup of an attempt's start: a rotated secret is taken at once.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            message = f"cannot read the secrets file {self.path} ({FILE_ENV}): {exc.strerror}"
            raise SecretError(message) from None
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise SecretError(f"the secrets file {self.path} ({FILE_ENV}) is not a file")
            if mode & 0o077:
                raise SecretError(
                    f"the secrets file {self.path} ({FILE_ENV}) has mode "
                    f"{stat.S_IMODE(mode):04o}: it must be readable by its owner only "
                    "(chmod 600)"
                )
            raw = handle.read()
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SecretError(
                f"the secrets file {self.path} is not a JSON object: {exc.__class__.__name__}"
            ) from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise SecretError(
                f"the secrets file {self.path} must hold one JSON object of names to strings"
            )
        return data


def providers_from_environment(environ: Mapping[str, str]) -> list[SecretProvider]:
    """The providers the environment configures, in the order they are asked."""
    found: list[SecretProvider] = [EnvironmentSecrets(environ)]
    path = environ.get(FILE_ENV)
    if path:
        found.append(FileSecrets(Path(path)))
    target = environ.get(PROVIDER_ENV)
    if target:
        found.append(_added_provider(target, tuple(sorted(environ.items()))))
    return found


@functools.lru_cache(maxsize=4)
def _added_provider(target: str, environ: tuple[tuple[str, str], ...]) -> SecretProvider:
    """The provider ``module:factory`` makes, once per process and environment: a provider
    that logs in somewhere (Vault) does it once, not at every attempt."""
    module_name, sep, factory_name = target.partition(":")
    if not sep or not module_name or not factory_name:
        raise SecretError(f"{PROVIDER_ENV} must be 'module:factory', not {target!r}")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
        provider: SecretProvider = factory(environ=dict(environ))
    except SecretError:
        raise
    except Exception as exc:
        message = f"{PROVIDER_ENV}={target}: could not make the provider: {exc!r}"
        raise SecretError(message) from exc
    return provider


def resolve(names: Mapping[str, str], *, providers: Sequence[SecretProvider]) -> dict[str, str]:
    """``{variable: value}`` for ``{variable: secret name}``; raises :class:`SecretError`
    naming the first secret no provider holds."""
    values: dict[str, str] = {}
    for variable, name in names.items():
        values[variable] = lookup(name, providers=providers)
    return values


def lookup(name: str, *, providers: Sequence[SecretProvider]) -> str:
    for provider in providers:
        value = provider.lookup(name=name)
        if value is not None:
            return value
    where = "; ".join(provider.describe() for provider in providers)
    raise SecretError(f"unknown secret {name!r}: no secret provider holds it (asked: {where})")


def reference(setting: str) -> str | None:
    """The secret's name when a setting's value is a reference (``secret:<name>``)."""
    if setting.startswith(REFERENCE_PREFIX):
        return setting.removeprefix(REFERENCE_PREFIX).strip()
    return None

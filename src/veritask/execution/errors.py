"""Errors of the execution layer. Whether to try again is a field, never a message match."""

from __future__ import annotations

from veritask.core.errors import VeritaskError


class ExecutorError(VeritaskError):
    """The execution engine could not do what was asked."""

    def __init__(self, message: str | None = None, *, retryable: bool = False) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        #: Whether the same call may succeed later (the engine was busy or unreachable).
        self.retryable = retryable


class AttemptNotFound(ExecutorError):
    """The engine holds no attempt with this external id."""

    def __init__(self, external_id: str) -> None:
        super().__init__(f"no attempt {external_id!r} on this engine", retryable=False)
        self.external_id = external_id


class SupervisorUnavailable(ExecutorError):
    """The local supervisor could not be started or reached."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)

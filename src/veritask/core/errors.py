"""The root of Veritask's errors and the core's own."""

from __future__ import annotations


class VeritaskError(Exception):
    """Something went wrong in Veritask."""

    #: Whether trying the same thing again may succeed; callers read this, never the message.
    retryable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class InvalidPolicy(VeritaskError, ValueError):
    """A policy value is out of range; the message names the field."""


class IllegalTransition(VeritaskError):
    """The fold produced an edge that the transition table does not hold."""

    def __init__(self, source: str, target: str, cause: str) -> None:
        super().__init__(f"illegal transition {source} -> {target} caused by {cause}")
        self.source = source
        self.target = target
        self.cause = cause

"""Errors of the game-session service, all under `GameSessionError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(GameSessionError, NotFoundError)`.
"""

from services.common.errors import FailedPreconditionError, ServiceError


class GameSessionError(ServiceError):
    """Root of the game-session service's errors."""


class RunNotErasableError(GameSessionError, FailedPreconditionError):
    """A load-test run's tables may not be erased yet, or not at all: one is in play, owes a
    delivery, or seated a player outside the run (`erasure`)."""

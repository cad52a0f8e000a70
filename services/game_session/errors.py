"""Errors of the game-session service, all under `GameSessionError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(GameSessionError, NotFoundError)`.
"""

from services.common.errors import ServiceError


class GameSessionError(ServiceError):
    """Root of the game-session service's errors."""

"""Errors of the matchmaking service, all under `MatchmakingError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(MatchmakingError, NotFoundError)`.
"""

from services.common.errors import ServiceError


class MatchmakingError(ServiceError):
    """Root of the matchmaking service's errors."""

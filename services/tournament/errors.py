"""Errors of the tournament service, all under `TournamentError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(TournamentError, NotFoundError)`.
"""

from services.common.errors import ServiceError


class TournamentError(ServiceError):
    """Root of the tournament service's errors."""

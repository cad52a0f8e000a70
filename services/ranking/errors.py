"""Errors of the ranking service, all under `RankingError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(RankingError, NotFoundError)`.
"""

from services.common.errors import ServiceError


class RankingError(ServiceError):
    """Root of the ranking service's errors."""

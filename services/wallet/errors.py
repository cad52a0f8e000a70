"""Errors of the wallet service, all under `WalletError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(WalletError, NotFoundError)`.
"""

from services.common.errors import ServiceError


class WalletError(ServiceError):
    """Root of the wallet service's errors."""

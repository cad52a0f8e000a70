"""Errors of the wallet service, all under `WalletError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets.
"""

from services.common.errors import (
    AlreadyExistsError,
    ConflictError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ServiceError,
)


class WalletError(ServiceError):
    """Root of the wallet service's errors."""


class AccountNotFoundError(WalletError, NotFoundError):
    """No such account (or no pot for that match or tournament)."""


class AccountExistsError(WalletError, AlreadyExistsError):
    """CreateAccount for a player whose account is open already."""


class InsufficientChipsError(WalletError, FailedPreconditionError):
    """A player cannot cover a stake or a debit; the message names them."""


class PotClosedError(WalletError, FailedPreconditionError):
    """The pot was settled or voided already."""


class HoldStateError(WalletError, FailedPreconditionError):
    """The request does not match the pot's live holds (a player without a stake, a stake twice)."""


class GrantRefusedError(WalletError, FailedPreconditionError):
    """A once-only grant was given already, or the daily bonus is not configured."""


class WrongAccountKindError(WalletError, FailedPreconditionError):
    """The operation does not apply to this kind of account."""


class BadRequestError(WalletError, InvalidArgumentError):
    """A request field is wrong in a way only the wallet knows (names the field)."""


class TooMuchContentionError(WalletError, ConflictError):
    """The transaction kept losing to concurrent ones (deadlocks, serialisation); retry the call
    with the same request id."""


class ErasureRefusedError(WalletError, FailedPreconditionError):
    """A load-test run cannot be erased now: part of it is still in progress, or it shares
    transfers with accounts outside it (the message says what and how many)."""

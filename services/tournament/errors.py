"""Errors of the tournament service, all under `TournamentError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(TournamentError, NotFoundError)`.
"""

from services.common.errors import (
    AlreadyExistsError,
    ConflictError,
    FailedPreconditionError,
    NotFoundError,
    ServiceError,
    UnavailableError,
)


class TournamentError(ServiceError):
    """Root of the tournament service's errors."""


class TournamentNotFoundError(TournamentError, NotFoundError):
    """No such tournament (or entrant, or match)."""


class TournamentExistsError(TournamentError, AlreadyExistsError):
    """A tournament with that id exists already."""


class RegistrationError(TournamentError, FailedPreconditionError):
    """Registration is closed, full, or the caller's registration does not allow this."""


class TournamentStateError(TournamentError, FailedPreconditionError):
    """The tournament's state does not allow this (cancelled, finished, ...)."""


class InsufficientChipsError(TournamentError, FailedPreconditionError):
    """The wallet refused the buy-in hold (its message says why)."""


class ResultError(TournamentError, FailedPreconditionError):
    """A reported result does not fit the match it is about."""


class BusyError(TournamentError, ConflictError):
    """Another change to the same registration is under way; retry with the same request id."""


class PendingError(TournamentError, UnavailableError):
    """A call to another service did not answer; retry with the same request id."""

"""Errors of the matchmaking service, all under `MatchmakingError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets,
for example `class SomethingMissingError(MatchmakingError, NotFoundError)`.
"""

from services.common.errors import (
    ConflictError,
    FailedPreconditionError,
    NotFoundError,
    PermissionDeniedError,
    ServiceError,
    UnavailableError,
)


class MatchmakingError(ServiceError):
    """Root of the matchmaking service's errors."""


class TicketNotFoundError(MatchmakingError, NotFoundError):
    """No such ticket, or not one the caller may see."""


class PartyNotFoundError(MatchmakingError, NotFoundError):
    """No such party, or not one the caller may see."""


class LobbyTableNotFoundError(MatchmakingError, NotFoundError):
    """No such lobby table, or a private one the caller may not see."""


class IneligibleError(MatchmakingError, FailedPreconditionError):
    """A player may not play this table: not registered, or not enough chips for the bet."""


class StateError(MatchmakingError, FailedPreconditionError):
    """The ticket, party or table is not in a state that allows the call."""


class NotAllowedError(MatchmakingError, PermissionDeniedError):
    """Only the party's leader or the table's chief may do this."""


class DependencyUnavailableError(MatchmakingError, UnavailableError):
    """The wallet or ranking did not answer: retry the call with the same request id."""


class ErasureConflictError(MatchmakingError, ConflictError):
    """A record of a load-test run changed while it was being erased (nothing was): retry."""

"""Errors of the ranking service, all under `RankingError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets:

    RankingError
    ├── MatchConflictError       ALREADY_EXISTS  a match id recorded before with other content
    └── NotOnLeaderboardError    NOT_FOUND       the player has no entry on that leaderboard
"""

from services.common.errors import AlreadyExistsError, NotFoundError, ServiceError


class RankingError(ServiceError):
    """Root of the ranking service's errors."""


class MatchConflictError(RankingError, AlreadyExistsError):
    def __init__(self, match_id: str) -> None:
        super().__init__(f"match_id: {match_id!r} was already recorded with different content")
        self.match_id = match_id


class NotOnLeaderboardError(RankingError, NotFoundError):
    def __init__(self, player: str) -> None:
        super().__init__(f"player: players/{player} has no entry on this leaderboard")
        self.player = player

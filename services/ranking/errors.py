"""Errors of the ranking service, all under `RankingError`.

Each concrete error also derives from the `services.common.errors` class whose status it gets:

    RankingError
    ├── MatchConflictError       ALREADY_EXISTS  a match id recorded before with other content
    ├── NotOnLeaderboardError    NOT_FOUND       the player has no entry on that leaderboard
    └── RunNotErasableError      FAILED_PRECONDITION  a load-test run shares matches with other
                                                  players, or is still being recorded
"""

from services.common.errors import AlreadyExistsError, FailedPreconditionError, NotFoundError, ServiceError


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


class RunNotErasableError(RankingError, FailedPreconditionError):
    """EraseLoadTestRun refused, nothing erased; the message says what blocks it and how many."""

    def __init__(self, run_id: str, problem: str) -> None:
        super().__init__(f"run_id: load-test run {run_id!r} cannot be erased: {problem}")
        self.run_id = run_id

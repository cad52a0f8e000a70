"""A finished match as the ranking service records it (what RecordMatch brings), and what
recording it gave each player (what RecordMatch answers, stored with the match so that a repeated
call gets the same answer). Plain data, no database; docs/ranking.md has the rules the properties
below apply (who earns, who is rated).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from services.ranking.progress import Outcome
from services.ranking.ratings import RatingView

# -- what comes in ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeatResult:
    """One human player of a finished match."""

    player: str
    seat: int
    outcome: Outcome
    #: The side's final match score.
    score: int
    canastras: int
    #: Seats with the same group number came from the same address; None: address unknown.
    address_group: int | None = None

    @property
    def side(self) -> int:
        return self.seat % 2


@dataclass(frozen=True)
class FinishedMatch:
    match_id: str
    preset: str
    players: int
    express: bool
    competitive: bool
    annulled: bool
    end_time: datetime
    seats: tuple[SeatResult, ...]
    #: SHA-256 of the request as the caller sent it (without request id and addresses).
    content_hash: str

    # What follows depends on the fields alone (the instance is frozen): each is computed once.

    @cached_property
    def shared_address(self) -> bool:
        groups = [s.address_group for s in self.seats if s.address_group is not None]
        return len(groups) != len(set(groups))

    @cached_property
    def awards(self) -> bool:
        """XP, ratings and leaderboard points: competitive, not annulled, no shared address."""
        return self.competitive and not self.annulled and not self.shared_address

    @cached_property
    def winning_side(self) -> int | None:
        """The side that won, from the outcomes of the players who stayed; None if nobody did."""
        for seat in self.seats:
            if seat.outcome is Outcome.WON:
                return seat.side
            if seat.outcome is Outcome.LOST:
                return 1 - seat.side
        return None

    @cached_property
    def rated(self) -> bool:
        """Ratings move only when the match awards, every seat was a human and a side won."""
        return self.awards and len(self.seats) == self.players and self.winning_side is not None



# -- what goes out ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlayerAward:
    player: str
    xp_gained: int
    xp_total: int
    level: int
    level_up: bool
    rating_before: RatingView | None = None
    rating_after: RatingView | None = None


@dataclass(frozen=True)
class MatchRecorded:
    results: tuple[PlayerAward, ...]
    rated: bool

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "rated": self.rated,
                "results": [
                    {
                        "player": r.player,
                        "xp_gained": r.xp_gained,
                        "xp_total": r.xp_total,
                        "level": r.level,
                        "level_up": r.level_up,
                        "rating_before": r.rating_before.to_json() if r.rating_before else None,
                        "rating_after": r.rating_after.to_json() if r.rating_after else None,
                    }
                    for r in self.results
                ],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def from_json(raw: bytes) -> MatchRecorded:
        data = json.loads(raw)
        return MatchRecorded(
            rated=data["rated"],
            results=tuple(
                PlayerAward(
                    player=r["player"],
                    xp_gained=r["xp_gained"],
                    xp_total=r["xp_total"],
                    level=r["level"],
                    level_up=r["level_up"],
                    rating_before=RatingView.from_json(r["rating_before"]) if r["rating_before"] else None,
                    rating_after=RatingView.from_json(r["rating_after"]) if r["rating_after"] else None,
                )
                for r in data["results"]
            ),
        )

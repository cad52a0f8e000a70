"""What the tournament service needs from the other services, without grpc: the wallet (buy-ins,
refunds, prizes), ranking (ratings for seeding) and game sessions (tables). `remote.py` implements
it over gRPC; tests may substitute anything with the same methods.

Every call that changes something carries a request id derived from the tournament's durable
state (docs/tournaments.md, "Calls to other services"), so a retry after a crash or a lost answer
is applied once. A call either succeeds, or raises
- `Refused`: the other service answered with a definitive error (its code and message), or
- `Unreachable`: no answer, or a transient one (unavailable, deadline, aborted, overloaded):
  the outcome is unknown, and the caller retries later with the same request id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.client.calls import CallError as CallError
from services.client.calls import Refused as Refused
from services.client.calls import Unreachable as Unreachable


@dataclass(frozen=True)
class PrizeShare:
    player: str
    place: int
    share_bp: int


@dataclass(frozen=True)
class Payout:
    """What the wallet paid: the pool, its house cut and each player's prize."""

    pool_chips: int
    house_cut_chips: int
    prizes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class TableSeat:
    player: str
    connected: bool


@dataclass(frozen=True)
class TableState:
    """A game-session table as the tournament reads it."""

    name: str
    #: "waiting", "playing", "finished" or "cancelled".
    state: str
    seats: tuple[TableSeat, ...]
    #: Match score per side (side 0: seats 0 and 2).
    scores: tuple[int, ...]


class Services(Protocol):
    async def hold_buy_in(self, request_id: str, tournament: str, player: str, chips: int, ttl_seconds: int) -> None:
        """Holds `chips` of `player` in the tournament's escrow."""

    async def release_buy_in(self, request_id: str, tournament: str, player: str, reason: str) -> None:
        """Releases one player's hold; the pot stays open."""

    async def refund_all(self, request_id: str, tournament: str, reason: str) -> None:
        """Releases every hold of the tournament and closes its pot."""

    async def pay_prizes(self, request_id: str, tournament: str, shares: Sequence[PrizeShare]) -> Payout:
        """Posts every buy-in and pays the prizes less the house cut."""

    async def ratings(self, players: Sequence[str], preset: str, seats: int) -> dict[str, float]:
        """Each player's rating (the displayed, conservative estimate) for the modality."""

    async def create_table(
        self,
        request_id: str,
        table_id: str,
        match_id: str,
        options: bytes,
        seats: Sequence[str],
        tournament: str,
    ) -> TableState:
        """Creates a tournament table with these players in seat order."""

    async def get_table(self, table: str) -> TableState:
        """Reads a table (`tables/{table}`)."""

    async def cancel_table(self, request_id: str, table: str, reason: str) -> None:
        """Cancels a table whose match has not started."""

"""What matchmaking needs from the other services, without grpc: the wallet (eligibility, holds,
releases), ranking (ratings) and game sessions (tables). `remote.py` implements it over gRPC;
tests wrap it to inject faults.

Every call that changes something carries a request id derived from durable state (the saga id,
which is the match id), so a retry after a crash or a lost answer is applied once. A call either
succeeds or raises
- `Refused`: a definitive answer (its code and message): retrying would get it again;
- `Unreachable`: no answer, or a transient one: the outcome is unknown; retry with the same id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from services.client.calls import CallError as CallError
from services.client.calls import Refused as Refused
from services.client.calls import Unreachable as Unreachable


@dataclass(frozen=True)
class Account:
    """A player's wallet account as eligibility reads it."""

    player: str
    #: Posted balance less the chips held.
    available_chips: int


@dataclass(frozen=True)
class SeatSpec:
    """Who sits at a seat of a new game table: a player id, or a bot level (1..3)."""

    player: str | None = None
    bot: int = 0


@dataclass(frozen=True)
class GameTable:
    #: `tables/{table}`.
    name: str
    #: `host:port` of the replica that owns it.
    owner_address: str
    match_id: str
    #: "waiting", "playing", "finished", "cancelled" or "unknown".
    state: str


class Platform(Protocol):
    async def account(self, player: str) -> Account | None:
        """The player's wallet account; None when the player has none (not registered)."""

    async def ratings(self, players: Sequence[str], preset: str, seats: int) -> dict[str, float]:
        """Each player's displayed rating (the conservative estimate) for the modality."""

    async def hold_bets(
        self, request_id: str, match_id: str, stakes: Sequence[tuple[str, int]], ttl_seconds: int
    ) -> None:
        """Holds every (player, chips) stake in the match's escrow: all or none."""

    async def void_pot(self, request_id: str, match_id: str, reason: str) -> None:
        """Releases every hold of the match (a match without holds is fine)."""

    async def create_table(
        self,
        request_id: str,
        table_id: str,
        match_id: str,
        options: bytes,
        seats: Sequence[SeatSpec],
        lobby_table: str | None,
    ) -> GameTable:
        """Creates the game table (idempotent on `request_id`)."""

    async def get_table(self, table: str) -> GameTable:
        """Reads a game table (`tables/{table}`), following ownership redirects."""

    async def cancel_table(self, request_id: str, table: str, reason: str, address: str = "") -> None:
        """Cancels a table whose match has not started (a table that does not exist is fine),
        following ownership redirects; `address` is where the table was last seen."""

    async def close(self) -> None:
        """Closes what the platform opened."""

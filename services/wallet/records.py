"""What the wallet's operations take and return: account ids (players, pots, the house and the
treasury), the caller, and the records of accounts, transfers and results. Plain data, no database.

Account ids: `player-<player>`, `match-<match id>` and `tournament-<tournament>` (a pot's escrow),
`house` (the house cut, and the penalties with no one to share them) and `treasury` (which mints
the chips in circulation).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

HOUSE = "house"
TREASURY = "treasury"
#: Transfer phases that change posted balances.
POSTED_PHASES = ("single", "post")

Outcome = Literal["won", "lost", "abandoned"]
GrantKind = Literal["starting", "daily_bonus", "promotion"]


# -- names ------------------------------------------------------------------------------------


def player_account(player: str) -> str:
    return f"player-{player}"


@dataclass(frozen=True)
class Pot:
    """A match's or a tournament's escrow."""

    kind: Literal["match", "tournament"]
    ref: str

    @property
    def account(self) -> str:
        return f"{self.kind}-{self.ref}"

    def describe(self) -> str:
        return f"match {self.ref}" if self.kind == "match" else f"tournaments/{self.ref}"

    def tags(self) -> dict[str, str | None]:
        """The transfer columns that say which match or tournament a transfer belongs to."""
        if self.kind == "match":
            return {"match_id": self.ref, "tournament": None}
        return {"match_id": None, "tournament": self.ref}


def parse_account_id(account_id: str) -> tuple[str, str | None]:
    """(kind, player or pot ref) of a syntactically valid account id, else ValueError."""
    if account_id in (HOUSE, TREASURY):
        return account_id, None
    for prefix, kind in (("player-", "player"), ("match-", "escrow"), ("tournament-", "escrow")):
        if account_id.startswith(prefix):
            return kind, account_id[len(prefix) :]
    raise ValueError(account_id)


# -- records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who asks: `services/...` or `admins/...`, and the player it acts for, if any."""

    principal: str
    acting_for: str | None = None


@dataclass(frozen=True)
class AccountRecord:
    id: str
    kind: str
    player: str | None
    balance: int
    held: int
    incoming: int
    pot_state: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class TransferRecord:
    id: int
    phase: str
    pending_id: int | None
    debit_account: str
    credit_account: str
    amount: int
    reason: str
    match_id: str | None
    tournament: str | None
    requested_by: str
    on_behalf_of: str | None
    request_id: str
    note: str
    created_at: datetime
    expires_at: datetime | None
    #: Statements only: the transfer that resolved this hold, and the account's balance after.
    resolved_by: int | None = None
    balance_after: int | None = None


@dataclass(frozen=True)
class HoldResult:
    holds: list[TransferRecord]
    expire_time: datetime


@dataclass(frozen=True)
class SettleResult:
    transfers: list[TransferRecord]
    pot: int
    house_cut: int


@dataclass(frozen=True)
class ExpireResult:
    expired: list[TransferRecord]
    more: bool


@dataclass(frozen=True)
class Statement:
    transfers: list[TransferRecord]
    #: The id to continue below, or None on the last page.
    next_before: int | None


@dataclass(frozen=True)
class ErasureResult:
    """What a load-test run's erasure removed (or, in a dry run, would remove)."""

    accounts: int
    escrows: int
    transfers: int
    grant_claims: int
    #: What the erased transfers had added to the house's and the treasury's balances: the
    #: erasure takes it off them.
    house_chips: int
    treasury_chips: int

    def counts(self) -> list[tuple[str, int]]:
        """The answer's kinds, in the contract's order."""
        return [
            ("accounts", self.accounts),
            ("escrows", self.escrows),
            ("transfers", self.transfers),
            ("grant_claims", self.grant_claims),
        ]


@dataclass(frozen=True)
class MatchOutcome:
    player: str
    seat: int
    outcome: Outcome


@dataclass(frozen=True)
class PrizeShare:
    player: str
    place: int
    share_bp: int

"""Prize shares: from the final places and the prize structure to one share per player, in basis
points of the pool after the house cut, as the wallet's tournament `Settle` takes them. Pure.

The rules (docs/tournaments.md, "Prizes"):
- The structure gives a share (basis points, adding up to 10,000) to each paid place.
- Entrants who share a place (equal standings) spanning places p .. p+k-1 share the sum of those
  places' shares equally; the basis points that do not divide evenly go one each to the tied
  entrants in seed order (the best seed first).
- A pair's share is split between the partners the same way (the odd basis point to the partner
  who registered first).
- Shares of zero are left out (the wallet refuses them); the shares still add up to 10,000.

The wallet turns the shares into chips (its docs/wallet.md; `chips` below is the same rule, used
by the tests and the docs): the house cut is 20% of the pool rounded down; each share gets
`net * share // 10000` chips, rounded down; the chips left over (fewer than the number of shares)
go one each to the shares in order of place, then in the order given. No chip is lost or invented:
the payouts and the cut add up to the pool exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BASIS_POINTS = 10_000


@dataclass(frozen=True)
class Placed:
    """An entrant's final place and players, in tie order (seed) within a shared place."""

    entrant: str
    place: int
    players: tuple[str, ...]


@dataclass(frozen=True)
class PrizeShare:
    player: str
    place: int
    share_bp: int
    entrant: str


def split(amount: int, parts: int) -> list[int]:
    """`amount` in `parts` that differ by at most one, the larger ones first."""
    if parts < 1 or amount < 0:
        raise ValueError(f"cannot split {amount} in {parts}")
    each, left = divmod(amount, parts)
    return [each + (1 if i < left else 0) for i in range(parts)]


def check_structure(structure: Mapping[int, int]) -> None:
    if not structure:
        raise ValueError("a prize structure needs at least one paid place")
    if any(place < 1 for place in structure) or any(share < 1 for share in structure.values()):
        raise ValueError("places start at 1 and shares are positive")
    if sum(structure.values()) != BASIS_POINTS:
        raise ValueError(f"shares must add up to {BASIS_POINTS}")


def shares(placed: Sequence[Placed], structure: Mapping[int, int]) -> list[PrizeShare]:
    """Every player's share. `placed`: every entrant, best place first, tied entrants in seed
    order. Each paid place must be covered by some entrant (at least as many entrants as places)."""
    check_structure(structure)
    if max(structure) > len(placed):
        raise ValueError(f"{len(placed)} entrants cannot fill place {max(structure)}")
    groups: dict[int, list[Placed]] = {}
    for entry in placed:
        groups.setdefault(entry.place, []).append(entry)
    result: list[PrizeShare] = []
    for place in sorted(groups):
        tied = groups[place]
        pooled = sum(structure.get(p, 0) for p in range(place, place + len(tied)))
        for entry, entry_bp in zip(tied, split(pooled, len(tied)), strict=True):
            for player, player_bp in zip(entry.players, split(entry_bp, len(entry.players)), strict=True):
                if player_bp:
                    result.append(PrizeShare(player, place, player_bp, entry.entrant))
    if sum(share.share_bp for share in result) != BASIS_POINTS:
        raise ValueError("the places do not cover the prize structure (ranks must be 1 + those ahead)")
    return result


def house_cut(pool: int, percent: int = 20) -> int:
    return pool * percent // 100


def chips(pool: int, prize_shares: Sequence[tuple[str, int, int]], percent: int = 20) -> dict[str, int]:
    """The wallet's payout rule: (player, place, share_bp) -> chips. See the module docstring."""
    net = pool - house_cut(pool, percent)
    amounts = [net * share // BASIS_POINTS for _, _, share in prize_shares]
    left = net - sum(amounts)
    by_place = sorted(range(len(prize_shares)), key=lambda i: (prize_shares[i][1], i))
    for i in by_place[:left]:
        amounts[i] += 1
    return {player: amount for (player, _, _), amount in zip(prize_shares, amounts, strict=True)}

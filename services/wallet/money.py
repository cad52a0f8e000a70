"""The wallet's arithmetic: whole chips only, every rounding rule in one place.

- The house cut is `pot * percent // 100`: rounded down, so the house never takes a fraction.
- A sum split among k recipients gives each `sum // k`; the `sum % k` chips left over (fewer than
  k) go one each to the first recipients in the order given: for a match's winners the order of
  play from the seat that acted first, for a penalty the order the stakes were held.
- Tournament prizes: each place gets its share of the net pool rounded down
  (`net * share_bp // 10000`); the chips left over (fewer than the number of prizes) go one each
  to the prizes in order of place (then in the order given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

BASIS_POINTS = 10_000


def house_cut(pot: int, percent: int) -> int:
    """The house's share of a pot, rounded down to whole chips."""
    if pot < 0 or not 0 <= percent <= 100:
        raise ValueError(f"bad pot {pot} or percent {percent}")
    return pot * percent // 100


def split_evenly(amount: int, recipients: Sequence[T]) -> list[tuple[T, int]]:
    """`amount` shared among `recipients` (in priority order); the odd chips go to the first ones.
    The parts add up to `amount` exactly and differ by at most one chip."""
    if not recipients:
        raise ValueError("no one to split among")
    if amount < 0:
        raise ValueError(f"negative amount {amount}")
    share, left_over = divmod(amount, len(recipients))
    return [(who, share + (1 if i < left_over else 0)) for i, who in enumerate(recipients)]


def play_order(seat: int, first_seat: int, seats: int) -> int:
    """The position of `seat` in the order of play starting at `first_seat` (0 = acts first)."""
    return (seat - first_seat) % seats


def match_payouts(
    pot: int, percent: int, winners: Sequence[tuple[T, int]], first_seat: int, seats: int
) -> tuple[int, list[tuple[T, int]]]:
    """The house cut and each winner's payout. `winners` are (who, seat); the net pot is split
    evenly, the odd chip to the winner who acts first from `first_seat`."""
    cut = house_cut(pot, percent)
    ordered = sorted(winners, key=lambda winner: play_order(winner[1], first_seat, seats))
    return cut, split_evenly(pot - cut, [who for who, _ in ordered])


def prize_payouts(net: int, prizes: Sequence[tuple[T, int, int]]) -> list[tuple[T, int]]:
    """Each prize's chips from the net pool. `prizes` are (who, place, share in basis points),
    shares adding up to 10,000. Returned in the order given."""
    if sum(share for _, _, share in prizes) != BASIS_POINTS:
        raise ValueError("prize shares must add up to 10000 basis points")
    amounts = [net * share // BASIS_POINTS for _, _, share in prizes]
    left_over = net - sum(amounts)
    by_place = sorted(range(len(prizes)), key=lambda i: (prizes[i][1], i))
    for i in by_place[:left_over]:
        amounts[i] += 1
    return [(who, amount) for (who, _, _), amount in zip(prizes, amounts, strict=True)]

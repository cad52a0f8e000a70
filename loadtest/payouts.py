"""What a settled match does to each player's balance, computed apart from the wallet's code so the
load test checks the wallet rather than repeating it (the rules: docs/wallet.md)."""

from __future__ import annotations

from collections.abc import Sequence


def expected_deltas(
    bet: int, seats: int, winner_seats: Sequence[int], first_seat: int, cut_percent: int
) -> dict[int, int]:
    """Each seat's balance change when a match is settled: everyone stakes `bet`; the pot less
    the house cut (rounded down) is split evenly among the winners, the odd chips one each to the
    winners in the order of play from `first_seat` (docs/wallet.md)."""
    pot = bet * seats
    net = pot - pot * cut_percent // 100
    deltas = {seat: -bet for seat in range(seats)}
    if not winner_seats:
        return deltas
    ordered = sorted(winner_seats, key=lambda seat: (seat - first_seat) % seats)
    share, odd = divmod(net, len(ordered))
    for i, seat in enumerate(ordered):
        deltas[seat] += share + (1 if i < odd else 0)
    return deltas

"""The wallet's rounding rules: the house cut rounded down, odd chips to the seat that acts first,
prize remainders by place; every split adds up to the amount split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.wallet import money


@pytest.mark.parametrize(
    ("pot", "cut"),
    [(100, 20), (132, 26), (52, 10), (14, 2), (4, 0), (5, 1), (9, 1), (1, 0), (0, 0), (999, 199)],
)
def test_the_house_cut_is_20_percent_rounded_down(pot: int, cut: int) -> None:
    assert money.house_cut(pot, 20) == cut


@pytest.mark.parametrize(
    ("stakes", "first_seat", "expected"),
    [
        # 4 x 11 = 44: cut 8 (8.8 rounded down), 36 split 18/18.
        ((11, 11, 11, 11), 0, {0: 18, 2: 18}),
        # 4 x 13 = 52: cut 10, 42 -> 21/21.
        ((13, 13, 13, 13), 1, {0: 21, 2: 21}),
        # 10+10+10+11 = 41: cut 8, 33 -> the odd chip to seat 0, which acts first from seat 0...
        ((10, 10, 10, 11), 0, {0: 17, 2: 16}),
        # ... and to seat 2 when play starts at seat 1 (order 1, 2, 3, 0).
        ((10, 10, 10, 11), 1, {0: 16, 2: 17}),
        ((10, 10, 10, 11), 2, {0: 16, 2: 17}),
        ((10, 10, 10, 11), 3, {0: 17, 2: 16}),
        # 4 x 3 = 12: cut 2, 10 -> 5/5.
        ((3, 3, 3, 3), 0, {0: 5, 2: 5}),
        # 4 x 1 = 4: no cut (0.8 rounded down), 4 -> 2/2.
        ((1, 1, 1, 1), 3, {0: 2, 2: 2}),
        # 4 x 2 = 8: cut 1, 7 -> 4/3, the 4 to the first in play order.
        ((2, 2, 2, 2), 1, {0: 3, 2: 4}),
    ],
)
def test_a_pairs_pot_that_does_not_divide_evenly(
    stakes: tuple[int, ...], first_seat: int, expected: dict[int, int]
) -> None:
    pot = sum(stakes)
    cut, payouts = money.match_payouts(pot, 20, [(0, 0), (2, 2)], first_seat, 4)
    assert cut == pot * 20 // 100
    assert dict(payouts) == expected
    assert cut + sum(expected.values()) == pot


def test_a_single_winner_takes_the_net_pot() -> None:
    cut, payouts = money.match_payouts(15, 20, [("alice", 1)], 0, 2)
    assert (cut, payouts) == (3, [("alice", 12)])


@given(
    amount=st.integers(0, 10**12),
    count=st.integers(1, 64),
)
def test_an_even_split_adds_up_and_differs_by_at_most_one_chip(amount: int, count: int) -> None:
    parts = money.split_evenly(amount, list(range(count)))
    values = [value for _, value in parts]
    assert sum(values) == amount
    assert max(values) - min(values) <= 1
    assert values == sorted(values, reverse=True)  # the odd chips go to the first ones


@given(pot=st.integers(0, 10**15), percent=st.integers(0, 100), first=st.integers(0, 3), side=st.integers(0, 1))
def test_match_payouts_conserve_every_chip(pot: int, percent: int, first: int, side: int) -> None:
    cut, payouts = money.match_payouts(pot, percent, [("a", side), ("b", side + 2)], first, 4)
    assert 0 <= cut <= pot * percent / 100 < cut + 1
    assert cut + sum(value for _, value in payouts) == pot
    first_in_order = min((side, side + 2), key=lambda seat: (seat - first) % 4)
    assert payouts[0][0] == ("a" if first_in_order == side else "b")


@given(
    net=st.integers(0, 10**12),
    shares=st.lists(st.integers(1, 5000), min_size=1, max_size=12).filter(lambda s: sum(s) <= 10_000),
)
def test_prizes_add_up_to_the_net_pool_and_remainders_go_by_place(net: int, shares: list[int]) -> None:
    shares = [*shares[:-1], shares[-1] + 10_000 - sum(shares)]
    prizes = [(f"p{i}", i + 1, share) for i, share in enumerate(shares)]
    paid = money.prize_payouts(net, prizes)
    assert sum(value for _, value in paid) == net
    for (_, value), (_, _, share) in zip(paid, prizes, strict=True):
        exact = net * share // 10_000
        assert exact <= value <= exact + 1


def test_prize_remainders_go_to_the_best_places_first() -> None:
    # 101 chips at 1/3 each (3333 + 3333 + 3334 bp): 33 + 33 + 33 = 99, two chips left over.
    paid = money.prize_payouts(101, [("third", 3, 3334), ("first", 1, 3333), ("second", 2, 3333)])
    assert dict(paid) == {"first": 34, "second": 34, "third": 33}

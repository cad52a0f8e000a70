"""Deals: the documented shuffle (docs/fair-deal.md), re-implemented here from the text alone."""

import hashlib
from collections.abc import Iterator

import pytest

from engine.cards import counts_of, deck, format_many
from engine.deal import commitment, deal_from_seed
from engine.rules import preset


def documented_deal(seed: bytes, jokers: int, players: int) -> tuple[list[list[int]], list[list[int]], list[int]]:
    cards = [c for c in range(52) for _ in range(2)] + [52] * jokers

    def numbers() -> Iterator[int]:
        counter = 0
        while True:
            block = hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
            for k in range(0, 32, 4):
                yield int.from_bytes(block[k:k + 4], "big")
            counter += 1

    stream = numbers()
    for i in range(len(cards) - 1, 0, -1):
        bound = i + 1
        x = next(stream)
        while x >= 2**32 - 2**32 % bound:
            x = next(stream)
        j = x % bound
        cards[i], cards[j] = cards[j], cards[i]
    hands = [cards[11 * s:11 * s + 11] for s in range(players)]
    at = 11 * players
    return hands, [cards[at:at + 11], cards[at + 11:at + 22]], cards[at + 22:]


@pytest.mark.parametrize("ruleset,players,seed", [("fechado", 2, "a"), ("aberto", 4, "b"), ("buraco_2005", 4, "42")])
def test_the_deal_follows_the_documented_algorithm(ruleset: str, players: int, seed: str) -> None:
    rules = preset(ruleset)
    deal = deal_from_seed(rules, players, seed)
    hands, mortos, stock = documented_deal(seed.encode(), rules.jokers, players)
    assert [list(h) for h in deal.hands] == hands
    assert [list(m) for m in deal.mortos] == mortos
    assert list(deal.stock) == stock
    everything = [c for h in hands for c in h] + mortos[0] + mortos[1] + stock
    assert counts_of(everything) == counts_of(deck(rules.jokers))


def test_integer_seeds_are_their_decimal_digits() -> None:
    assert deal_from_seed(preset("fechado"), 2, 1234) == deal_from_seed(preset("fechado"), 2, "1234")


def test_a_pinned_deal_never_changes() -> None:
    deal = deal_from_seed(preset("fechado"), 2, "pinned-seed")
    assert format_many(deal.hands[0]) == ["8C", "AH", "QS", "10S", "2C", "JC", "5S", "QS", "2H", "6C", "3D"]
    assert format_many(deal.stock[:5]) == ["KD", "6S", "JK", "3S", "KS"]


def test_commitment() -> None:
    expected = hashlib.sha256(b"pinned-seed|table-1|1").hexdigest()
    assert commitment("pinned-seed", "table-1", 1) == expected
    assert commitment("pinned-seed", "table-1", 2) != expected
    assert commitment(b"pinned-seed", "table-1", 1) == expected

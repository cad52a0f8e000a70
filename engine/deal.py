"""Deals: explicit, or shuffled from a seed by a documented, language-neutral algorithm.

The shuffle is what lets players verify a deal once its seed is revealed (docs/fair-deal.md):

1. the deck in canonical order: for each card code 0..51 (``S`` then ``H D C``, ``A`` to ``K``) two
   copies, then the jokers;
2. a byte stream: ``SHA-256(seed || counter)`` for counter = 0, 1, 2 ... as 8-byte big-endian,
   concatenated; it is read 4 bytes at a time as big-endian unsigned integers;
3. Fisher-Yates from the top: for ``i`` from ``n - 1`` down to ``1``, draw ``j`` uniformly in
   ``0..i`` by rejection (discard a number ``x >= 2**32 - 2**32 % (i + 1)``; else ``j = x % (i + 1)``)
   and swap positions ``i`` and ``j``;
4. deal from the front of the shuffled deck: 11 cards to each seat in seat order, then 11 to the
   morto of side 0 and 11 to the morto of side 1; the rest is the stock, first card first drawn.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from engine.cards import counts_of, deck, format_many, parse_many
from engine.errors import MalformedError
from engine.rules import HAND_SIZE, MORTO_SIZE, Ruleset


@dataclass(frozen=True, slots=True)
class Deal:
    hands: tuple[tuple[int, ...], ...]
    mortos: tuple[tuple[int, ...], tuple[int, ...]]
    stock: tuple[int, ...]  # first card is drawn first

    def to_json(self) -> dict[str, Any]:
        return {
            "hands": [format_many(h) for h in self.hands],
            "mortos": [format_many(m) for m in self.mortos],
            "stock": format_many(self.stock),
        }

    @staticmethod
    def from_json(data: object, rules: Ruleset, players: int) -> Deal:
        """Parse and check a record's ``deal``: exact sizes, exactly the ruleset's deck."""
        if not isinstance(data, dict):
            raise MalformedError("deal must be an object with hands, mortos and stock")
        for key in ("hands", "mortos", "stock"):
            if key not in data:
                raise MalformedError(f"deal.{key} is missing")
        hands_raw, mortos_raw = data["hands"], data["mortos"]
        if not isinstance(hands_raw, list) or len(hands_raw) != players:
            raise MalformedError(f"deal.hands must hold one hand per seat ({players})")
        if not isinstance(mortos_raw, list) or len(mortos_raw) != 2:
            raise MalformedError("deal.mortos must hold two mortos")
        hands = tuple(tuple(parse_many(h)) for h in hands_raw)
        mortos = tuple(tuple(parse_many(m)) for m in mortos_raw)
        stock = tuple(parse_many(data["stock"]))
        for seat, hand in enumerate(hands):
            if len(hand) != HAND_SIZE:
                raise MalformedError(f"deal.hands[{seat}] has {len(hand)} cards, not {HAND_SIZE}")
        for side, morto in enumerate(mortos):
            if len(morto) != MORTO_SIZE:
                raise MalformedError(f"deal.mortos[{side}] has {len(morto)} cards, not {MORTO_SIZE}")
        deal = Deal(hands, (mortos[0], mortos[1]), stock)
        deal.check(rules)
        return deal

    def check(self, rules: Ruleset) -> None:
        everything = [c for h in self.hands for c in h] + [c for m in self.mortos for c in m] + list(self.stock)
        if counts_of(everything) != counts_of(deck(rules.jokers)):
            expected = counts_of(deck(rules.jokers))
            got = counts_of(everything)
            diffs = [f"{format_many([c])[0]} x{got[c]} (deck has {expected[c]})"
                     for c in range(len(expected)) if got[c] != expected[c]]
            raise MalformedError(
                f"the deal is not exactly the ruleset's {rules.deck_size}-card deck: " + ", ".join(diffs[:6])
            )


def seed_bytes(seed: int | str | bytes) -> bytes:
    if isinstance(seed, bytes):
        return seed
    if isinstance(seed, int):
        return str(seed).encode()
    return seed.encode()


#: a SHA-256 block of the stream as its eight big-endian 4-byte numbers
_BLOCK = struct.Struct(">8I")


def shuffled(cards: list[int], seed: int | str | bytes) -> list[int]:
    """Fisher-Yates driven by the SHA-256 counter stream of ``seed`` (see the module docstring).

    The stream is read block by block (no generator, no slice per number): each 32-byte block gives
    eight big-endian 4-byte numbers, in order, unpacked at once (``_BLOCK``)."""
    out = list(cards)
    key = seed_bytes(seed)
    numbers: tuple[int, ...] = ()
    at = 8  # the next number's index in ``numbers`` (8: a new block is due)
    counter = 0
    for i in range(len(out) - 1, 0, -1):
        bound = i + 1
        limit = (1 << 32) - (1 << 32) % bound
        while True:
            if at == 8:
                numbers = _BLOCK.unpack(hashlib.sha256(key + counter.to_bytes(8, "big")).digest())
                counter += 1
                at = 0
            x = numbers[at]
            at += 1
            if x < limit:
                break
        j = x % bound
        out[i], out[j] = out[j], out[i]
    return out


def deal_from_seed(rules: Ruleset, players: int, seed: int | str | bytes) -> Deal:
    cards = shuffled(deck(rules.jokers), seed)
    hands = tuple(tuple(cards[HAND_SIZE * s:HAND_SIZE * (s + 1)]) for s in range(players))
    at = HAND_SIZE * players
    mortos = (tuple(cards[at:at + MORTO_SIZE]), tuple(cards[at + MORTO_SIZE:at + 2 * MORTO_SIZE]))
    return Deal(hands, mortos, tuple(cards[at + 2 * MORTO_SIZE:]))


def commitment(seed: int | str | bytes, table_id: str, hand_number: int) -> str:
    """The hash a table publishes before a hand: SHA-256 of ``seed | table id | hand number``."""
    material = seed_bytes(seed) + b"|" + table_id.encode() + b"|" + str(hand_number).encode()
    return hashlib.sha256(material).hexdigest()

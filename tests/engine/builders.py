"""Hand-built positions for the engine's unit tests.

``position(...)`` lays out a state exactly as a test describes it (hands, melds, pile, the top of
the stock, mortos) and puts every card the test did not mention at the bottom of the stock, so the
whole deck is always accounted for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.actions import Action, action_from_json
from engine.cards import NCODES, counts_of, deck, parse, parse_many
from engine.deal import Deal
from engine.melds import Meld, make_meld
from engine.rules import Ruleset, preset, ruleset_from_spec
from engine.state import DRAW_PHASE, HandState

Cards = Sequence[str]


def cards(text: str) -> list[int]:
    return parse_many(text.split())


def rules_of(rules: str | Ruleset | dict[str, object]) -> Ruleset:
    return rules if isinstance(rules, Ruleset) else ruleset_from_spec(rules)


def position(
    rules: str | Ruleset | dict[str, object],
    hands: Sequence[str],
    *,
    melds: Sequence[Sequence[str | tuple[str, str]]] = ((), ()),
    pile: str = "",
    stock_top: str = "",
    mortos: Sequence[str | None] | None = None,
    morto_taken: tuple[bool, bool] = (False, False),
    morto_to_stock: tuple[bool, bool] = (False, False),
    to_act: int = 0,
    phase: str = DRAW_PHASE,
    stock_size: int | None = None,
) -> HandState:
    """A state with exactly these cards where the test says.

    ``hands``: one space-separated string per seat. ``melds[side]``: each meld as a string of its
    cards, or ``(cards, wild_as)``. ``mortos``: the two mortos (``None`` when taken or gone to the
    stock); by default each is the next 11 unmentioned cards. ``stock_size`` trims the stock to that
    many cards (the rest of the unmentioned cards go nowhere: use only with the card-count check off).
    """
    r = rules_of(rules)
    players = len(hands)
    hand_cards = [cards(h) for h in hands]
    meld_objs: list[list[Meld]] = [[], []]
    used: list[int] = [c for h in hand_cards for c in h]
    for side, side_melds in enumerate(melds):
        for m in side_melds:
            text: str
            wild_as: str | None
            text, wild_as = (m, None) if isinstance(m, str) else m
            mc = cards(text)
            meld_objs[side].append(make_meld(mc, r, None if wild_as is None else parse(wild_as)))
            used.extend(mc)
    pile_cards = cards(pile)
    top = cards(stock_top)
    used.extend(pile_cards)
    used.extend(top)
    given_mortos: list[list[int] | None] = []
    if mortos is not None:
        for morto in mortos:
            given_mortos.append(None if morto is None else cards(morto))
            if morto is not None:
                used.extend(cards(morto))
    rest = counts_of(deck(r.jokers))
    for c in used:
        rest[c] -= 1
        if rest[c] < 0:
            raise AssertionError(f"the test uses more copies of card {c} than the deck has")
    remaining = [c for c in range(NCODES) for _ in range(rest[c])]
    if mortos is None:
        given_mortos = [remaining[:11], remaining[11:22]]
        remaining = remaining[22:]
    stock = top + remaining
    if stock_size is not None:
        stock = stock[:stock_size]

    fake_deal = Deal(tuple(tuple(h) for h in hand_cards), ((), ()), tuple(stock))
    state = HandState(r, players, fake_deal, dealer=(to_act - 1) % players)
    state.melds = meld_objs
    state.pile = pile_cards
    state.stock = list(reversed(stock))
    state.mortos = [None if m is None else tuple(m) for m in given_mortos]
    state.morto_taken = list(morto_taken)
    state.morto_to_stock = list(morto_to_stock)
    state.to_act = to_act
    state.phase = phase
    state.touch()
    return state


def act(state: HandState, seat: int, **action: object) -> list[dict[str, Any]]:
    """Apply one action written as in a record: ``act(s, 0, do="meld", cards=["4H", "5H", "6H"])``."""
    return [e.for_seat(None) for e in state.apply(to_action(action), seat)]


def to_action(data: dict[str, object]) -> Action:
    return action_from_json(data)


def full_deal(rules: str = "fechado", players: int = 2, seed: int = 1) -> Deal:
    from engine.deal import deal_from_seed

    return deal_from_seed(preset(rules), players, seed)

"""Property tests: random legal play in every preset and both table sizes.

Checked after every action: every card is accounted for; every meld on the table is valid; views
and filtered events never show a seat a card it may not see (and do not change when hidden cards
change); the actions ``legal_actions`` lists all apply, and random meld and add attempts are legal
exactly when listed; the event log rebuilds an equal match. In every preset, a new meld ``apply``
accepts, with any ``wild_as``, is recorded in the form ``legal_actions`` lists.
"""

import hashlib
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.actions import Action, AddCards, Discard, MeldCards
from engine.cards import JOKER, is_two, parse_many, rank_of, suit_of, to_str
from engine.deal import deal_from_seed
from engine.errors import IllegalActionError
from engine.events import Event
from engine.match import MatchState, rebuild
from engine.melds import Meld, extend_meld, is_run, make_meld, slot_card
from engine.rules import CANASTRA, MIN_MELD, PRESETS
from engine.state import HandState, side_of, total_cards
from tests.engine.builders import position

PRESET_NAMES = sorted(PRESETS)

# card-bearing fields an event may show to everyone
PUBLIC_CARD_FIELDS = {"took_pile": {"cards"}, "melded": {"cards", "wild_as"}, "added": {"cards", "added"},
                      "discarded": {"card"}, "hand_ended": {"hands"}}
# card-bearing fields only the acting seat may see
PRIVATE_CARD_FIELDS = {"drew": {"card"}, "morto_taken": {"cards"}, "hand_started": {"hand"}}
VIEW_KEYS = {"seat", "players", "hand_number", "dealer", "phase", "to_act", "hand_sizes", "melds", "discard",
             "stock_count", "mortos_taken", "mortos_in_stock", "must_meld", "lone_card", "score", "match_totals"}


def check_meld(m: Meld, state: HandState) -> None:
    rules = state.rules
    assert len(m.cards) >= MIN_MELD
    wilds = [c for c in m.cards if c == JOKER or is_two(c)]
    if m.is_sequence:
        natural_two = slot_card(m.suit, 2) if m.mask >> 2 & 1 else -1
        assert len([w for w in wilds if w != natural_two]) + (wilds.count(natural_two) - 1 if natural_two in wilds
                                                               else 0) <= 1
        lo = (m.mask | (1 << m.wild_slot if m.wild >= 0 else 0))
        span = [s for s in range(15) if lo >> s & 1]
        assert span == list(range(span[0], span[-1] + 1)), "a sequence is a run"
        assert all(suit_of(c) == m.suit for c in m.cards if c != m.wild)
        if not rules.ace_to_ace:
            assert not (m.mask >> 1 & 1 and m.mask >> 14 & 1)
        assert not (m.wild >= 0 and is_two(m.wild) and suit_of(m.wild) == m.suit and m.wild_slot == 2)
    else:
        assert rules.groups
        assert m.wild < 0 or m.cards[-1] == m.wild
        naturals = [c for c in m.cards if c != m.wild] if m.wild >= 0 else list(m.cards)
        assert len({rank_of(c) for c in naturals}) == 1 and len(naturals) >= 2
        assert len(wilds) <= 1 or m.group_rank == 2


def check_event(event: Event, players: int) -> None:
    for seat in [None, *range(players)]:
        shown = event.for_seat(seat)
        for key in PRIVATE_CARD_FIELDS.get(event.type, set()):
            if key in shown:
                assert seat is not None and (seat == event.seat or event.type == "hand_started")
        allowed = PUBLIC_CARD_FIELDS.get(event.type, set()) | (
            PRIVATE_CARD_FIELDS.get(event.type, set()) if seat is not None else set())
        for key in ("card", "cards", "hand", "hands", "added", "deal", "stock", "mortos", "wild_as"):
            if key in shown:
                assert key in allowed, (event.type, key, seat)
    assert "deal" not in event.public and "stock" not in event.public and "mortos" not in event.public


def hidden_swap(state: HandState, viewer: int | None) -> HandState | None:
    """A copy where a card hidden from ``viewer`` (another hand's) is swapped with a stock card."""
    others = [s for s in range(state.players) if s != viewer and state.sizes[s]]
    if not others or not state.stock:
        return None
    other = others[0]
    hand = state.hand_of(other)
    for stock_at, card in enumerate(state.stock):
        for mine in hand:
            if mine != card:
                copy = state.clone()
                copy.counts[other][mine] -= 1
                copy.counts[other][card] += 1
                copy.stock[stock_at] = mine
                return copy
    return None


def attempts(state: HandState, rng: random.Random) -> list[Action]:
    """Meld and add attempts built around the hand's cards, legal or not."""
    hand = state.hand_of(state.to_act)
    out: list[Action] = []
    for _ in range(12):
        anchor = rng.choice(hand)
        if anchor != JOKER and rng.random() < 0.5:
            pool = [c for c in hand if c != JOKER and suit_of(c) == suit_of(anchor) and
                    abs(rank_of(c) - rank_of(anchor)) <= 4]
        else:
            pool = [c for c in hand if rank_of(c) == rank_of(anchor)]
        pool += [c for c in hand if c == JOKER or is_two(c)]
        k = rng.randint(1, min(len(pool), 8))
        cards = tuple(sorted(rng.sample(pool, k)))
        if len(cards) >= 3:
            out.append(MeldCards(cards))
        melds = state.melds[side_of(state.to_act)]
        if melds:
            out.append(AddCards(rng.randrange(len(melds)), cards))
    return out


def outcome(state: HandState, action: Action) -> Any:
    """What an action makes, so that equal moves written differently compare equal."""
    if isinstance(action, MeldCards):
        return ("meld", action.cards, make_meld(action.cards, state.rules, action.wild_as))
    if isinstance(action, AddCards):
        m = state.melds[side_of(state.to_act)][action.meld]
        return ("add", action.meld, action.cards, extend_meld(m, action.cards, state.rules))
    return action


def check_state(state: HandState, rng: random.Random, events: list[Event]) -> None:
    assert total_cards(state) == state.rules.deck_size
    assert sum(state.counts[s][c] for s in range(state.players) for c in range(53)) == sum(state.sizes)
    for side in state.melds:
        for m in side:
            check_meld(m, state)
    for e in events:
        check_event(e, state.players)
    for viewer in [None, *range(state.players)]:
        view = state.view(viewer)
        expected = VIEW_KEYS | ({"hand"} if viewer is not None else set()) | (
            {"went_out", "end_reason", "hands"} if state.is_terminal() else set())
        assert set(view) == expected
        if viewer is not None:
            assert view["hand"] == [to_str(c) for c in state.hand_of(viewer)]
        if not state.is_terminal():
            twin = hidden_swap(state, viewer)
            if twin is not None:
                assert twin.view(viewer) == view, "a view depends on a hidden card"
    if state.is_terminal():
        return
    legal = state.legal_actions()
    assert legal, "a player must always have a legal action"
    # the meld each listed action will make is the one the placement rules give its cards
    for action, plan in state.legal_plans().items():
        if isinstance(action, MeldCards):
            assert plan == make_meld(action.cards, state.rules, action.wild_as), action
        elif isinstance(action, AddCards):
            assert plan == extend_meld(state.melds[side_of(state.to_act)][action.meld], action.cards,
                                       state.rules), action
    assert len(legal) == len(set(legal)), "legal_actions has duplicates"
    for action in rng.sample(legal, min(len(legal), 6)):
        trial = state.clone()
        trial.apply(action, trial.to_act)
    if state.phase == "play":
        listed = {outcome(state, a) for a in legal if isinstance(a, MeldCards | AddCards)}
        for action in attempts(state, rng):
            try:
                result = outcome(state, action)
            except IllegalActionError:
                result = None
            legal_now = state.is_legal(action)
            assert legal_now == (result in listed), (action, legal_now)
        discards = {a.card for a in legal if isinstance(a, Discard)}
        for card in set(state.hand_of(state.to_act)):
            assert state.is_legal(Discard(card)) == (card in discards)


def play(name: str, players: int, seed: int, checks: bool = True) -> None:
    rng = random.Random(seed)
    rules = PRESETS[name]
    match = MatchState(rules, players, first_dealer=rng.randrange(players))
    log = [match.start_hand(seed=seed)]
    assert match.hand is not None
    state = match.hand
    check_event(log[0], players)
    steps = 0
    while not state.is_terminal():
        legal = state.legal_actions()
        if state.phase == "draw":
            action = rng.choice(legal)
        else:
            melds = [a for a in legal if not isinstance(a, Discard)]
            action = rng.choice(melds) if melds and rng.random() < 0.7 else rng.choice(legal)
        events = match.apply(action, state.to_act)
        log.extend(events)
        if isinstance(action, AddCards) and not state.is_terminal():
            m = state.melds[side_of(state.to_act)][action.meld] if state.phase == "play" else None
            if m is not None and m.is_sequence and m.wild >= 0 and is_two(m.wild) and suit_of(m.wild) == m.suit:
                assert m.mask >> 2 & 1 or not is_run(m.mask | 1 << 2), "after an addition a wild 2 goes home"
        steps += 1
        if checks and (steps % 3 == 0 or state.sizes[state.to_act] <= 3 or state.is_terminal()):
            check_state(state, rng, events)
    assert rebuild(rules, players, match.first_dealer, log) == match
    score = state.score()
    assert all(s["total"] == s["cards"] + s["bonus"] + s["going_out"] + s["hand"] + s["morto"] for s in score)
    for side in (0, 1):
        canastras = [m for m in state.melds[side] if len(m.cards) >= CANASTRA]
        if state.went_out >= 0 and side_of(state.went_out) == side:
            assert canastras and score[side]["going_out"] == rules.going_out_bonus


@settings(max_examples=30)
@given(name=st.sampled_from(PRESET_NAMES), players=st.sampled_from([2, 4]), seed=st.integers(0, 2**32))
def test_random_legal_play_keeps_every_invariant(name: str, players: int, seed: int) -> None:
    play(name, players, seed)


def stable_seed(*parts: object) -> int:
    """A seed derived from ``parts``, the same in every process: ``hash()`` of a string is salted per
    process (PYTHONHASHSEED), so a seed taken from it would change from one run to the next."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big")


def test_every_preset_and_table_size_at_least_once() -> None:
    for name in PRESET_NAMES:
        for players in (2, 4):
            play(name, players, seed=stable_seed(name, players), checks=False)


# --- apply() accepts exactly what legal_actions() lists, wild placements included --------------------

def wild_as_variants(cards: tuple[int, ...]) -> list[MeldCards]:
    """The meld of ``cards`` with ``wild_as`` naming every card its wild might stand for: each card of
    its naturals' suit (a sequence) and of their rank (a group), the default place among them."""
    naturals = [c for c in cards if c != JOKER and not is_two(c)]
    if not naturals:
        return []
    suit, rank = suit_of(naturals[0]), rank_of(naturals[0])
    targets = {suit * 13 + r for r in range(13)} | {s * 13 + rank - 1 for s in range(4)}
    return [MeldCards(cards, t) for t in sorted(targets)]


def check_apply_matches_legal(state: HandState, rng: random.Random) -> int:
    """Every listed action applies; every new meld ``apply`` accepts (with or without ``wild_as``) is
    recorded in its listed form and makes the meld listed for it. Returns how many melds were tried."""
    legal = state.legal_actions()
    plans = state.legal_plans()
    listed = set(legal)
    seat, side = state.to_act, side_of(state.to_act)
    for action in legal:
        trial = state.clone()
        trial.apply(action, seat)
        assert trial.history[-1][1] == action
    candidates: list[MeldCards] = []
    for action in legal:
        if isinstance(action, MeldCards):
            candidates.append(action)
            candidates.extend(wild_as_variants(action.cards))
    for attempt in attempts(state, rng):
        if isinstance(attempt, MeldCards):
            candidates.append(attempt)
            candidates.extend(wild_as_variants(attempt.cards))
    for action in candidates:
        if not state.is_legal(action):
            assert action not in listed, action
            continue
        trial = state.clone()
        events = trial.apply(action, seat)
        done = trial.history[-1][1]
        assert isinstance(done, MeldCards)
        assert done in listed, (action, done)
        assert done == action or (done.cards == action.cards and done.wild_as is None), (action, done)
        assert trial.melds[side][len(state.melds[side])] == plans[done], (action, done)
        assert events[0].type == "melded" and ("wild_as" in events[0].public) == (done.wild_as is not None)
    return len(candidates)


def test_apply_accepts_exactly_the_listed_melds_in_every_preset() -> None:
    for name in PRESET_NAMES:
        for players in (2, 4):
            rng = random.Random(stable_seed("apply-matches-legal", name, players))
            match = MatchState(PRESETS[name], players, first_dealer=rng.randrange(players))
            match.start_hand(seed=rng.randrange(1 << 30))
            assert match.hand is not None
            state = match.hand
            tried = 0
            while not state.is_terminal():
                if state.phase == "play":
                    tried += check_apply_matches_legal(state, rng)
                legal = state.legal_actions()
                melds = [a for a in legal if not isinstance(a, Discard)]
                action = rng.choice(melds) if melds and rng.random() < 0.7 else rng.choice(legal)
                match.apply(action, state.to_act)
            assert tried > 0, name


def test_a_meld_naming_the_default_wild_place_is_recorded_in_the_listed_form() -> None:
    for name in PRESET_NAMES:
        rules = PRESETS[name]
        wild = "JK" if rules.jokers else "2C"
        s = position(name, [f"5H 6H {wild} 9D", "3S 4S 8D"], phase="play")
        default = MeldCards(tuple(sorted(parse_many(["5H", "6H", wild]))))
        assert default in s.legal_actions()
        explicit = MeldCards(default.cards, parse_many(["7H"])[0])  # the high end: the default place
        assert explicit not in s.legal_actions() and s.is_legal(explicit)
        events = s.apply(explicit, 0)
        assert s.history[-1][1] == default and "wild_as" not in events[0].public
        assert [to_str(c) for c in s.melds[0][0].cards] == ["5H", "6H", wild]
    # a group's wild stands for no place: any wild_as is the listed meld without it
    s = position("fechado", ["9C 9D JK 5S", "3S 4S 8D"], phase="play")
    group = MeldCards(tuple(sorted(parse_many(["9C", "9D", "JK"]))))
    assert group in s.legal_actions() and s.is_legal(MeldCards(group.cards, parse_many(["9H"])[0]))
    s.apply(MeldCards(group.cards, parse_many(["9H"])[0]), 0)
    assert s.history[-1][1] == group


def test_events_read_later_say_what_they_said_when_made() -> None:
    """The events of actions defer their layers (``Event``'s facts): read at the end of the hand, they
    equal the same events read the moment they were made, in every preset."""
    for name in PRESET_NAMES:
        rules = PRESETS[name]
        rng = random.Random(name)
        now = HandState(rules, 2, deal_from_seed(rules, 2, f"events-{name}"))
        later = now.clone()
        read_now: list[dict[str, Any]] = []
        kept: list[Event] = []
        while not now.is_terminal():
            action = rng.choice(now.legal_actions())
            read_now.extend(e.to_json() for e in now.apply(action))
            kept.extend(later.apply(action))
        assert [e.to_json() for e in kept] == read_now
        assert {e.type for e in kept} >= {"drew", "discarded", "melded"}

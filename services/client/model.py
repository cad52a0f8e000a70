"""A client's picture of one table, kept from its event stream (pure: no I/O).

`TableModel` starts from the stream's `TableSnapshot` and applies each `TableEvent` after it, in
sequence order (an event at or below the last applied sequence number is a duplicate and ignored),
the way the engine would: a discard passes the turn, a draw or a take starts the play phase, a
hand's end closes it. The model knows what its seat may know and nothing more.

`shadow_state(model, rules)` turns the model into an engine `HandState` for the viewer's seat,
with the cards the viewer cannot see (other hands, the stock, the mortos) replaced by placeholders:
enough for `legal_actions()` and `view(seat)`, which read only the viewer's hand and the public
table, so the engine's bots can play a seat client side from what the seat received.

`actions_from_hints` turns the server's legal-move hints (GetLegalMoves) into engine actions;
`ruleset_of` gives the engine ruleset a table's options name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import DRAW, TAKE_PILE, Action, Discard, add_action, meld_action
from engine.cards import JOKER, is_two, parse, rank_of, suit_of
from engine.deal import Deal
from engine.melds import Meld, make_meld, slot_card
from engine.rules import MORTO_SIZE, Ruleset, ruleset_from_spec
from engine.state import DRAW_PHASE, OVER, PLAY_PHASE, HandState

TableEvent = game_session_pb2.TableEvent
PHASE_NAMES = {
    game_session_pb2.TURN_PHASE_DRAW: DRAW_PHASE,
    game_session_pb2.TURN_PHASE_PLAY: PLAY_PHASE,
    game_session_pb2.TURN_PHASE_HAND_OVER: OVER,
}
#: The events that change the game (what is on the table, whose turn): chat, votes and timers do not.
GAME_EVENTS = frozenset({
    "snapshot", "hand_started", "card_drawn", "discard_taken", "meld_laid", "meld_extended", "card_discarded",
    "morto_taken", "morto_became_stock", "hand_ended", "match_ended", "table_cancelled",
})
PLACEHOLDER = 0  # the card code standing for a card the viewer cannot see (never read for legality)


def ruleset_of(ref: common_pb2.RulesetRef) -> Ruleset:
    """The engine ruleset a table's `RulesetRef` names (overrides are JSON scalars as strings)."""
    if not ref.overrides:
        return ruleset_from_spec(ref.preset)
    spec: dict[str, object] = {"preset": ref.preset}
    for key, text in ref.overrides.items():
        spec[key] = json.loads(text)
    return ruleset_from_spec(spec)


#: Each bot level's name for people (the contract's HARD is the expert bot).
BOT_LEVEL_NAMES: dict[int, str] = {
    common_pb2.BOT_LEVEL_EASY: "easy",
    common_pb2.BOT_LEVEL_MEDIUM: "medium",
    common_pb2.BOT_LEVEL_HARD: "expert",
}


def participant_label(participant: common_pb2.Participant, playing_level: int = 0) -> str:
    """"alice" for a player, "bot-expert" for a bot: its own level, else `playing_level` (the
    seat's `bot_level`: a seat naming no level plays at the table's)."""
    if participant.WhichOneof("kind") == "player":
        return participant.player.removeprefix("players/")
    if participant.WhichOneof("kind") == "bot":
        level = BOT_LEVEL_NAMES.get(participant.bot or playing_level)
        return f"bot-{level}" if level else "bot"
    return "?"


@dataclass
class MeldView:
    kind: int  # common_pb2.Meld.Kind
    cards: list[str]
    canastra: int  # common_pb2.Meld.Canastra
    #: the engine meld, once built, with the ruleset it was built for (a view is replaced, never
    #: changed, when its meld changes; a bot asks for every meld at every decision)
    _engine: tuple[Ruleset, Meld] | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(meld: common_pb2.Meld) -> MeldView:
        return MeldView(meld.kind, list(meld.cards), meld.canastra)

    def engine_meld(self, rules: Ruleset) -> Meld:
        """The engine meld this view shows (`meld_from_cards`), built once per ruleset."""
        cached = self._engine
        if cached is None or cached[0] is not rules:
            cached = self._engine = (rules, meld_from_cards(self.cards, self.kind, rules))
        return cached[1]


@dataclass
class SeatInfo:
    label: str = "?"
    player: str = ""  # `players/{player}`, empty for a bot seat
    hand_size: int = 0
    bot_controlled: bool = False
    connected: bool = False
    auto_plays: int = 0


@dataclass
class TableModel:
    """What one seat (or a spectator, `viewer_seat` None) knows of a table."""

    table_name: str
    viewer_seat: int | None = None
    seq: int = 0
    version: int = 0  # counts the events that changed the game (not chat, timers, votes)
    table: game_session_pb2.Table | None = None
    players: int = 0
    seats: list[SeatInfo] = field(default_factory=list)
    hand: list[str] = field(default_factory=list)  # the viewer's cards
    melds: list[list[MeldView]] = field(default_factory=lambda: [[], []])
    morto_taken: list[bool] = field(default_factory=lambda: [False, False])
    mortos_in_stock: list[bool] = field(default_factory=lambda: [False, False])
    morto_pending: list[int] = field(default_factory=lambda: [-1, -1])
    pile: list[str] = field(default_factory=list)
    stock_count: int = 0
    hand_number: int = 0
    dealer: int = 0
    to_act: int = 0
    phase: str = ""  # "", draw, play, hand_over
    must_meld: str | None = None  # closed pile taken this turn: this card must be melded first
    lone: str | None = None  # a one-card pile taken this turn: it may not be discarded
    match_scores: list[int] = field(default_factory=lambda: [0, 0])
    deal_commitment: str = ""
    finished: bool = False  # the match ended (or the table was cancelled)
    cancelled: bool = False
    last_hand_end: game_session_pb2.HandEnded | None = None
    match_end: game_session_pb2.MatchEnded | None = None
    annulment: game_session_pb2.AnnulmentProposed | None = None
    messages: list[str] = field(default_factory=list)  # one line per event, for people (the last 200)
    said: int = 0  # lines said so far (messages keeps the last ones)

    # --- reading ------------------------------------------------------------------------------
    def seat_name(self, seat: int) -> str:
        if 0 <= seat < len(self.seats):
            return f"seat {seat} ({self.seats[seat].label})"
        return f"seat {seat}"

    @property
    def my_turn(self) -> bool:
        return (
            self.viewer_seat is not None
            and not self.finished
            and self.phase in (DRAW_PHASE, PLAY_PHASE)
            and self.to_act == self.viewer_seat
        )

    def side_of(self, seat: int) -> int:
        return seat & 1

    # --- applying the stream ------------------------------------------------------------------
    def apply(self, event: TableEvent) -> bool:
        """Apply one stream event; False (and nothing changes) for a duplicate."""
        kind = event.WhichOneof("event")
        if kind in GAME_EVENTS:
            self.version += 1
        if kind == "snapshot":
            self._load(event.snapshot)
            self.seq = max(self.seq, event.seq) if event.seq else self.seq
            return True
        if event.seq and event.seq <= self.seq:
            return False
        if event.seq:
            self.seq = event.seq
        handler = getattr(self, f"_on_{kind}", None) if kind else None
        if handler is not None and kind:
            handler(getattr(event, kind))
        return True

    def apply_all(self, events: Iterable[TableEvent]) -> None:
        for event in events:
            self.apply(event)

    def _say(self, line: str) -> None:
        self.messages.append(line)
        self.said += 1
        del self.messages[:-200]

    def _load(self, snap: game_session_pb2.TableSnapshot) -> None:
        if snap.HasField("table"):
            self.table = snap.table
            if snap.table.seq:
                self.seq = snap.table.seq
            self.players = snap.table.options.players or len(snap.seats)
            self.match_scores = list(snap.table.match_scores) or self.match_scores
            self.finished = snap.table.state in (game_session_pb2.Table.STATE_FINISHED,
                                                 game_session_pb2.Table.STATE_CANCELLED)
            self.cancelled = snap.table.state == game_session_pb2.Table.STATE_CANCELLED
        self.viewer_seat = snap.viewer_seat if snap.HasField("viewer_seat") else None
        self.players = self.players or len(snap.seats)
        self.seats = [
            SeatInfo(
                label=participant_label(s.participant, s.bot_level),
                player=s.participant.player if s.participant.WhichOneof("kind") == "player" else "",
                hand_size=s.hand_size,
                bot_controlled=s.bot_controlled,
                connected=s.connected,
                auto_plays=s.auto_plays,
            )
            for s in sorted(snap.seats, key=lambda s: s.seat)
        ]
        self.hand = list(snap.hand)
        self.melds = [[], []]
        self.morto_taken = [False, False]
        for side in snap.sides:
            if side.side in (0, 1):
                self.melds[side.side] = [MeldView.of(m) for m in side.melds]
                self.morto_taken[side.side] = side.morto_taken
                if side.match_score or not snap.table.match_scores:
                    self.match_scores[side.side] = side.match_score
        self.pile = list(snap.discard_pile)
        self.stock_count = snap.stock_count
        self.hand_number = snap.hand_number
        self.dealer = snap.dealer
        self.to_act = snap.to_act
        self.phase = PHASE_NAMES.get(snap.phase, "")
        self.deal_commitment = snap.deal_commitment
        self.annulment = snap.annulment if snap.HasField("annulment") else None
        self.must_meld = None
        self.lone = None

    def _rules_flags(self) -> tuple[bool, bool]:
        """(closed pile, lone discard) of the table's ruleset, when known."""
        if self.table is None:
            return False, False
        try:
            rules = ruleset_of(self.table.options.ruleset)
        except Exception:  # an unknown preset: the flags only refine the model
            return False, False
        return rules.closed_pile, rules.lone_discard

    def _size(self, seat: int, delta: int) -> None:
        if 0 <= seat < len(self.seats):
            self.seats[seat].hand_size = max(0, self.seats[seat].hand_size + delta)

    def _take_from_hand(self, cards: Sequence[str]) -> None:
        for card in cards:
            if card in self.hand:
                self.hand.remove(card)

    def _give(self, cards: Sequence[str]) -> None:
        self.hand = sort_cards([*self.hand, *cards])

    def _on_hand_started(self, e: game_session_pb2.HandStarted) -> None:
        self.hand_number = e.hand_number
        self.dealer = e.dealer
        self.deal_commitment = e.deal_commitment
        self.hand = list(e.hand)
        self.to_act = e.to_act
        self.stock_count = e.stock_count
        self.phase = DRAW_PHASE
        self.melds = [[], []]
        self.pile = []
        self.morto_taken = [False, False]
        self.mortos_in_stock = [False, False]
        self.morto_pending = [-1, -1]
        self.must_meld = None
        self.lone = None
        for info in self.seats:
            info.hand_size = 11
        self._say(f"hand {e.hand_number} dealt (commitment {e.deal_commitment[:12]}…); "
                  f"{self.seat_name(e.to_act)} starts")

    def _on_card_drawn(self, e: game_session_pb2.CardDrawn) -> None:
        self._size(e.seat, 1)
        if e.card and e.seat == self.viewer_seat:
            self._give([e.card])
        self.stock_count = e.stock_count
        self.to_act, self.phase = e.seat, PLAY_PHASE
        self._say(f"{self.seat_name(e.seat)} drew {e.card}" if e.card else f"{self.seat_name(e.seat)} drew")

    def _on_discard_taken(self, e: game_session_pb2.DiscardTaken) -> None:
        cards = list(e.cards)
        self._size(e.seat, len(cards))
        if e.seat == self.viewer_seat:
            self._give(cards)
        self.pile = []
        self.to_act, self.phase = e.seat, PLAY_PHASE
        closed, lone = self._rules_flags()
        self.must_meld = cards[-1] if closed and cards else None
        self.lone = cards[0] if lone and len(cards) == 1 else None
        self._say(f"{self.seat_name(e.seat)} took the pile ({len(cards)}: {' '.join(cards)})")

    def _set_meld(self, side: int, index: int, meld: common_pb2.Meld) -> None:
        melds = self.melds[side]
        while len(melds) <= index:
            melds.append(MeldView(0, [], 0))
        melds[index] = MeldView.of(meld)

    def _on_meld_laid(self, e: game_session_pb2.MeldLaid) -> None:
        self._set_meld(e.side, e.meld_index, e.meld)
        self._size(e.seat, -len(e.meld.cards))
        if e.seat == self.viewer_seat:
            self._take_from_hand(e.meld.cards)
        self.must_meld = None
        self._say(f"{self.seat_name(e.seat)} melded {' '.join(e.meld.cards)}")

    def _on_meld_extended(self, e: game_session_pb2.MeldExtended) -> None:
        self._set_meld(e.side, e.meld_index, e.meld)
        self._size(e.seat, -len(e.cards))
        if e.seat == self.viewer_seat:
            self._take_from_hand(e.cards)
        self.must_meld = None
        self._say(f"{self.seat_name(e.seat)} added {' '.join(e.cards)} to meld {e.meld_index}")

    def _on_card_discarded(self, e: game_session_pb2.CardDiscarded) -> None:
        self._size(e.seat, -1)
        if e.seat == self.viewer_seat:
            self._take_from_hand([e.card])
        self.pile.append(e.card)
        self._say(f"{self.seat_name(e.seat)} discarded {e.card}")
        self._next_turn(e.seat)

    def _next_turn(self, seat: int) -> None:
        players = self.players or 2
        self.to_act = (seat + 1) % players
        self.phase = DRAW_PHASE
        self.must_meld = None
        self.lone = None
        side = self.side_of(self.to_act)
        if self.morto_pending[side] == self.to_act:
            self.morto_pending[side] = -1

    def _on_morto_taken(self, e: game_session_pb2.MortoTaken) -> None:
        self.morto_taken[e.side] = True
        self._size(e.seat, len(e.cards) or MORTO_SIZE)
        if e.seat == self.viewer_seat:
            self._give(list(e.cards))
        if e.kind == game_session_pb2.MortoTaken.KIND_INDIRECT:
            self.morto_pending[e.side] = e.seat
        self._say(f"{self.seat_name(e.seat)} took the morto of side {e.side}")

    def _on_morto_became_stock(self, e: game_session_pb2.MortoBecameStock) -> None:
        self.mortos_in_stock[e.side] = True
        self.stock_count = e.stock_count
        self._say(f"the stock ran out: side {e.side}'s morto became the stock")

    def _on_hand_ended(self, e: game_session_pb2.HandEnded) -> None:
        self.phase = OVER
        self.last_hand_end = e
        if e.match_scores:
            self.match_scores = list(e.match_scores)
        reason = game_session_pb2.HandEnded.Reason.Name(e.reason).removeprefix("REASON_").lower()
        totals = ", ".join(f"side {s.side}: {s.total:+d}" for s in e.scores)
        self._say(f"hand {e.hand_number} ended ({reason.replace('_', ' ')}); {totals}; "
                  f"match {' - '.join(str(x) for x in self.match_scores)}")

    def _on_match_ended(self, e: game_session_pb2.MatchEnded) -> None:
        self.finished = True
        self.match_end = e
        if e.match_scores:
            self.match_scores = list(e.match_scores)
        if e.annulled:
            self._say("the match was annulled")
        elif e.HasField("winning_side"):
            self._say(f"the match is over: side {e.winning_side} won "
                      f"({' - '.join(str(x) for x in self.match_scores)})")
        else:
            self._say("the match is over")

    def _on_turn_timer_started(self, e: game_session_pb2.TurnTimerStarted) -> None:
        # The server's word on whose turn it is (and in which phase).
        self.to_act = e.seat
        self.phase = PHASE_NAMES.get(e.phase, self.phase)

    def _on_auto_played(self, e: game_session_pb2.AutoPlayed) -> None:
        if 0 <= e.seat < len(self.seats):
            self.seats[e.seat].auto_plays = e.count
        self._say(f"time ran out: the server played for {self.seat_name(e.seat)} ({e.count}/3)")

    def _on_seat_taken_over(self, e: game_session_pb2.SeatTakenOver) -> None:
        if 0 <= e.seat < len(self.seats):
            self.seats[e.seat].bot_controlled = True
        reason = game_session_pb2.SeatTakenOver.Reason.Name(e.reason).removeprefix("REASON_").lower()
        self._say(f"a bot took {self.seat_name(e.seat)} over ({reason})")

    def _on_seat_returned(self, e: game_session_pb2.SeatReturned) -> None:
        if 0 <= e.seat < len(self.seats):
            self.seats[e.seat].bot_controlled = False
        self._say(f"{self.seat_name(e.seat)} is back")

    def _on_annulment_proposed(self, e: game_session_pb2.AnnulmentProposed) -> None:
        self.annulment = e
        self._say(f"{self.seat_name(e.proposer_seat)} proposes to annul the match "
                  f"(vote: `annul yes` or `annul no`)")

    def _on_annulment_voted(self, e: game_session_pb2.AnnulmentVoted) -> None:
        self._say(f"{self.seat_name(e.seat)} voted {'yes' if e.approve else 'no'} on the annulment")

    def _on_annulment_resolved(self, e: game_session_pb2.AnnulmentResolved) -> None:
        self.annulment = None
        self._say("the annulment was approved" if e.approved else "the annulment was refused")

    def _on_chat_message(self, e: game_session_pb2.ChatMessage) -> None:
        who = e.sender.removeprefix("players/")
        self._say(f"<{who}> {e.text}")

    def _on_table_cancelled(self, e: game_session_pb2.TableCancelled) -> None:
        self.finished = True
        self.cancelled = True
        self._say(f"the table was cancelled{': ' + e.reason if e.reason else ''}")


# --- cards -------------------------------------------------------------------------------------------

class StreamPosition(TableModel):
    """Only where a table's stream is: its last sequence number and whether the match is over.
    For a relay (the gateway) that passes each change on and keeps no game state of its own:
    the events are not read beyond their kind."""

    def apply(self, event: TableEvent) -> bool:
        kind = event.WhichOneof("event")
        if kind == "snapshot":
            table = event.snapshot.table
            if event.snapshot.HasField("table"):
                self.seq = max(self.seq, table.seq)
                self.finished = table.state in (game_session_pb2.Table.STATE_FINISHED,
                                                game_session_pb2.Table.STATE_CANCELLED)
            self.seq = max(self.seq, event.seq)
            return True
        if event.seq and event.seq <= self.seq:
            return False
        if event.seq:
            self.seq = event.seq
        if kind in ("match_ended", "table_cancelled"):
            self.finished = True
        return True


def card_code(text: str) -> int:
    return parse(text)


def sort_cards(cards: Iterable[str]) -> list[str]:
    """Suit by suit (S H D C), ace low, jokers last: the game-record order."""
    return sorted(cards, key=card_code)


# --- the shadow state: legal moves and bot views from what a seat knows -----------------------------

def meld_from_cards(cards: Sequence[str], kind: int, rules: Ruleset) -> Meld:
    """The engine meld a public meld shows (a sequence lists its cards low to high, the wild in
    the place it stands for)."""
    codes = [parse(c) for c in cards]
    if kind == common_pb2.Meld.KIND_GROUP:
        wilds = [c for c in codes if c == JOKER or is_two(c)]
        naturals = [c for c in codes if not (c == JOKER or is_two(c))]
        if not naturals:  # a group of 2s: the 2s are its naturals, a joker its wild
            twos = tuple(c for c in codes if c != JOKER)
            return Meld.group(2, twos, JOKER if JOKER in codes else -1)
        return Meld.group(rank_of(naturals[0]), tuple(naturals), wilds[0] if wilds else -1)
    anchors = [c for c in codes if c != JOKER and not is_two(c)]
    if not anchors:
        return make_meld(codes, rules)
    suit = suit_of(anchors[0])
    n = len(codes)
    for low in range(1, 15 - n + 1):
        mask = 0
        wild, wild_slot, bad = -1, 0, False
        for offset, code in enumerate(codes):
            slot = low + offset
            if code == slot_card(suit, slot):
                mask |= 1 << slot
            elif wild < 0 and (code == JOKER or is_two(code)):
                wild, wild_slot = code, slot
            else:
                bad = True
                break
        if not bad:
            return Meld.sequence(suit, mask, wild, wild_slot)
    return make_meld(codes, rules)


def shadow_state(model: TableModel, rules: Ruleset) -> HandState:
    """An engine state equal to the real one in everything the viewer's seat may see; hidden cards
    are placeholders. For `legal_actions()` and `view(seat)` of the viewer's seat only."""
    seat = model.viewer_seat
    if seat is None:
        raise ValueError("a spectator has no seat to play")
    players = model.players
    own = tuple(parse(c) for c in model.hand)
    hands = tuple(own if s == seat else () for s in range(players))
    placeholder_morto = (PLACEHOLDER,) * MORTO_SIZE
    deal = Deal(hands, (placeholder_morto, placeholder_morto), (PLACEHOLDER,) * model.stock_count)
    state = HandState(rules, players, deal, model.dealer % players, max(1, model.hand_number), model.match_scores)
    state.sizes = [len(own) if s == seat else model.seats[s].hand_size for s in range(players)]
    state.melds = [[m.engine_meld(rules) for m in side] for side in model.melds]
    state.pile = [parse(c) for c in model.pile]
    state.mortos = [
        None if model.morto_taken[side] or model.mortos_in_stock[side] else placeholder_morto for side in (0, 1)
    ]
    state.morto_taken = list(model.morto_taken)
    state.morto_to_stock = list(model.mortos_in_stock)
    state.morto_pending = list(model.morto_pending)
    state.to_act = model.to_act
    state.phase = model.phase or DRAW_PHASE
    state.must_meld = parse(model.must_meld) if model.must_meld else -1
    state.lone = parse(model.lone) if model.lone else -1
    state.touch()
    return state


# --- the server's hints --------------------------------------------------------------------------------

def actions_from_hints(hints: game_session_pb2.GetLegalMovesResponse) -> list[Action]:
    """The server's legal-move hints as engine actions (draw, take, melds, additions, discards)."""
    out: list[Action] = []
    if hints.can_draw:
        out.append(DRAW)
    if hints.can_take_discard:
        out.append(TAKE_PILE)
    for meld in hints.melds:
        out.append(meld_action([parse(c) for c in meld.cards], parse(meld.wild_as) if meld.wild_as else None))
    for addition in hints.additions:
        out.append(add_action(addition.meld, [parse(c) for c in addition.cards]))
    out.extend(Discard(parse(c)) for c in hints.discards)
    return out

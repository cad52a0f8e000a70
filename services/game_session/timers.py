"""A table's turn timer, and what happens when a turn's time comes: the first deal, a bot's move,
the automatic play of a player whose time ran out.

Each table has one `TurnTimer`. After every change its actor asks `next_due` what is due next and
when, and sets the timer to it; the loop timer is re-armed only when it must fire sooner (a turn's
many changes cost one loop timer, not one each). When it fires, the actor runs the due work as a
change of its own; the work checks first that the turn it was set for (`TurnKey`) is still the
table's turn, so a timer that fires late does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from engine.actions import DRAW, Action, Discard
from engine.bots.base import Bot
from engine.bots.heuristic import HeuristicBot
from services.game_session import social
from services.game_session.clock import Clock, TimerHandle
from services.game_session.log import Entry
from services.game_session.settings import GameSessionSettings
from services.game_session.table import MAX_TURN_ACTIONS, SEARCH_BOTS, LiveTable, State, TurnKey


class Due(NamedTuple):
    """What the table's timer does next: `kind` is "deal" (the first hand), "bot" (a bot seat's
    turn), "think" (a search bot's next decision, made off the event loop: `SearchDecision`) or
    "timeout" (a player's turn ran out), at clock time `at`, for the turn `turn`."""

    kind: str
    at: float
    turn: TurnKey | None = None


def next_due(table: LiveTable, settings: GameSessionSettings, now: float) -> Due | None:
    """What is due next at the table (None: nothing, until a change)."""
    if table.state == State.STATE_WAITING:
        everyone_here = all(s.streams > 0 for s in table.humans())
        start_at = now if everyone_here else table.created_ms / 1000 + settings.start_wait_seconds
        return Due("deal", start_at)
    turn = table.current_turn()
    if turn is None:
        return None
    if table.seats[turn.seat].acts_by_bot:
        if table.bot_kind(turn.seat) not in SEARCH_BOTS:
            return Due("bot", now + settings.bot_delay_seconds, turn)
        if table.thinking is not None:  # its decision is under way: the decision's end sets what is next
            return None
        if table.bot_turn_continues == turn:  # the next decision of the same turn: at once
            return Due("think", now, turn)
        return Due("think", now + settings.bot_delay_seconds, turn)
    return Due("timeout", table.turn_deadline_ms / 1000, turn)


class TurnTimer:
    """The one loop timer of a table: `set(at, action)` makes `action` due at clock time `at`; a
    loop timer already set to fire no later is kept, and re-arms itself for `at` when it fires."""

    __slots__ = ("_action", "_clock", "_due_at", "_handle", "_handle_at")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._handle: TimerHandle | None = None
        self._handle_at = 0.0
        self._action: Callable[[], None] | None = None
        self._due_at = 0.0

    def set(self, at: float, action: Callable[[], None]) -> None:
        self._due_at, self._action = at, action
        handle = self._handle
        if handle is not None:
            if self._handle_at <= at:
                return
            handle.cancel()
        self._arm(at)

    def clear(self) -> None:
        """Nothing is due (a timer that fires finds nothing to do)."""
        self._action = None

    def cancel(self) -> None:
        self._action = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, at: float) -> None:
        self._handle_at = at
        self._handle = self._clock.call_later(at - self._clock.now(), self._fire)

    def _fire(self) -> None:
        self._handle = None
        if self._action is None:
            return
        if self._due_at > self._clock.now():  # moved later since it was set (or the loop fired early)
            self._arm(self._due_at)
            return
        action, self._action = self._action, None
        action()


# -- what is done when the time comes ----------------------------------------------------------
def deal_first_hand(table: LiveTable, now_ms: int, deal_seed: str | None, out: list[Entry]) -> None:
    if table.state == State.STATE_WAITING:
        table.start_hand(now_ms, deal_seed, out)


def bot_turn(table: LiveTable, turn: TurnKey, now_ms: int, out: list[Entry]) -> None:
    """The bot of the turn's seat plays its turn (to its discard, or the hand's end) in this
    change (a search bot decides off the loop instead: `SearchDecision`)."""
    if table.current_turn() != turn:
        return
    seat = turn.seat
    for _ in range(MAX_TURN_ACTIONS):
        hand = table.match.hand
        if hand is None or hand.is_terminal() or hand.to_act != seat or not table.seats[seat].acts_by_bot:
            break
        action = table.bot(seat).choose(hand.view(seat), hand.legal_actions())
        table.apply_action(action, seat, "bot", now_ms, out)
        if table.match.hand is not hand or hand.is_terminal():
            break


class SearchDecision(NamedTuple):
    """One decision of a search bot (`SEARCH_BOTS`: each spends its CPU budget), taken off the
    event loop: the bot, and what it decides from, captured at the table between two changes
    (`think`); `choose` runs in the decision thread; `decided` applies its move, as a change."""

    turn: TurnKey
    seq: int
    bot: Bot
    view: dict[str, Any]
    legal: list[Action]

    def choose(self) -> Action:
        return self.bot.choose(self.view, self.legal)


def think(table: LiveTable, turn: TurnKey) -> SearchDecision | None:
    """The decision the turn's search bot is to make now (None: the turn moved on), marked under
    way (`table.thinking`) so that nothing else is due at the table until it is applied."""
    hand = table.match.hand
    if table.current_turn() != turn or table.thinking is not None or hand is None:
        return None
    seat = turn.seat
    if not table.seats[seat].acts_by_bot:
        return None
    table.thinking = turn
    # a plain copy of the view: the decision thread reads nothing of the live table
    return SearchDecision(turn, table.seq, table.bot(seat), hand.view(seat).to_dict(), hand.legal_actions())


def decided(table: LiveTable, decision: SearchDecision, action: Action | None, now_ms: int, out: list[Entry]) -> None:
    """The search bot's decision is made (`action` None: it failed, and the heuristic bot's
    choice stands in): its move is played unless the table changed meanwhile (the seat given
    back, the match annulled, ...); the next decision of the same turn is due at once."""
    table.thinking = None
    turn = decision.turn
    if table.seq != decision.seq or table.current_turn() != turn or not table.seats[turn.seat].acts_by_bot:
        return
    if action is None:
        action = HeuristicBot(f"{table.table_id}|{table.seq}", table.rules).choose(decision.view, decision.legal)
    table.apply_action(action, turn.seat, "bot", now_ms, out)
    after = table.current_turn()
    if after is not None and after.seat == turn.seat:
        table.bot_turn_continues = after


def auto_play(table: LiveTable, turn: TurnKey, now_ms: int, max_auto_plays: int, out: list[Entry]) -> None:
    """A player's turn ran out: the service plays it (draws if they had not, then the heuristic
    bot's choices to the discard); after `max_auto_plays` of them a bot takes the seat for good.

    Whatever the table's bot level: an automatic play stands in for a player who is still
    playing, and only ends their turn the cheapest sensible way (the heuristic bot's discard, a
    fraction of a millisecond); the table's level plays the seat once a bot takes it."""
    if table.current_turn() != turn or now_ms < table.turn_deadline_ms:
        return
    seat_number = turn.seat
    seat = table.seats[seat_number]
    if seat.acts_by_bot:
        return
    hand = table.match.hand
    assert hand is not None
    if hand.phase == "draw":
        table.apply_action(DRAW, seat_number, "auto", now_ms, out)
    helper = HeuristicBot(f"{table.table_id}|{table.seq}", table.rules)
    for _ in range(MAX_TURN_ACTIONS):
        if table.match.hand is not hand or hand.is_terminal() or hand.to_act != seat_number:
            break
        legal = hand.legal_actions()
        view = hand.view(seat_number)
        discards = [a for a in legal if isinstance(a, Discard)]
        action = helper.choose_discard(view, legal) if discards else helper.choose(view, legal)
        table.apply_action(action, seat_number, "auto", now_ms, out)
    seat.auto_plays += 1
    table.add({"t": "auto_played", "ms": now_ms, "x": {"seat": seat_number, "count": seat.auto_plays}}, out)
    if seat.auto_plays >= max_auto_plays and table.live:
        social.take_seat(table, seat_number, "timeouts", now_ms, out)

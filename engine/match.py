"""A match: hands one after another until a side wins by the ruleset's target and tie rules.

The caller supplies each hand's seed (the game-session service draws it from a cryptographic RNG
and publishes a commitment first), or an explicit deal. The dealer rotates each hand.
"""

from __future__ import annotations

from typing import Any

from engine.actions import Action
from engine.deal import Deal, deal_from_seed
from engine.errors import IllegalActionError
from engine.events import Event
from engine.rules import Ruleset
from engine.state import HandState, side_of


class MatchState:
    """Scores across hands. ``hand`` is the hand being played (``None`` before the first deal)."""

    __slots__ = ("first_dealer", "hand", "hand_scores", "players", "rules", "totals", "winner")

    def __init__(self, rules: Ruleset, players: int, first_dealer: int | None = None) -> None:
        if players not in (2, 4):
            raise ValueError("Buraco is played by 2 or 4 players")
        self.rules = rules
        self.players = players
        self.first_dealer = players - 1 if first_dealer is None else first_dealer
        self.hand: HandState | None = None
        self.hand_scores: list[list[dict[str, int]]] = []  # per finished hand, per side
        self.totals = [0, 0]
        self.winner = -1  # winning side once the match is over

    @property
    def starter_side(self) -> int:
        """The side of the player who acted first in the match (wins ties under ``tie="starter"``)."""
        return side_of((self.first_dealer + 1) % self.players)

    @property
    def hands_played(self) -> int:
        return len(self.hand_scores)

    def is_over(self) -> bool:
        return self.winner >= 0

    def needs_deal(self) -> bool:
        return not self.is_over() and (self.hand is None or self.hand.is_terminal())

    def next_dealer(self) -> int:
        return (self.first_dealer + self.hands_played) % self.players

    def start_hand(self, seed: int | str | bytes | None = None, deal: Deal | None = None) -> Event:
        """Deal the next hand from ``seed`` (or ``deal``); returns its ``hand_started`` event."""
        if not self.needs_deal():
            raise IllegalActionError("HAND_OVER", "a hand is still being played, or the match is over")
        if deal is None:
            if seed is None:
                raise ValueError("start_hand needs a seed or a deal")
            deal = deal_from_seed(self.rules, self.players, seed)
        else:
            deal.check(self.rules)
        self.hand = HandState(self.rules, self.players, deal, self.next_dealer(), self.hands_played + 1,
                              self.totals)
        return self.hand.started_event()

    def apply(self, action: Action, seat: int | None = None) -> list[Event]:
        if self.hand is None or self.hand.is_terminal():
            raise IllegalActionError("HAND_OVER", "no hand is being played")
        events = self.hand.apply(action, seat)
        if self.hand.is_terminal():
            events.extend(self._hand_finished())
        return events

    def _hand_finished(self) -> list[Event]:
        assert self.hand is not None
        return self._record_hand(self.hand.score())

    def _record_hand(self, score: list[dict[str, int]]) -> list[Event]:
        self.hand_scores.append(score)
        for side in (0, 1):
            self.totals[side] += score[side]["total"]
        winner = self.decide()
        if winner < 0:
            return []
        self.winner = winner
        return [Event("match_ended", -1, {"winner_side": winner, "totals": self.totals[:],
                                          "hands_played": self.hands_played})]

    def decide(self) -> int:
        """The winning side after the hands so far, or -1 when another hand must be played."""
        a, b = self.totals
        target = self.rules.target
        if target > 0 and a < target and b < target:
            return -1
        if a != b:
            return 0 if a > b else 1
        return self.starter_side if self.rules.tie == "starter" else -1

    def view(self, seat: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target": self.rules.target,
            "totals": self.totals[:],
            "hand_scores": [[s["total"] for s in h] for h in self.hand_scores],
            "hands_played": self.hands_played,
            "winner_side": self.winner if self.winner >= 0 else None,
            "hand": None if self.hand is None else self.hand.view(seat).to_dict(),
        }
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "rules": self.rules.to_dict(),
            "players": self.players,
            "first_dealer": self.first_dealer,
            "hand_scores": self.hand_scores,
            "totals": self.totals[:],
            "winner": self.winner,
            "hand": None if self.hand is None else self.hand.to_json(),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> MatchState:
        rules = Ruleset(**data["rules"]).check()
        match = MatchState(rules, int(data["players"]), int(data["first_dealer"]))
        match.hand_scores = [[dict(s) for s in h] for h in data["hand_scores"]]
        match.totals = [int(x) for x in data["totals"]]
        match.winner = int(data["winner"])
        match.hand = None if data["hand"] is None else HandState.from_json(data["hand"])
        if match.hand is not None:  # the totals before it: the hands before it
            before = match.hand_scores[:match.hand.hand_number - 1]
            match.hand.match_totals = [sum(int(h[side]["total"]) for h in before) for side in (0, 1)]
        return match

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MatchState) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]


def action_of(event: Event) -> Action | None:
    """The player's action an event records (``None`` for consequences such as ``morto_taken``)."""
    from engine.actions import DRAW, TAKE_PILE, Discard, add_action, meld_action
    from engine.cards import parse, parse_many

    p = event.public
    if event.type == "drew":
        return DRAW
    if event.type == "took_pile":
        return TAKE_PILE
    if event.type == "discarded":
        return Discard(parse(p["card"]))
    if event.type == "melded":
        wild_as = p.get("wild_as")
        return meld_action(parse_many(p["cards"]), None if wild_as is None else parse(wild_as))
    if event.type == "added":
        return add_action(int(p["meld"]), parse_many(p["added"]))
    return None


def rebuild(rules: Ruleset, players: int, first_dealer: int, log: list[Event]) -> MatchState:
    """Replay an authoritative event log into the match it describes.

    Every action is applied again through the rules, and the events it causes must equal the ones
    logged: a log that was tampered with, or written by different rules, is refused.
    """
    match = MatchState(rules, players, first_dealer)
    expected: list[dict[str, Any]] = []
    for event in log:
        if expected:
            if event.to_json() != expected[0]:
                raise ValueError(f"the log diverges from the rules at {event.type}: {event.to_json()}")
            expected.pop(0)
            continue
        if event.type == "hand_started":
            deal = Deal.from_json(event.secret["deal"], rules, players)
            started = match.start_hand(deal=deal)
            if started.to_json() != event.to_json():
                raise ValueError("the log's hand_started does not match the deal it carries")
            continue
        action = action_of(event)
        if action is None:
            raise ValueError(f"unexpected {event.type} event in the log")
        produced = match.apply(action, event.seat)
        if produced[0].to_json() != event.to_json():
            raise ValueError(f"the log diverges from the rules at {event.type}")
        expected = [e.to_json() for e in produced[1:]]
    if expected:
        raise ValueError("the log ends in the middle of an action's consequences")
    return match

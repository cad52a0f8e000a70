"""One table in memory: the engine's match, the seats, the event log, and what each viewer sees.

A `LiveTable` holds everything needed to answer a call about the table without the database:
the `MatchState`, the seats (who plays, who is a bot now, automatic plays), the whole event log
(`entries`, entry `seq` at index `seq - 1`, see `log`), the annulment proposal, the answers of
idempotent requests. It does no I/O and knows nothing of asyncio: its table's actor
(`actor.TableActor`) is the one writer that changes it, persists the entries a change makes and
only then tells anyone about them.

Rebuilding a table (`LiveTable.restore`) replays its entries: moves through the engine again
(their events must be the logged ones), service facts by their kind's replay (`events.KINDS`).
Bots are rebuilt by making them choose again at every move they made, so their memory (and their
next move) is the same as in an uninterrupted run. A search bot (the expert) is offered only the
move it made: it remembers what it saw and did without searching again; its later choices, which
depend on the CPU its budget buys, are its own in any run.

Which bot plays a seat: its bot level (`BOTS_BY_LEVEL`): a bot seat's own, else the table's
`options.bot_level` (MEDIUM when unset), which is also the level of the bot that takes a player's
seat.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import Action, action_from_json
from engine.bots.base import Bot, make_bot
from engine.deal import Deal, commitment
from engine.events import Event
from engine.match import MatchState
from engine.rules import Ruleset, ruleset_from_spec
from engine.state import side_of
from services.game_session import events
from services.game_session.events import PHASES, meld_proto, timestamp
from services.game_session.log import Entry, Request

State = game_session_pb2.Table

#: Cap on the moves one bot turn (or one automatic play) may make (a bot always discards long before).
MAX_TURN_ACTIONS = 60

#: The engine's bot (`engine.bots.base.make_bot`'s kind) of each bot level (docs/game-session.md,
#: "Bot levels"); an unspecified level is the table's, and the table's unspecified level MEDIUM.
BOTS_BY_LEVEL: dict[int, str] = {
    common_pb2.BOT_LEVEL_EASY: "random",
    common_pb2.BOT_LEVEL_MEDIUM: "heuristic",
    common_pb2.BOT_LEVEL_HARD: "expert",
}
#: Bots whose every decision spends a CPU budget (`BURACO_GAME_SESSION_EXPERT_BUDGET_MS`): each
#: decision is made in the replica's decision thread, not on the event loop that every table of
#: the replica shares, and its move is a change of its own (`timers.SearchDecision`).
SEARCH_BOTS = frozenset({"expert"})


class TurnKey(NamedTuple):
    """Whose turn it is and in which phase: a turn's timer belongs to one key, and a timer that
    fires for a key that is no longer the table's does nothing."""

    hand_number: int
    seat: int
    phase: str


def ruleset_for(options: common_pb2.TableOptions) -> Ruleset:
    """The engine ruleset of a table's options (preset, overrides, match length); raises
    `engine.errors.RulesetError` / `ValueError` on bad overrides."""
    return ruleset_from_spec(ruleset_spec(options))


def ruleset_spec(options: common_pb2.TableOptions) -> dict[str, Any]:
    """The options' ruleset in the game record's form (`{"preset": ..., overrides...}`)."""
    spec: dict[str, Any] = {"preset": options.ruleset.preset}
    for key, raw in options.ruleset.overrides.items():
        try:
            spec[key] = json.loads(raw)
        except ValueError:
            spec[key] = raw
    spec["target"] = options.target_points if options.length == common_pb2.MATCH_LENGTH_POINTS else 0
    return spec


def hand_seed(master: str | None, table_name: str, hand_number: int) -> str:
    """A hand's shuffle seed, 64 lowercase hex digits: from `secrets`, or (tests only) derived from
    the master seed by HMAC-SHA256 of the table name and hand number, so two runs deal alike."""
    if master is None:
        return secrets.token_hex(32)
    return hmac.new(master.encode(), f"{table_name}|{hand_number}".encode(), hashlib.sha256).hexdigest()


@dataclass
class SeatState:
    seat: int
    player: str | None  # a player id (no `players/`), None for a bot seat
    bot_level: int = 0
    bot_controlled: bool = False
    streams: int = 0
    auto_plays: int = 0
    abandoned: bool = False
    takeover_reason: str = ""
    return_deadline_ms: int = 0

    @property
    def human(self) -> bool:
        return self.player is not None

    @property
    def acts_by_bot(self) -> bool:
        return self.player is None or self.bot_controlled

    def taken_by_bot(self, reason: str, return_deadline_ms: int = 0) -> None:
        """A bot plays the seat from now on: for good (its player left, or timed out too often),
        or until its disconnected player comes back by `return_deadline_ms`."""
        self.bot_controlled = True
        self.takeover_reason = reason
        self.abandoned = reason != "disconnected"
        self.return_deadline_ms = return_deadline_ms

    def returned(self) -> None:
        """The disconnected player is back and plays the seat again."""
        self.bot_controlled = False
        self.takeover_reason = ""
        self.abandoned = False


@dataclass
class ChatRoom:
    """A table's chat rules besides the log: who muted whom (`*`: an admin's table-wide mute of
    a sender) and each sender's recent messages (the rate limit)."""

    mutes: set[tuple[str, str]] = field(default_factory=set)
    recent: dict[str, list[float]] = field(default_factory=dict)

    def hides(self, viewer: str, sender: str) -> bool:
        """Whether `viewer` muted `sender` (their messages reach them without text)."""
        return (viewer, sender) in self.mutes


@dataclass
class Proposal:
    proposal_id: str
    proposer_seat: int
    voters: list[int]
    deadline_ms: int
    votes: dict[int, bool] = field(default_factory=dict)


class LiveTable:
    """A table in memory (see the module docstring)."""

    def __init__(
        self, table_id: str, description: game_session_pb2.Table, created_ms: int, *, expert_budget_ms: float = 50.0,
    ) -> None:
        self.table_id = table_id
        self.name = f"tables/{table_id}"
        self.description = description
        self.created_ms = created_ms
        self.options = description.options
        self.rules = ruleset_for(self.options)
        self.players = self.options.players
        self.match = MatchState(self.rules, self.players)
        self.seats = [
            SeatState(
                seat=s.seat,
                player=s.participant.player.removeprefix("players/") if s.participant.HasField("player") else None,
                bot_level=s.participant.bot,
            )
            for s in description.seats
        ]
        self.state: int = State.STATE_WAITING
        self.entries: list[Entry] = []
        self.requests: dict[tuple[str, str], Request] = {}
        self.proposal: Proposal | None = None
        self.proposals_made = 0
        self.turn_deadline_ms = 0
        #: the turn the last turn-timer event started (None before the first)
        self.turn: TurnKey | None = None
        self.hand_starts: list[int] = []  # seq of each hand_started
        self.compacted = 0  # entries before this index are compacted
        self.commitment = ""
        self.seed = ""
        self.last_event_ms = created_ms
        #: the lease's fencing epoch this copy writes under (0: a finished table, read only)
        self.epoch = 0
        #: chat mutes and each sender's recent messages (not in the log: mutes are rows of their own)
        self.chat = ChatRoom()
        #: the CPU budget of each decision of an expert bot (`BURACO_GAME_SESSION_EXPERT_BUDGET_MS`)
        self.expert_budget_ms = expert_budget_ms
        #: a search bot's turn under way, one decision per change: the turn its next decision is for
        self.bot_turn_continues: TurnKey | None = None
        #: the turn a search bot's decision is being made for, off the event loop (`timers.think`)
        self.thinking: TurnKey | None = None
        self._bots: dict[int, Bot] = {}

    # -- facts ----------------------------------------------------------------------------------
    @property
    def seq(self) -> int:
        return len(self.entries)

    @property
    def live(self) -> bool:
        return self.state in (State.STATE_WAITING, State.STATE_PLAYING)

    @property
    def tournament(self) -> str:
        """`tournaments/{tournament}` when a tournament created the table (its match cannot be
        annulled), else empty."""
        return self.description.tournament

    @property
    def competitive(self) -> bool:
        return self.options.mode == common_pb2.TABLE_MODE_COMPETITIVE

    def seat_of(self, player: str) -> int | None:
        for seat in self.seats:
            if seat.player == player:
                return seat.seat
        return None

    def humans(self) -> list[SeatState]:
        return [s for s in self.seats if s.human]

    @property
    def bot_level(self) -> int:
        """The table's bot level (`options.bot_level`, MEDIUM when unset)."""
        return self.options.bot_level or common_pb2.BOT_LEVEL_MEDIUM

    def seat_bot_level(self, seat: int) -> int:
        """The level of the bot that plays `seat` when a bot plays it: a bot seat's own level
        (unspecified: the table's), a player's seat the table's."""
        state = self.seats[seat]
        return (state.bot_level if not state.human else 0) or self.bot_level

    def bot_kind(self, seat: int) -> str:
        """The engine's bot (`make_bot`'s kind) that plays `seat` when a bot plays it."""
        return BOTS_BY_LEVEL[self.seat_bot_level(seat)]

    def bot(self, seat: int) -> Bot:
        """The seat's bot: deterministic for the table and seat (an expert bot's search spends
        `expert_budget_ms` of CPU a decision)."""
        bot = self._bots.get(seat)
        if bot is None:
            bot = self._bots[seat] = make_seat_bot(
                self.bot_kind(seat), f"{self.table_id}|{seat}", self.rules, self.expert_budget_ms)
        return bot

    def to_act(self) -> int:
        hand = self.match.hand
        if hand is None or hand.is_terminal() or self.state != State.STATE_PLAYING:
            return -1
        return hand.current_player()

    def current_turn(self) -> TurnKey | None:
        """The turn being played now (None when no hand is in play)."""
        hand = self.match.hand
        if hand is None or hand.is_terminal() or self.state != State.STATE_PLAYING:
            return None
        return TurnKey(hand.hand_number, hand.to_act, hand.phase)

    def phase(self) -> str:
        hand = self.match.hand
        return "draw" if hand is None else hand.phase

    @property
    def draw_seconds(self) -> float:
        return float(self.options.draw_seconds or 30)

    @property
    def play_seconds(self) -> float:
        return float(self.options.play_seconds or 60)

    # -- appending entries ----------------------------------------------------------------------
    def add(self, data: dict[str, Any], out: list[Entry], event: Event | None = None) -> Entry:
        entry = Entry(self.seq + 1, data, event)
        self.entries.append(entry)
        out.append(entry)
        self.last_event_ms = int(data["ms"])
        return entry

    def start_hand(self, now_ms: int, master_seed: str | None, out: list[Entry]) -> None:
        """Deal the next hand (fair deal: seed, commitment now, seed revealed at the hand's end)."""
        number = self.match.hands_played + 1
        self._compact_old_hands(self.seq + 1)
        seed = hand_seed(master_seed, self.name, number)
        started = self.match.start_hand(seed)
        self.seed = seed
        self.commitment = commitment(seed, self.name, number)
        self.state = State.STATE_PLAYING
        self.add(
            {"t": "hand_started", "ms": now_ms, "e": started.to_json(),
             "x": {"commitment": self.commitment, "seed": seed}},
            out, started,
        )

    def apply_action(self, action: Action, seat: int, by: str, now_ms: int, out: list[Entry]) -> None:
        """Apply a move through the engine (IllegalActionError leaves everything unchanged) and
        log its events with the service's facts."""
        events_made = self.match.apply(action, seat)
        for index, event in enumerate(events_made):
            data: dict[str, Any] = {"t": event.type, "ms": now_ms, "e": event.to_json()}
            if index == 0:
                data.update({"a": action.to_json(), "s": seat, "by": by})
            if event.type == "hand_ended":
                data["x"] = {"hand_number": self.match.hands_played, "seed": self.seed,
                             "match_scores": self.match.totals[:]}
            if event.type == "match_ended":
                data["x"] = {"outcomes": self.outcomes(annulled=False)}
                self.state = State.STATE_FINISHED
            self.add(data, out, event)

    def after_change(self, now_ms: int, master_seed: str | None, out: list[Entry]) -> None:
        """What follows a change by itself: the next deal after a hand ends, a turn timer when the
        turn or the phase changed."""
        if self.state == State.STATE_PLAYING and self.match.needs_deal():
            self.start_hand(now_ms, master_seed, out)
        turn = self.current_turn()
        if self.bot_turn_continues != turn:  # the search bot's turn is over (or its seat given back)
            self.bot_turn_continues = None
        if turn is None or turn == self.turn:
            return
        seconds = self.draw_seconds if turn.phase == "draw" else self.play_seconds
        deadline = now_ms + int(seconds * 1000)
        self.turn = turn
        self.turn_deadline_ms = deadline
        self.add({"t": "turn_timer", "ms": now_ms,
                  "x": {"seat": turn.seat, "phase": turn.phase, "deadline_ms": deadline}}, out)

    def outcomes(self, *, annulled: bool) -> list[dict[str, Any]]:
        winner = self.match.winner
        out = []
        for seat in self.seats:
            if seat.player is None:
                continue
            if annulled:
                outcome = "void"
            elif seat.abandoned or (seat.bot_controlled and seat.takeover_reason == "disconnected"):
                outcome = "abandoned"
            else:
                outcome = "won" if side_of(seat.seat) == winner else "lost"
            out.append({"player": seat.player, "seat": seat.seat, "outcome": outcome})
        return out

    def hand_cards(self, seat: int) -> list[str]:
        """The cards in a seat's hand now (revealed when a hand is aborted)."""
        from engine.cards import format_many

        hand = self.match.hand
        assert hand is not None
        return list(format_many(hand.hand_of(seat)))

    # -- compaction -----------------------------------------------------------------------------
    def _compact_old_hands(self, start_seq: int) -> None:
        """A hand starts at `start_seq`: keep it and the previous hand ready; compact the rest."""
        self.hand_starts.append(start_seq)
        if len(self.hand_starts) >= 3:
            self._compact_before(self.hand_starts[-3] - 1)

    def compact_finished(self, keep: int = 0) -> None:
        """The match is over: compact every entry but the last `keep` (the final change's, on its
        way to the streams). A finished table stays in memory a while for late replays and
        retries, which rebuild a proto from the JSON text; its encodings, most of its memory and
        of the time to free it, go now, one table at a time."""
        self._compact_before(len(self.entries) - keep)

    def _compact_before(self, upto: int) -> None:
        """Compact the entries before index `upto` (those not compacted yet)."""
        for entry in self.entries[self.compacted : upto]:
            entry.compact()
        self.compacted = max(self.compacted, upto)

    # -- replaying the log ----------------------------------------------------------------------
    def restore(self, texts: list[str]) -> None:
        """Rebuild the table from its log's entries (JSON texts, in order)."""
        for text in texts:
            entry = Entry.restored(self.seq + 1, text)
            self.entries.append(entry)
            self.replay(entry)
        if not self.live:  # read back for a replay or an export: its JSON text is enough
            self.compact_finished()
        for entry in self.entries[self.compacted :]:
            entry.seal(self.players)

    def replay(self, entry: Entry) -> None:
        """Apply one logged entry to a table being rebuilt (the entry was appended already)."""
        data = entry.data
        self.last_event_ms = int(data["ms"])
        if "rq" in data:
            scope, request_id, digest, count = data["rq"]
            self.requests[(scope, request_id)] = Request(digest, entry.seq, entry.seq + int(count) - 1)
        if "a" in data:
            self._replay_move(entry, data)
            return
        replay = events.kind(entry.type).replay
        if replay is not None:
            replay(self, entry)

    def _replay_move(self, entry: Entry, data: dict[str, Any]) -> None:
        seat = int(data["s"])
        action = action_from_json(data["a"])
        hand = self.match.hand
        if data.get("by") == "bot" and hand is not None:
            # the bot chooses again, so that its memory is what it was (its choice is the logged one);
            # a search bot is offered only the logged move: it remembers what it saw and did without
            # searching again (a budget's worth of CPU per move, for a choice its budget made anyway)
            if self.bot_kind(seat) in SEARCH_BOTS:
                self.bot(seat).choose(hand.view(seat), [action])
            else:
                self.bot(seat).choose(hand.view(seat), hand.legal_actions())
        produced = self.match.apply(action, seat)
        if produced[0].to_json() != data["e"]:
            raise ValueError(f"{self.name}: the log diverges from the rules at seq {entry.seq}")
        if self.match.is_over():
            self.state = State.STATE_FINISHED

    # what the service facts' replays (events.KINDS) do to the table
    def deal_logged(self, seq: int, deal: Deal, *, seed: str, commitment: str) -> None:
        self._compact_old_hands(seq)
        self.match.start_hand(deal=deal)
        self.seed = seed
        self.commitment = commitment
        self.state = State.STATE_PLAYING

    def turn_started(self, seat: int, phase: str, deadline_ms: int) -> None:
        hand = self.match.hand
        self.turn = TurnKey(hand.hand_number if hand else 0, seat, phase)
        self.turn_deadline_ms = deadline_ms

    def proposed(self, proposal_id: str, proposer_seat: int, voters: list[int], deadline_ms: int) -> None:
        self.proposals_made += 1
        self.proposal = Proposal(proposal_id, proposer_seat, voters, deadline_ms)

    def finished(self) -> None:
        self.state = State.STATE_FINISHED

    def cancelled(self) -> None:
        self.state = State.STATE_CANCELLED

    # -- views ------------------------------------------------------------------------------------
    def table_proto(self, owner_address: str) -> game_session_pb2.Table:
        table = game_session_pb2.Table()
        table.CopyFrom(self.description)
        table.state = self.state  # type: ignore[assignment]
        table.seq = self.seq
        table.match_scores[:] = self.match.totals
        table.owner_address = owner_address
        for seat_proto, seat in zip(table.seats, self.seats, strict=True):
            seat_proto.bot_controlled = seat.bot_controlled
            seat_proto.connected = seat.streams > 0
            seat_proto.bot_level = self._playing_bot_level(seat)  # type: ignore[assignment]
        return table

    def _playing_bot_level(self, seat: SeatState) -> int:
        """`Seat.bot_level`: the level of the bot that plays the seat now (0 while its player does)."""
        return self.seat_bot_level(seat.seat) if seat.acts_by_bot else common_pb2.BOT_LEVEL_UNSPECIFIED

    def snapshot(self, viewer: int | None, owner_address: str) -> game_session_pb2.TableSnapshot:
        snap = game_session_pb2.TableSnapshot(table=self.table_proto(owner_address))
        hand = self.match.hand
        if viewer is not None:
            snap.viewer_seat = viewer
        view = hand.view(viewer) if hand is not None else None
        sizes = view["hand_sizes"] if view is not None else [0] * self.players
        for seat in self.seats:
            snap.seats.add(
                seat=seat.seat,
                participant=self.description.seats[seat.seat].participant,
                hand_size=sizes[seat.seat],
                bot_controlled=seat.bot_controlled,
                connected=seat.streams > 0,
                auto_plays=seat.auto_plays,
                bot_level=self._playing_bot_level(seat),
            )
        melds = view["melds"] if view is not None else [[], []]
        taken = view["mortos_taken"] if view is not None else [False, False]
        for side in (0, 1):
            snap.sides.add(
                side=side,
                melds=[meld_proto(m) for m in melds[side]],
                morto_taken=taken[side],
                match_score=self.match.totals[side],
            )
        if view is not None:
            assert hand is not None
            if viewer is not None:
                snap.hand[:] = view["hand"]
            snap.discard_pile[:] = view["discard"]
            snap.stock_count = view["stock_count"]
            snap.hand_number = view["hand_number"]
            snap.dealer = view["dealer"]
            snap.to_act = max(view["to_act"], 0)
            snap.phase = PHASES[view["phase"]]
            snap.deal_commitment = self.commitment
            if self.turn_deadline_ms and self.state == State.STATE_PLAYING:
                snap.turn_deadline.CopyFrom(timestamp(self.turn_deadline_ms))
        if self.proposal is not None:
            snap.annulment.CopyFrom(proposal_proto(self.proposal))
        return snap


def make_seat_bot(kind: str, seed: str, rules: Ruleset, expert_budget_ms: float) -> Bot:
    """A seat's bot of `kind` (`BOTS_BY_LEVEL`' values). The expert gets its CPU budget a decision,
    counted on the CPU clock of the thread that decides (the process's would count the event loop's
    and gRPC's work too)."""
    if kind == "expert":
        from engine.bots.expert import ExpertBot

        return ExpertBot(seed, rules, budget_ms=expert_budget_ms, clock=time.thread_time)
    return make_bot(kind, seed, rules)


def proposal_proto(p: Proposal) -> game_session_pb2.AnnulmentProposed:
    return game_session_pb2.AnnulmentProposed(
        proposal_id=p.proposal_id,
        proposer_seat=p.proposer_seat,
        voter_seats=p.voters,
        deadline=timestamp(p.deadline_ms),
    )

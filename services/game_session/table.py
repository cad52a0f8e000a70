"""One table in memory: the engine's match, the seats, the event log, and what each viewer sees.

A `LiveTable` holds everything needed to answer a call about the table without the database:
the `MatchState`, the seats (who plays, who is a bot now, automatic plays), the whole event log
(`entries`, entry `seq` at index `seq - 1`), the annulment proposal, the answers of idempotent
requests. It does no I/O: `services.game_session.manager` persists the entries a change makes
(one transaction per change, group-committed) before anyone is told about them.

Log entries are JSON objects; the keys are short because every event of every table is one:

    t   type: an engine event type (hand_started, drew, ...) or a service one (turn_timer,
        auto_played, seat_taken_over, seat_returned, annulment_proposed, annulment_voted,
        annulment_resolved, chat, table_cancelled, match_ended for an annulment)
    ms  when (milliseconds since the epoch)
    e   the engine event, whole (`Event.to_json`, secret layer included): never sent as is
    x   the service's facts (commitment, seed, outcomes, chat text, ...)
    a   the player action that caused the event (first event of an action only), `s` its seat,
        `by` who chose it: "player", "bot" (a bot seat) or "auto" (a timeout)
    rq  [scope, request_id, request hash, number of entries]: the request that made this entry
        and the following ones (idempotent retries are answered from the log)

Rebuilding a table (`LiveTable.restore`) replays the entries: actions through the engine again
(their events must be the logged ones), service facts onto the seats. Bots are rebuilt by making
them choose again at every move they made, so their memory (and their next move) is the same as
in an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf.timestamp_pb2 import Timestamp

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import Action, action_from_json
from engine.bots.base import Bot, make_bot
from engine.deal import Deal, commitment
from engine.events import Event
from engine.match import MatchState
from engine.rules import Ruleset, ruleset_from_spec
from engine.state import side_of
from services.game_session import wire

TableEvent = game_session_pb2.TableEvent
State = game_session_pb2.Table


def to_json(data: Any) -> str:
    """A log entry's JSON text, compact (as `json.dumps(data, separators=(",", ":"))` writes it,
    but UTF-8 rather than `\\u` escapes): orjson, about ten times faster than the standard library
    on these small dicts (measured in the service: 1-2% less CPU per action at 2,000 actions/s)."""
    return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()


def from_json(text: str | bytes) -> Any:
    """A log entry's data from its JSON text."""
    return orjson.loads(text)


#: Engine event types whose content depends on the viewer (a private layer).
PRIVATE_TYPES = frozenset({"hand_started", "drew", "morto_taken"})
#: Log entry types after which a table changes no more: its streams end with them.
FINAL_TYPES = frozenset({"match_ended", "table_cancelled"})
#: Cap on the actions one bot turn may take (a bot always discards long before).
MAX_BOT_TURN_ACTIONS = 60

_KIND = {"sequence": common_pb2.Meld.KIND_SEQUENCE, "group": common_pb2.Meld.KIND_GROUP}
_CANASTRA = {
    "none": common_pb2.Meld.CANASTRA_NONE,
    "dirty": common_pb2.Meld.CANASTRA_DIRTY,
    "clean": common_pb2.Meld.CANASTRA_CLEAN,
    "royal": common_pb2.Meld.CANASTRA_ROYAL,
    "ace_to_ace": common_pb2.Meld.CANASTRA_ACE_TO_ACE,
}
_PHASE = {
    "draw": game_session_pb2.TURN_PHASE_DRAW,
    "play": game_session_pb2.TURN_PHASE_PLAY,
    "hand_over": game_session_pb2.TURN_PHASE_HAND_OVER,
}
_END_REASON = {
    "went_out": game_session_pb2.HandEnded.REASON_WENT_OUT,
    "stock_exhausted": game_session_pb2.HandEnded.REASON_STOCK_EXHAUSTED,
    "aborted": game_session_pb2.HandEnded.REASON_ABORTED,
}
OUTCOMES = {
    "won": common_pb2.OUTCOME_WON,
    "lost": common_pb2.OUTCOME_LOST,
    "abandoned": common_pb2.OUTCOME_ABANDONED,
    "void": common_pb2.OUTCOME_VOID,
}
TAKEOVER_REASONS = {
    "timeouts": game_session_pb2.SeatTakenOver.REASON_TIMEOUTS,
    "disconnected": game_session_pb2.SeatTakenOver.REASON_DISCONNECTED,
    "left": game_session_pb2.SeatTakenOver.REASON_LEFT,
}


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


def timestamp(ms: int) -> Timestamp:
    stamp = Timestamp()
    set_millis(stamp, ms)
    return stamp


def set_millis(stamp: Timestamp, ms: int) -> None:
    """`stamp.FromMilliseconds(ms)` without its Python-level call chain (in place, on a field of a
    message being built: no Timestamp made and copied in)."""
    stamp.seconds, stamp.nanos = ms // 1000, ms % 1000 * 1_000_000


def meld_proto(data: dict[str, Any]) -> common_pb2.Meld:
    meld = common_pb2.Meld()
    _fill_meld(meld, data)
    return meld


def _fill_meld(meld: common_pb2.Meld, data: dict[str, Any]) -> None:
    """A public meld written into a message (a new one, or a field of an event being built)."""
    meld.SetInParent()
    meld.kind, meld.canastra = _KIND[data["kind"]], _CANASTRA[data["canastra"]]
    meld.cards.extend(data["cards"])


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


class Entry:
    """One logged event. Entries of the current and the previous hand are kept ready (the dict,
    the engine event, the protos built per viewer); older ones are compacted to their JSON text
    and parsed again on the rare reads (an old replay, an export, an old retry)."""

    __slots__ = ("_data", "_event", "frames", "raw", "request", "seq", "type")

    def __init__(self, seq: int, data: dict[str, Any], event: Event | None = None) -> None:
        self.seq = seq
        self.type = str(data["t"])
        self._data: dict[str, Any] | None = data
        self._event = event
        self.raw: str | None = None
        #: (scope, request_id) of the request that made this change, on its first entry, while the
        #: table is live in this process (`Play` streams answer requests with it)
        self.request: tuple[str, str] | None = None
        #: The TableEvent per viewer class (seat number, -1 spectators, -2 everyone), built,
        #: serialized and framed for the streams once (`wire.frame`).
        self.frames: dict[int, bytes] = {}

    @property
    def data(self) -> dict[str, Any]:
        if self._data is not None:
            return self._data
        assert self.raw is not None
        loaded: dict[str, Any] = from_json(self.raw)
        return loaded

    @property
    def event(self) -> Event | None:
        if self._event is not None:
            return self._event
        data = self.data
        if "e" not in data:
            return None
        event = Event.from_json(data["e"])
        if self._data is not None:
            self._event = event
        return event

    def compact(self) -> None:
        """Keep only the JSON text (old hands)."""
        self.seal()
        self.frames = {}

    def seal(self, players: int = 0, spectators: bool = True) -> None:
        """Once written and published: encode every viewer's form now, then drop the dicts and the
        engine event (the JSON text stays). A live table then holds a few objects per event
        instead of dozens, which keeps the garbage collector's passes short. A private event's
        spectator form is built only when `spectators` (someone watches now); a spectator who
        comes later and replays it gets it built from the JSON text."""
        if self._data is None:
            return
        if players:
            private = self.type in PRIVATE_TYPES
            if private:
                for viewer in range(players):
                    self.framed(viewer)
            if spectators or not private:
                self.framed(None)
        if self.raw is None:
            self.raw = to_json(self._data)
        self._data = None
        self._event = None

    def framed(self, viewer: int | None) -> bytes:
        """The event as `viewer` (a seat, None for a spectator) may see it, serialized and framed
        as an element of `TableChanges.events` (`wire.frame`)."""
        key = -1 if viewer is None else viewer
        if self.type not in PRIVATE_TYPES:
            key = -2  # one form for everyone
        cached = self.frames.get(key)
        if cached is None:
            cached = wire.frame(build_proto(self, viewer).SerializeToString())
            if self._data is not None:  # a sealed entry keeps the forms it had
                self.frames[key] = cached
        return cached

    def proto(self, viewer: int | None) -> TableEvent:
        """The event as `viewer` may see it, as a message (a unary call's answer)."""
        return TableEvent.FromString(wire.unframe(self.framed(viewer)))


@dataclass
class Proposal:
    proposal_id: str
    proposer_seat: int
    voters: list[int]
    deadline_ms: int
    votes: dict[int, bool] = field(default_factory=dict)


@dataclass
class Request:
    """An idempotent request already applied: its hash and the entries it made."""

    digest: str
    first_seq: int
    last_seq: int


class LiveTable:
    """A table in memory (see the module docstring). Not thread-safe: the manager serialises
    changes with `lock`."""

    def __init__(self, table_id: str, description: game_session_pb2.Table, created_ms: int) -> None:
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
        self.timer_key: tuple[int, int, str] | None = None
        self.hand_starts: list[int] = []  # seq of each hand_started
        self.compacted = 0  # entries before this index are compacted
        self.commitment = ""
        self.seed = ""
        self.last_event_ms = created_ms
        self.epoch = 0
        self.lost = False  # set when the table can no longer be trusted (lease lost, write failed)
        self._bots: dict[int, Bot] = {}

    # -- facts ----------------------------------------------------------------------------------
    @property
    def seq(self) -> int:
        return len(self.entries)

    @property
    def live(self) -> bool:
        return self.state in (State.STATE_WAITING, State.STATE_PLAYING)

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

    def bot(self, seat: int) -> Bot:
        """The seat's bot: deterministic for the table and seat."""
        bot = self._bots.get(seat)
        if bot is None:
            level = self.seats[seat].bot_level
            kind = "random" if level == common_pb2.BOT_LEVEL_EASY else "heuristic"
            bot = self._bots[seat] = make_bot(kind, f"{self.table_id}|{seat}", self.rules)
        return bot

    def to_act(self) -> int:
        hand = self.match.hand
        if hand is None or hand.is_terminal() or self.state != State.STATE_PLAYING:
            return -1
        return hand.current_player()

    def phase(self) -> str:
        hand = self.match.hand
        return "draw" if hand is None else hand.phase

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
            {
                "t": "hand_started",
                "ms": now_ms,
                "e": started.to_json(),
                "x": {"commitment": self.commitment, "seed": seed},
            },
            out,
            started,
        )

    def _compact_old_hands(self, start_seq: int) -> None:
        """A hand starts at `start_seq`: keep it and the previous hand ready; compact the rest."""
        self.hand_starts.append(start_seq)
        if len(self.hand_starts) >= 3:
            self._compact_before(self.hand_starts[-3] - 1)

    def compact_finished(self, keep: int = 0) -> None:
        """The match is over: compact every entry but the last `keep` (the final change's, on its
        way to the streams). A finished table stays in memory a while for late replays and
        retries, which rebuild a proto from the JSON text; its protos, most of its memory and of
        the time to free it, go now, one table at a time (freeing them when the scan evicted the
        finished tables together paused the replica for 90-140 ms every 3 s at 1,500 actions/s)."""
        self._compact_before(len(self.entries) - keep)

    def _compact_before(self, upto: int) -> None:
        """Compact the entries before index `upto` (those not compacted yet)."""
        for entry in self.entries[self.compacted : upto]:
            entry.compact()
        self.compacted = max(self.compacted, upto)

    def apply_action(self, action: Action, seat: int, by: str, now_ms: int, out: list[Entry]) -> None:
        """Apply a move through the engine (IllegalActionError leaves everything unchanged) and
        log its events with the service's facts; deals the next hand when one ends."""
        events = self.match.apply(action, seat)
        for index, event in enumerate(events):
            data: dict[str, Any] = {"t": event.type, "ms": now_ms, "e": event.to_json()}
            if index == 0:
                data.update({"a": action.to_json(), "s": seat, "by": by})
            if event.type == "hand_ended":
                data["x"] = {
                    "hand_number": self.match.hands_played,
                    "seed": self.seed,
                    "match_scores": self.match.totals[:],
                }
            if event.type == "match_ended":
                data["x"] = {"outcomes": self.outcomes(annulled=False)}
                self.state = State.STATE_FINISHED
            self.add(data, out, event)

    def after_change(self, now_ms: int, master_seed: str | None, out: list[Entry]) -> None:
        """What follows a change by itself: the next deal after a hand ends, a turn timer when the
        turn or the phase changed."""
        hand = self.match.hand
        if self.state == State.STATE_PLAYING and self.match.needs_deal():
            self.start_hand(now_ms, master_seed, out)
            hand = self.match.hand
        if self.state != State.STATE_PLAYING or hand is None or hand.is_terminal():
            return
        key = (hand.hand_number, hand.to_act, hand.phase)
        if key != self.timer_key:
            seconds = self.draw_seconds if hand.phase == "draw" else self.play_seconds
            deadline = now_ms + int(seconds * 1000)
            self.timer_key = key
            self.turn_deadline_ms = deadline
            self.add(
                {
                    "t": "turn_timer",
                    "ms": now_ms,
                    "x": {"seat": hand.to_act, "phase": hand.phase, "deadline_ms": deadline},
                },
                out,
            )

    @property
    def draw_seconds(self) -> float:
        return float(self.options.draw_seconds or 30)

    @property
    def play_seconds(self) -> float:
        return float(self.options.play_seconds or 60)

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

    # -- replaying the log ----------------------------------------------------------------------
    def replay(self, entry: Entry) -> None:
        """Apply one logged entry to a table being rebuilt (the entry was appended already)."""
        data = entry.data
        kind = entry.type
        ms = int(data["ms"])
        self.last_event_ms = ms
        if "rq" in data:
            scope, request_id, digest, count = data["rq"]
            self.requests[(scope, request_id)] = Request(digest, entry.seq, entry.seq + int(count) - 1)
        if kind == "hand_started":
            event = entry.event
            assert event is not None
            self._compact_old_hands(entry.seq)
            self.match.start_hand(deal=Deal.from_json(event.secret["deal"], self.rules, self.players))
            self.seed = data["x"]["seed"]
            self.commitment = data["x"]["commitment"]
            self.state = State.STATE_PLAYING
        elif "a" in data:
            seat = int(data["s"])
            action = action_from_json(data["a"])
            hand = self.match.hand
            if data.get("by") == "bot" and hand is not None:
                # the bot chooses again, so that its memory is what it was (its choice is the logged one)
                self.bot(seat).choose(hand.view(seat), hand.legal_actions())
            produced = self.match.apply(action, seat)
            if produced[0].to_json() != data["e"]:
                raise ValueError(f"{self.name}: the log diverges from the rules at seq {entry.seq}")
            if self.match.is_over():
                self.state = State.STATE_FINISHED
        elif kind == "turn_timer":
            self.turn_deadline_ms = int(data["x"]["deadline_ms"])
            hand = self.match.hand
            self.timer_key = (hand.hand_number if hand else 0, int(data["x"]["seat"]), str(data["x"]["phase"]))
        elif kind == "auto_played":
            self.seats[int(data["x"]["seat"])].auto_plays = int(data["x"]["count"])
        elif kind == "seat_taken_over":
            x = data["x"]
            taken = self.seats[int(x["seat"])]
            taken.bot_controlled = True
            taken.takeover_reason = str(x["reason"])
            taken.abandoned = x["reason"] != "disconnected"
            taken.return_deadline_ms = int(x.get("return_deadline_ms", 0))
        elif kind == "seat_returned":
            back = self.seats[int(data["x"]["seat"])]
            back.bot_controlled = False
            back.takeover_reason = ""
            back.abandoned = False
        elif kind == "annulment_proposed":
            x = data["x"]
            self.proposals_made += 1
            self.proposal = Proposal(
                x["proposal_id"], int(x["proposer_seat"]), list(x["voters"]), int(x["deadline_ms"])
            )
        elif kind == "annulment_voted":
            if self.proposal is not None:
                self.proposal.votes[int(data["x"]["seat"])] = bool(data["x"]["approve"])
        elif kind == "annulment_resolved":
            self.proposal = None
        elif kind == "table_cancelled":
            self.state = State.STATE_CANCELLED
        if kind == "match_ended":
            self.state = State.STATE_FINISHED

    def restore(self, rows: list[dict[str, Any]]) -> None:
        for data in rows:
            entry = Entry(self.seq + 1, data)
            self.entries.append(entry)
            self.replay(entry)
        if not self.live:  # read back for a replay or an export: its JSON text is enough
            self.compact_finished()
        for entry in self.entries[self.compacted :]:
            entry.seal(self.players)

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
        return table

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
            snap.phase = _PHASE[view["phase"]]
            snap.deal_commitment = self.commitment
            if self.turn_deadline_ms and self.state == State.STATE_PLAYING:
                snap.turn_deadline.CopyFrom(timestamp(self.turn_deadline_ms))
        if self.proposal is not None:
            snap.annulment.CopyFrom(proposal_proto(self.proposal))
        return snap


def proposal_proto(p: Proposal) -> game_session_pb2.AnnulmentProposed:
    return game_session_pb2.AnnulmentProposed(
        proposal_id=p.proposal_id,
        proposer_seat=p.proposer_seat,
        voter_seats=p.voters,
        deadline=timestamp(p.deadline_ms),
    )


def build_proto(entry: Entry, viewer: int | None) -> TableEvent:
    """The TableEvent of a log entry for `viewer`: the public layer, plus the viewer's private one."""
    data = entry.data
    out = TableEvent(seq=entry.seq)
    # The frequent events are filled in place (a sub-message built, then copied in, costs twice as
    # much, and a meld's cards are copied twice): every entry is built for every viewer class.
    set_millis(out.time, int(data["ms"]))
    kind = entry.type
    x: dict[str, Any] = data.get("x", {})
    event = entry.event
    p: dict[str, Any] = event.for_seat(viewer) if event is not None else {}
    if kind == "hand_started":
        out.hand_started.CopyFrom(
            game_session_pb2.HandStarted(
                hand_number=p["hand_number"],
                dealer=p["dealer"],
                deal_commitment=x["commitment"],
                hand=p.get("hand", []),
                to_act=p["first"],
                stock_count=p["stock_count"],
            )
        )
    elif kind == "drew":
        drawn = out.card_drawn
        drawn.SetInParent()
        drawn.seat, drawn.card, drawn.stock_count = p["seat"], p.get("card", ""), p["stock_count"]
    elif kind == "took_pile":
        taken_pile = out.discard_taken
        taken_pile.SetInParent()
        taken_pile.seat = p["seat"]
        taken_pile.cards.extend(p["cards"])
    elif kind == "melded":
        laid = out.meld_laid
        laid.SetInParent()
        laid.seat, laid.side, laid.meld_index = p["seat"], p["side"], p["meld"]
        _fill_meld(laid.meld, p)
    elif kind == "added":
        extended = out.meld_extended
        extended.SetInParent()
        extended.seat, extended.side, extended.meld_index = p["seat"], p["side"], p["meld"]
        extended.cards.extend(p["added"])
        _fill_meld(extended.meld, p)
    elif kind == "discarded":
        discarded = out.card_discarded
        discarded.SetInParent()
        discarded.seat, discarded.card = p["seat"], p["card"]
    elif kind == "morto_taken":
        out.morto_taken.CopyFrom(
            game_session_pb2.MortoTaken(
                seat=p["seat"],
                side=p["side"],
                kind=game_session_pb2.MortoTaken.KIND_DIRECT
                if p["direct"]
                else game_session_pb2.MortoTaken.KIND_INDIRECT,
                cards=p.get("cards", []),
            )
        )
    elif kind == "morto_to_stock":
        out.morto_became_stock.CopyFrom(game_session_pb2.MortoBecameStock(side=p["side"], stock_count=p["stock_count"]))
    elif kind == "hand_ended":
        ended = game_session_pb2.HandEnded(
            hand_number=int(x["hand_number"]),
            reason=_END_REASON[str(p.get("reason", x.get("reason")))],
            match_scores=x["match_scores"],
            seed=x["seed"],
            hands=[
                game_session_pb2.HandReveal(seat=s, cards=c) for s, c in enumerate(p.get("hands", x.get("hands", [])))
            ],
            scores=[common_pb2.SideScore(side=side, **score) for side, score in enumerate(p.get("score", []))],
        )
        if p.get("reason") == "went_out" and int(p["seat"]) >= 0:
            ended.went_out_seat = int(p["seat"])
        out.hand_ended.CopyFrom(ended)
    elif kind == "match_ended":
        ended_match = game_session_pb2.MatchEnded(
            outcomes=[
                common_pb2.PlayerOutcome(
                    player=f"players/{o['player']}", seat=o["seat"], outcome=OUTCOMES[o["outcome"]]
                )
                for o in x["outcomes"]
            ],
            match_scores=p.get("totals", x.get("match_scores", [])),
            annulled=bool(x.get("annulled", False)),
        )
        if not ended_match.annulled:
            ended_match.winning_side = int(p["winner_side"])
        out.match_ended.CopyFrom(ended_match)
    elif kind == "turn_timer":
        timer = out.turn_timer_started
        timer.SetInParent()
        timer.seat, timer.phase = x["seat"], _PHASE[x["phase"]]
        set_millis(timer.deadline, int(x["deadline_ms"]))
    elif kind == "auto_played":
        out.auto_played.CopyFrom(game_session_pb2.AutoPlayed(seat=x["seat"], count=x["count"]))
    elif kind == "seat_taken_over":
        taken = game_session_pb2.SeatTakenOver(seat=x["seat"], reason=TAKEOVER_REASONS[x["reason"]])
        if x.get("return_deadline_ms"):
            taken.return_deadline.CopyFrom(timestamp(int(x["return_deadline_ms"])))
        out.seat_taken_over.CopyFrom(taken)
    elif kind == "seat_returned":
        out.seat_returned.CopyFrom(game_session_pb2.SeatReturned(seat=x["seat"], player=f"players/{x['player']}"))
    elif kind == "annulment_proposed":
        out.annulment_proposed.CopyFrom(
            game_session_pb2.AnnulmentProposed(
                proposal_id=x["proposal_id"],
                proposer_seat=x["proposer_seat"],
                voter_seats=x["voters"],
                deadline=timestamp(int(x["deadline_ms"])),
            )
        )
    elif kind == "annulment_voted":
        out.annulment_voted.CopyFrom(
            game_session_pb2.AnnulmentVoted(proposal_id=x["proposal_id"], seat=x["seat"], approve=x["approve"])
        )
    elif kind == "annulment_resolved":
        out.annulment_resolved.CopyFrom(
            game_session_pb2.AnnulmentResolved(proposal_id=x["proposal_id"], approved=x["approved"])
        )
    elif kind == "chat":
        chat = game_session_pb2.ChatMessage(sender=f"players/{x['sender']}", text=x["text"])
        if x.get("seat") is not None:
            chat.seat = int(x["seat"])
        out.chat_message.CopyFrom(chat)
    elif kind == "table_cancelled":
        out.table_cancelled.CopyFrom(game_session_pb2.TableCancelled(reason=x.get("reason", "")))
    return out


def muted_chat(entry: Entry) -> bytes:
    """A chat event from a sender the viewer muted: the sequence number without the text (framed)."""
    out = entry.proto(None)
    out.chat_message.text = ""
    return wire.frame(out.SerializeToString())

"""Every kind of event a table's log holds, in one registry: for each, whether its content depends
on the viewer, how it is written for the streams (`TableEvent`), and what it does to a table
rebuilt from its log.

Engine events come from a player's (or bot's) move: the first event of a move carries the move
(`a` in the log entry) and is replayed by applying the move through the engine again
(`LiveTable.replay`), which re-creates the move's other events; those need no replay of their own
(but `match_ended`, which also ends the table). Service events are the service's own facts
(timers, seats, annulment, chat): each replays itself. Adding a kind: write its `fill` (and
`replay` for a service fact), add it to `KINDS`, and give it its message in the contract.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.timestamp_pb2 import Timestamp

from buraco.v1 import common_pb2, game_session_pb2
from engine.deal import Deal
from services.game_session import wire

if TYPE_CHECKING:
    from services.game_session.log import Entry
    from services.game_session.table import LiveTable

TableEvent = game_session_pb2.TableEvent
#: What `fill` writes from: the engine event's layer the viewer may see (`p`; empty for a service
#: fact) and the service's facts (`x`).
Fill = Callable[[TableEvent, dict[str, Any], dict[str, Any]], None]
Replay = Callable[["LiveTable", "Entry"], None]


@dataclass(frozen=True)
class EventKind:
    name: str
    #: the same for every viewer (False: an engine event with a private layer: each seat's own
    #: cards, and none for spectators)
    public: bool
    fill: Fill
    #: what the event does to a table rebuilt from its log (None: nothing beyond the move that
    #: made it, or nothing at all)
    replay: Replay | None = None
    #: the table changes no more after it: its streams end with it
    final: bool = False


# -- wire helpers ------------------------------------------------------------------------------------
_MELD_KIND = {"sequence": common_pb2.Meld.KIND_SEQUENCE, "group": common_pb2.Meld.KIND_GROUP}
_CANASTRA = {
    "none": common_pb2.Meld.CANASTRA_NONE,
    "dirty": common_pb2.Meld.CANASTRA_DIRTY,
    "clean": common_pb2.Meld.CANASTRA_CLEAN,
    "royal": common_pb2.Meld.CANASTRA_ROYAL,
    "ace_to_ace": common_pb2.Meld.CANASTRA_ACE_TO_ACE,
}
PHASES = {
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
_TAKEOVER_REASONS = {
    "timeouts": game_session_pb2.SeatTakenOver.REASON_TIMEOUTS,
    "disconnected": game_session_pb2.SeatTakenOver.REASON_DISCONNECTED,
    "left": game_session_pb2.SeatTakenOver.REASON_LEFT,
}


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
    meld.kind, meld.canastra = _MELD_KIND[data["kind"]], _CANASTRA[data["canastra"]]
    meld.cards.extend(data["cards"])


# -- engine events ---------------------------------------------------------------------------------
# The frequent events are filled in place (a sub-message built, then copied in, costs twice as
# much, and a meld's cards are copied twice): every event is built for every viewer class.

def _hand_started(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.hand_started.CopyFrom(game_session_pb2.HandStarted(
        hand_number=p["hand_number"], dealer=p["dealer"], deal_commitment=x["commitment"],
        hand=p.get("hand", []), to_act=p["first"], stock_count=p["stock_count"],
    ))


def _replay_hand_started(table: LiveTable, entry: Entry) -> None:
    event = entry.event
    assert event is not None
    x = entry.data["x"]
    table.deal_logged(entry.seq, Deal.from_json(event.secret["deal"], table.rules, table.players),
                      seed=x["seed"], commitment=x["commitment"])


def _drew(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    drawn = out.card_drawn
    drawn.SetInParent()
    drawn.seat, drawn.card, drawn.stock_count = p["seat"], p.get("card", ""), p["stock_count"]


def _took_pile(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    taken = out.discard_taken
    taken.SetInParent()
    taken.seat = p["seat"]
    taken.cards.extend(p["cards"])


def _melded(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    laid = out.meld_laid
    laid.SetInParent()
    laid.seat, laid.side, laid.meld_index = p["seat"], p["side"], p["meld"]
    _fill_meld(laid.meld, p)


def _added(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    extended = out.meld_extended
    extended.SetInParent()
    extended.seat, extended.side, extended.meld_index = p["seat"], p["side"], p["meld"]
    extended.cards.extend(p["added"])
    _fill_meld(extended.meld, p)


def _discarded(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    discarded = out.card_discarded
    discarded.SetInParent()
    discarded.seat, discarded.card = p["seat"], p["card"]


def _morto_taken(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    kind = game_session_pb2.MortoTaken.KIND_DIRECT if p["direct"] else game_session_pb2.MortoTaken.KIND_INDIRECT
    out.morto_taken.CopyFrom(game_session_pb2.MortoTaken(
        seat=p["seat"], side=p["side"], kind=kind, cards=p.get("cards", [])))


def _morto_to_stock(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.morto_became_stock.CopyFrom(game_session_pb2.MortoBecameStock(side=p["side"], stock_count=p["stock_count"]))


def _hand_ended(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    """A hand's end: the engine's (went out, stock exhausted), or an annulment's (aborted: the
    service's facts carry the reason and the hands)."""
    ended = game_session_pb2.HandEnded(
        hand_number=int(x["hand_number"]),
        reason=_END_REASON[str(p.get("reason", x.get("reason")))],
        match_scores=x["match_scores"],
        seed=x["seed"],
        hands=[game_session_pb2.HandReveal(seat=s, cards=c) for s, c in enumerate(p.get("hands", x.get("hands", [])))],
        scores=[common_pb2.SideScore(side=side, **score) for side, score in enumerate(p.get("score", []))],
    )
    if p.get("reason") == "went_out" and int(p["seat"]) >= 0:
        ended.went_out_seat = int(p["seat"])
    out.hand_ended.CopyFrom(ended)


def _match_ended(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    """A match's end: the engine's, or an annulment's (the service's facts carry the scores)."""
    ended = game_session_pb2.MatchEnded(
        outcomes=[
            common_pb2.PlayerOutcome(player=f"players/{o['player']}", seat=o["seat"], outcome=OUTCOMES[o["outcome"]])
            for o in x["outcomes"]
        ],
        match_scores=p.get("totals", x.get("match_scores", [])),
        annulled=bool(x.get("annulled", False)),
    )
    if not ended.annulled:
        ended.winning_side = int(p["winner_side"])
    out.match_ended.CopyFrom(ended)


def _replay_match_ended(table: LiveTable, entry: Entry) -> None:
    table.finished()


# -- service facts ---------------------------------------------------------------------------------
def _turn_timer(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    timer = out.turn_timer_started
    timer.SetInParent()
    timer.seat, timer.phase = x["seat"], PHASES[x["phase"]]
    set_millis(timer.deadline, int(x["deadline_ms"]))


def _replay_turn_timer(table: LiveTable, entry: Entry) -> None:
    x = entry.data["x"]
    table.turn_started(int(x["seat"]), str(x["phase"]), int(x["deadline_ms"]))


def _auto_played(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.auto_played.CopyFrom(game_session_pb2.AutoPlayed(seat=x["seat"], count=x["count"]))


def _replay_auto_played(table: LiveTable, entry: Entry) -> None:
    x = entry.data["x"]
    table.seats[int(x["seat"])].auto_plays = int(x["count"])


def _seat_taken_over(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    taken = game_session_pb2.SeatTakenOver(seat=x["seat"], reason=_TAKEOVER_REASONS[x["reason"]])
    if x.get("return_deadline_ms"):
        taken.return_deadline.CopyFrom(timestamp(int(x["return_deadline_ms"])))
    out.seat_taken_over.CopyFrom(taken)


def _replay_seat_taken_over(table: LiveTable, entry: Entry) -> None:
    x = entry.data["x"]
    table.seats[int(x["seat"])].taken_by_bot(str(x["reason"]), int(x.get("return_deadline_ms", 0)))


def _seat_returned(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.seat_returned.CopyFrom(game_session_pb2.SeatReturned(seat=x["seat"], player=f"players/{x['player']}"))


def _replay_seat_returned(table: LiveTable, entry: Entry) -> None:
    table.seats[int(entry.data["x"]["seat"])].returned()


def _annulment_proposed(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.annulment_proposed.CopyFrom(game_session_pb2.AnnulmentProposed(
        proposal_id=x["proposal_id"], proposer_seat=x["proposer_seat"], voter_seats=x["voters"],
        deadline=timestamp(int(x["deadline_ms"])),
    ))


def _replay_annulment_proposed(table: LiveTable, entry: Entry) -> None:
    x = entry.data["x"]
    table.proposed(str(x["proposal_id"]), int(x["proposer_seat"]), list(x["voters"]), int(x["deadline_ms"]))


def _annulment_voted(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.annulment_voted.CopyFrom(
        game_session_pb2.AnnulmentVoted(proposal_id=x["proposal_id"], seat=x["seat"], approve=x["approve"]))


def _replay_annulment_voted(table: LiveTable, entry: Entry) -> None:
    if table.proposal is not None:
        x = entry.data["x"]
        table.proposal.votes[int(x["seat"])] = bool(x["approve"])


def _annulment_resolved(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.annulment_resolved.CopyFrom(
        game_session_pb2.AnnulmentResolved(proposal_id=x["proposal_id"], approved=x["approved"]))


def _replay_annulment_resolved(table: LiveTable, entry: Entry) -> None:
    table.proposal = None


def _chat(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    chat = game_session_pb2.ChatMessage(sender=f"players/{x['sender']}", text=x["text"])
    if x.get("seat") is not None:
        chat.seat = int(x["seat"])
    out.chat_message.CopyFrom(chat)


def _table_cancelled(out: TableEvent, p: dict[str, Any], x: dict[str, Any]) -> None:
    out.table_cancelled.CopyFrom(game_session_pb2.TableCancelled(reason=x.get("reason", "")))


def _replay_table_cancelled(table: LiveTable, entry: Entry) -> None:
    table.cancelled()


KINDS: dict[str, EventKind] = {k.name: k for k in (
    # engine events
    EventKind("hand_started", public=False, fill=_hand_started, replay=_replay_hand_started),
    EventKind("drew", public=False, fill=_drew),
    EventKind("took_pile", public=True, fill=_took_pile),
    EventKind("melded", public=True, fill=_melded),
    EventKind("added", public=True, fill=_added),
    EventKind("discarded", public=True, fill=_discarded),
    EventKind("morto_taken", public=False, fill=_morto_taken),
    EventKind("morto_to_stock", public=True, fill=_morto_to_stock),
    EventKind("hand_ended", public=True, fill=_hand_ended),
    EventKind("match_ended", public=True, fill=_match_ended, replay=_replay_match_ended, final=True),
    # service facts
    EventKind("turn_timer", public=True, fill=_turn_timer, replay=_replay_turn_timer),
    EventKind("auto_played", public=True, fill=_auto_played, replay=_replay_auto_played),
    EventKind("seat_taken_over", public=True, fill=_seat_taken_over, replay=_replay_seat_taken_over),
    EventKind("seat_returned", public=True, fill=_seat_returned, replay=_replay_seat_returned),
    EventKind("annulment_proposed", public=True, fill=_annulment_proposed, replay=_replay_annulment_proposed),
    EventKind("annulment_voted", public=True, fill=_annulment_voted, replay=_replay_annulment_voted),
    EventKind("annulment_resolved", public=True, fill=_annulment_resolved, replay=_replay_annulment_resolved),
    EventKind("chat", public=True, fill=_chat),
    EventKind("table_cancelled", public=True, fill=_table_cancelled, replay=_replay_table_cancelled, final=True),
)}
#: Types after which a table changes no more: its streams end with them.
FINAL_TYPES = frozenset(name for name, k in KINDS.items() if k.final)
#: Types every viewer sees alike (no private layer).
PUBLIC_TYPES = frozenset(name for name, k in KINDS.items() if k.public)


def kind(name: str) -> EventKind:
    found = KINDS.get(name)
    if found is None:
        raise ValueError(f"unknown event type {name!r} in a table's log")
    return found


def build_proto(entry: Entry, viewer: int | None) -> TableEvent:
    """The TableEvent of a log entry for `viewer` (a seat; None: a spectator): the public layer,
    plus the viewer's private one."""
    data = entry.data
    out = TableEvent(seq=entry.seq)
    set_millis(out.time, int(data["ms"]))
    event = entry.event
    p: dict[str, Any] = event.for_seat(viewer) if event is not None else {}
    kind(entry.type).fill(out, p, data.get("x", {}))
    return out


def muted_chat(entry: Entry) -> bytes:
    """A chat event from a sender the viewer muted: its sequence number without the text (framed)."""
    out = entry.proto(None)
    out.chat_message.text = ""
    return wire.frame(out.SerializeToString())

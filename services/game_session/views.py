"""What a call shows of a table besides its snapshot: a seat's legal moves as hints, and the game
records of its finished hands. Each is a view over the table's committed state, taken by its actor
(`TableActor.read`)."""

from __future__ import annotations

import json
from typing import Any

from buraco.v1 import game_session_pb2
from engine.actions import DRAW, TAKE_PILE, AddCards, Discard, MeldCards
from engine.cards import format_many
from services.game_session.table import LiveTable, ruleset_spec

#: Most melds, and most additions, one answer lists.
MAX_HINTS = 200


def legal_moves(table: LiveTable, seat: int) -> game_session_pb2.GetLegalMovesResponse:
    """The seat's legal moves now, as hints (none when it is not the seat's turn)."""
    reply = game_session_pb2.GetLegalMovesResponse(seq=table.seq)
    hand = table.match.hand
    if hand is None or table.to_act() != seat or table.seats[seat].bot_controlled:
        return reply
    legal = hand.legal_actions()
    melds = sorted((a for a in legal if isinstance(a, MeldCards)), key=lambda a: (a.cards, a.wild_as or -1))
    adds = sorted((a for a in legal if isinstance(a, AddCards)), key=lambda a: (a.meld, a.cards))
    reply.can_draw = DRAW in legal
    reply.can_take_discard = TAKE_PILE in legal
    for meld in melds[:MAX_HINTS]:
        option = reply.melds.add(cards=format_many(meld.cards))
        if meld.wild_as is not None:
            option.wild_as = format_many([meld.wild_as])[0]
    for add in adds[:MAX_HINTS]:
        reply.additions.add(meld=add.meld, cards=format_many(add.cards))
    reply.discards[:] = format_many(sorted(a.card for a in legal if isinstance(a, Discard)))
    return reply


def records(table: LiveTable) -> game_session_pb2.ExportRecordsResponse:
    """The game record (shared/spec/game-record.md) of each finished hand, with its seed and the
    commitment published at its deal."""
    reply = game_session_pb2.ExportRecordsResponse()
    spec = ruleset_spec(table.options)
    record: dict[str, Any] | None = None
    number = 0
    seed = commitment = ""
    for entry in table.entries:
        data = entry.data
        if entry.type == "hand_started":
            event = entry.event
            assert event is not None
            number = int(event.public["hand_number"])
            seed, commitment = data["x"]["seed"], data["x"]["commitment"]
            record = {"ruleset": spec, "players": table.players, "dealer": int(event.public["dealer"]),
                      "deal": event.secret["deal"], "actions": []}
        elif record is not None and "a" in data:
            record["actions"].append({"seat": int(data["s"]), **data["a"]})
        if entry.type == "hand_ended" and "e" in data and record is not None:
            reply.hands.add(hand_number=number, record_json=json.dumps(record), seed=seed, commitment=commitment)
            record = None
    return reply

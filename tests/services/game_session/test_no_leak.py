"""No card leaks: everything a seat (or a spectator) receives holds only cards it may know.

Random games are played through the gRPC API by random-legal clients (one per seat) and one
spectator; every stream event and every response each of them gets is kept. At the end the
table's game records (ExportRecords: the deal and every action) are replayed through the engine,
which gives the true position after every event, and each message is checked against what its
recipient may know at that moment.

What a viewer may know is counted per card code, because the two decks make every card twice (a
message that names a 7H is no leak when the viewer holds a 7H; one that names two is when only
one of them is in sight). After each engine event, a viewer may know of

    its own hand + the pile + the melds + the cards it saw others take from the pile

(the last term drops by one when such a seat lays a copy down, since the viewer cannot tell which
copy went). That count only grows during a hand; once the hand ends (its seed revealed) nothing of
it is secret any more. A message at sequence number n may name no card more often than its
recipient's count after event n, within any one place the message shows (a hand, the pile, a
meld, one legal-move option; a snapshot's hand, pile and melds together). On top of that, exact
checks where the contract is exact: a dealt hand and a snapshot's hand are the recipient's own
cards, a drawn card and a morto's cards are shown to the drawer and the taker only, a spectator
holds no hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import Action
from engine.bots import make_bot
from engine.cards import CARD_STR, NCODES, parse
from engine.deal import Deal, commitment, deal_from_seed
from engine.errors import MalformedError
from engine.events import Event
from engine.replay import parse_record
from engine.rules import Ruleset, preset
from engine.state import HandState
from services.client.connection import TableConnection, play_seat
from services.common.auth import Kind

Viewer = int | None  # a seat, or None for a spectator


def _card(item: object) -> str | None:
    if isinstance(item, str) and 2 <= len(item) <= 3:
        with contextlib.suppress(MalformedError):
            return CARD_STR[parse(item)]
    return None


def card_groups(payload: Any) -> list[Counter[str]]:
    """The cards a message names, in groups that each name one copy once: every list of cards (a
    hand, a pile, a meld, one legal-move option), every single card field, and a snapshot's hand,
    pile and melds together (different places, so different copies)."""
    groups: list[Counter[str]] = []
    stack = [payload]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            snapshot = item.get("snapshot")
            if isinstance(snapshot, dict):
                places = list(snapshot.get("hand", [])) + list(snapshot.get("discardPile", []))
                for side in snapshot.get("sides", []):
                    for meld in side.get("melds", []):
                        places.extend(meld.get("cards", []))
                groups.append(Counter(c for c in map(_card, places) if c))
            # `wildAs` names the card a wild stands for, not a copy anyone holds
            stack.extend(v for k, v in item.items() if k != "wildAs")
        elif isinstance(item, list):
            cards = [c for c in map(_card, item) if c]
            if cards:
                groups.append(Counter(cards))
            stack.extend(x for x in item if isinstance(x, dict | list))
        else:
            card = _card(item)
            if card:
                groups.append(Counter([card]))
    return [group for group in groups if group]


def as_payload(message: Message | Mapping[str, Any]) -> Any:
    if isinstance(message, Message):
        return json_format.MessageToDict(message)
    return json.loads(json.dumps(message))


@dataclass
class HandKnowledge:
    """For one hand: after each engine event, what each viewer may know of (counts per card)."""

    players: int
    events: list[Event] = field(default_factory=list)
    allowed: list[dict[Viewer, list[int]]] = field(default_factory=list)  # after events[i]
    own_hands: list[list[list[int]]] = field(default_factory=list)  # after events[i], per seat


def replay_knowledge(rules: Ruleset, players: int, deal: Deal, dealer: int,
                     actions: Iterable[tuple[int, Action]]) -> HandKnowledge:
    state = HandState(rules, players, deal, dealer)
    viewers: list[Viewer] = [*range(players), None]
    # seen_in_hand[v][o][c]: copies of c the viewer v saw seat o take from the pile, not laid since
    seen_in_hand = {v: [[0] * NCODES for _ in range(players)] for v in viewers}
    out = HandKnowledge(players)

    def record(event: Event) -> None:
        public = [0] * NCODES
        for code in state.pile:
            public[code] += 1
        for side in state.melds:
            for meld in side:
                for code in meld.cards:
                    public[code] += 1
        snapshot: dict[Viewer, list[int]] = {}
        for v in viewers:
            counts = public[:]
            for o in range(players):
                if o == v:
                    for code in range(NCODES):
                        counts[code] += state.counts[o][code]
                else:
                    for code in range(NCODES):
                        counts[code] += seen_in_hand[v][o][code]
            snapshot[v] = counts
        out.events.append(event)
        out.allowed.append(snapshot)
        out.own_hands.append([c[:] for c in state.counts])

    def laid(seat: int, codes: Iterable[int]) -> None:
        for v in viewers:
            seen = seen_in_hand[v][seat]
            for code in codes:
                if seen[code]:
                    seen[code] -= 1

    record(state.started_event())
    for seat, action in actions:
        pile_before = state.pile[:]
        events = state.apply(action, seat)
        for event in events:
            if event.type == "took_pile":
                for v in viewers:
                    for code in pile_before:
                        seen_in_hand[v][seat][code] += 1
            elif event.type in ("melded", "added"):
                laid(seat, action.cards if hasattr(action, "cards") else ())
            elif event.type == "discarded":
                laid(seat, [parse(event.public["card"])])
            record(event)
    return out


#: The engine's event types and the stream's event kinds, one to one.
ENGINE_KINDS = {
    "hand_started": "hand_started", "drew": "card_drawn", "took_pile": "discard_taken",
    "melded": "meld_laid", "added": "meld_extended", "discarded": "card_discarded",
    "morto_taken": "morto_taken", "morto_to_stock": "morto_became_stock", "hand_ended": "hand_ended",
}


@dataclass
class Timeline:
    """Sequence number -> (hand knowledge, index of the last engine event at or before it)."""

    hands: list[HandKnowledge]
    at: dict[int, tuple[int, int]]  # seq -> (hand index, event index); absent: before any deal
    revealed_from: dict[int, int]  # hand index -> the seq of its hand_ended (from then on, no secret)
    last_seq: int

    def lookup(self, seq: int) -> tuple[HandKnowledge, int, bool] | None:
        """(knowledge of the hand in play at `seq`, engine event index, whether it is revealed)."""
        best = None
        for s in range(min(seq, self.last_seq), 0, -1):
            if s in self.at:
                best = self.at[s]
                break
        if best is None:
            return None
        hand_index, event_index = best
        revealed = seq >= self.revealed_from.get(hand_index, 1 << 62)
        return self.hands[hand_index], event_index, revealed


def build_timeline(public_log: list[tuple[int, str]], hands: list[HandKnowledge]) -> Timeline:
    """Align the stream's engine events (seq, kind), in order, with the replayed engine events."""
    at: dict[int, tuple[int, int]] = {}
    revealed: dict[int, int] = {}
    hand_index, event_index = -1, -1
    for seq, kind in public_log:
        if kind not in ENGINE_KINDS.values():
            continue
        if kind == "hand_started":
            hand_index, event_index = hand_index + 1, 0
        else:
            event_index += 1
        knowledge = hands[hand_index]
        expected = ENGINE_KINDS[knowledge.events[event_index].type]
        assert kind == expected, f"seq {seq}: the stream says {kind}, the replayed record {expected}"
        at[seq] = (hand_index, event_index)
        if kind == "hand_ended":
            revealed[hand_index] = seq
    assert hand_index == len(hands) - 1, "every hand of the records appears on the stream"
    return Timeline(hands, at, revealed, max((s for s, _ in public_log), default=0))


@dataclass
class Leak:
    viewer: Viewer
    seq: int
    what: str
    message: Any


def check_message(timeline: Timeline, viewer: Viewer, seq: int, message: Message | Mapping[str, Any],
                  kind: str = "") -> Iterator[Leak]:
    """The leaks of one message received by `viewer`, about the table at sequence number `seq`."""
    payload = as_payload(message)
    groups = card_groups(payload)
    found = timeline.lookup(seq)
    if found is None:
        if groups:
            yield Leak(viewer, seq, f"cards before any deal: {groups}", payload)
        return
    knowledge, index, revealed = found
    if revealed:
        return
    allowed = knowledge.allowed[index][viewer]
    for named in groups:
        over = {card: n for card, n in named.items() if n > allowed[parse(card)]}
        if over:
            yield Leak(viewer, seq, f"{kind}: more copies than it may know of: "
                       + ", ".join(f"{c} x{n} (may know {allowed[parse(c)]})" for c, n in over.items()), payload)
    yield from _exact_checks(knowledge, index, viewer, seq, payload, kind)


def _own(knowledge: HandKnowledge, index: int, seat: int) -> list[str]:
    counts = knowledge.own_hands[index][seat]
    return [CARD_STR[c] for c in range(NCODES) for _ in range(counts[c])]


def _exact_checks(knowledge: HandKnowledge, index: int, viewer: Viewer, seq: int, payload: Any,
                  kind: str) -> Iterator[Leak]:
    def walk(item: Any) -> Iterator[tuple[str, Any]]:
        if isinstance(item, dict):
            for key, value in item.items():
                yield key, value
                yield from walk(value)
        elif isinstance(item, list):
            for value in item:
                yield from walk(value)

    for key, value in walk(payload):
        if not isinstance(value, dict):
            continue
        if key == "handStarted" and sorted(value.get("hand", []), key=parse) != (
                [] if viewer is None else sorted(_own(knowledge, index, viewer), key=parse)):
            yield Leak(viewer, seq, f"{kind}: a dealt hand that is not the recipient's own", payload)
        own = [] if viewer is None else sorted(_own(knowledge, index, viewer), key=parse)
        if key == "snapshot" and value.get("hand") and sorted(value["hand"], key=parse) != own:
            yield Leak(viewer, seq, f"{kind}: a snapshot hand that is not the recipient's own", payload)
        if key == "cardDrawn" and value.get("card") and value.get("seat", 0) != viewer:
            yield Leak(viewer, seq, f"{kind}: another seat's drawn card", payload)
        if key == "mortoTaken" and value.get("cards") and value.get("seat", 0) != viewer:
            yield Leak(viewer, seq, f"{kind}: another seat's morto", payload)


# --- the checker checks: honest messages pass, planted leaks are caught (engine only) ------------------

def engine_event_message(event: Event, viewer: Viewer, seq: int) -> game_session_pb2.TableEvent:
    """An engine event as the stream would carry it to `viewer` (the kinds the checks look at)."""
    seen = event.for_seat(viewer)
    message = game_session_pb2.TableEvent(seq=seq)
    if event.type == "hand_started":
        message.hand_started.hand.extend(seen.get("hand", []))
        message.hand_started.stock_count = seen["stock_count"]
    elif event.type == "drew":
        message.card_drawn.seat = event.seat
        message.card_drawn.card = seen.get("card", "")
    elif event.type == "took_pile":
        message.discard_taken.seat = event.seat
        message.discard_taken.cards.extend(seen["cards"])
    elif event.type in ("melded", "added"):
        target = message.meld_laid if event.type == "melded" else message.meld_extended
        target.seat = event.seat
        target.meld.cards.extend(seen["cards"])
    elif event.type == "discarded":
        message.card_discarded.seat = event.seat
        message.card_discarded.card = seen["card"]
    elif event.type == "morto_taken":
        message.morto_taken.seat = event.seat
        message.morto_taken.cards.extend(seen.get("cards", []))
    elif event.type == "morto_to_stock":
        message.morto_became_stock.side = seen["side"]
    elif event.type == "hand_ended":
        for seat, cards in enumerate(seen["hands"]):
            message.hand_ended.hands.add(seat=seat, cards=cards)
    return message


def _engine_game(seed: str, players: int) -> tuple[HandKnowledge, Timeline, Deal]:
    rules = preset("aberto")
    deal = deal_from_seed(rules, players, seed)
    state = HandState(rules, players, deal)
    bots = [make_bot("random", seed=f"{seed}{s}") for s in range(players)]
    actions: list[tuple[int, Action]] = []
    while not state.is_terminal() and len(actions) < 4000:
        seat = state.current_player()
        action = bots[seat].choose(state.view(seat), state.legal_actions())
        state.apply(action, seat)
        actions.append((seat, action))
    knowledge = replay_knowledge(rules, players, deal, players - 1, actions)
    log = [(i + 1, ENGINE_KINDS[e.type]) for i, e in enumerate(knowledge.events)]
    return knowledge, build_timeline(log, [knowledge]), deal


@pytest.mark.parametrize("players", [2, 4])
def test_the_checker_passes_honest_messages_and_catches_planted_leaks(players: int) -> None:
    knowledge, timeline, deal = _engine_game(f"leak-check-{players}", players)
    viewers: list[Viewer] = [*range(players), None]
    for index, event in enumerate(knowledge.events):
        for viewer in viewers:
            message = engine_event_message(event, viewer, index + 1)
            assert list(check_message(timeline, viewer, index + 1, message)) == [], (index, viewer, event)

    # another seat's dealt hand, to each seat and to the spectator
    started = knowledge.events[0]
    for viewer in viewers:
        other = 0 if viewer != 0 else 1
        assert list(check_message(timeline, viewer, 1, engine_event_message(started, other, 1)))
    # another seat's drawn card
    draws = [(i, e) for i, e in enumerate(knowledge.events) if e.type == "drew"]
    assert len(draws) > 10
    for index, event in draws:
        viewer = (event.seat + 1) % players
        leaks = list(check_message(timeline, viewer, index + 1, engine_event_message(event, event.seat, index + 1)))
        assert leaks and "drawn card" in leaks[-1].what
    # a peek at the stock (its next 5 cards, in a chat line's words or anywhere else): caught by the
    # count alone at most moments of the hand
    caught = 0
    stock = list(deal.stock)
    for index, event in draws:
        drawn = sum(1 for e in knowledge.events[: index + 1] if e.type == "drew")
        peek = {"text": [CARD_STR[c] for c in stock[drawn: drawn + 5]]}
        caught += bool(list(check_message(timeline, event.seat, index + 1, peek)))
    assert caught >= 0.7 * len(draws)
    # the whole deal once the hand is over: no secret any more
    ended = len(knowledge.events)
    assert list(check_message(timeline, 0, ended, {"deal": deal.to_json()})) == []
    # the morto's cards, to a seat that did not take it
    mortos = [(i, e) for i, e in enumerate(knowledge.events) if e.type == "morto_taken"]
    for index, event in mortos:
        viewer = (event.seat + 1) % players
        assert list(check_message(timeline, viewer, index + 1, engine_event_message(event, event.seat, index + 1)))


# --- the property over real games through the gRPC API ---------------------------------------------

GAMES = [  # (players, preset, table id: the deal follows from it and the test deal seed)
    (2, "aberto", "leak-a2"),
    (4, "aberto", "leak-a4"),
    (2, "fechado", "leak-f2"),
    (4, "buraco_2005", "leak-b4"),
]


#: The stream methods whose messages are single events (SubscribeChanges' are reported per event).
STREAMS = ("Subscribe", "SubscribeChanges", "Play")


@dataclass
class Received:
    """Everything one viewer got: (method, message) in arrival order."""

    viewer: Viewer
    messages: list[tuple[str, Any]] = field(default_factory=list)

    def __call__(self, method: str, message: Any) -> None:
        self.messages.append((method, message))


def checks_of(method: str, message: Any) -> Iterator[tuple[int, Any, str]]:
    """(seq, payload, kind) pieces of one received message, each at the sequence number it shows."""
    if method in STREAMS:
        yield message.seq, message, f"stream {message.WhichOneof('event')}"
    elif isinstance(message, game_session_pb2.TableSnapshot):
        yield message.table.seq, {"snapshot": json_format.MessageToDict(message)}, method
    elif isinstance(message, game_session_pb2.GetLegalMovesResponse | game_session_pb2.Table):
        yield message.seq, message, method
    elif hasattr(message, "result"):
        result = message.result
        for event in result.events:
            yield event.seq, event, f"{method} result {event.WhichOneof('event')}"
        yield result.seq, result, f"{method} result"
    else:
        yield 1 << 40, message, method  # anything else: nothing secret is left only at the very end


@pytest.mark.parametrize(("players", "ruleset", "table_id"), GAMES)
async def test_no_seat_and_no_spectator_learns_a_hidden_card(
    cluster: Any, players: int, ruleset: str, table_id: str
) -> None:
    node = await cluster.start()
    rules = preset(ruleset)
    names = [f"{table_id}-p{s}" for s in range(players)]
    options = common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset=ruleset), players=players, length=common_pb2.MATCH_LENGTH_EXPRESS,
        mode=common_pb2.TABLE_MODE_PRACTICE, spectators_allowed=True, draw_seconds=300, play_seconds=600,
    )
    request = game_session_pb2.CreateTableRequest(
        request_id=f"create-{table_id}", table_id=table_id,
        table=game_session_pb2.Table(
            match_id=f"m-{table_id}", options=options,
            seats=[game_session_pb2.Seat(seat=s, participant=common_pb2.Participant(player=f"players/{name}"))
                   for s, name in enumerate(names)],
        ),
    )
    table = await cluster.stub().CreateTable(request, metadata=cluster.token(Kind.SERVICE, "matchmaking"))

    def connect(player: str, viewer: Viewer) -> tuple[TableConnection, Received]:
        token = cluster.minter.mint(Kind.PLAYER, player)
        # odd seats act on their Play stream, the others by unary calls beside SubscribeChanges
        connection = TableConnection(node.address, token, table.name, play=viewer is not None and viewer % 2 == 1)
        received = Received(viewer)
        connection.on_message = received
        return connection, received

    spectator, spectator_log = connect(f"{table_id}-watcher", None)
    seats = [connect(name, seat) for seat, name in enumerate(names)]
    await spectator.start()
    try:
        for connection, _ in seats:
            await connection.start()

        async def look_around(connection: TableConnection) -> None:
            """Before each action: the hints, and now and then the snapshot and the table."""
            await connection.hints()
            if connection.model.seq % 7 == 0:
                await connection.call("GetTableSnapshot", game_session_pb2.GetTableSnapshotRequest(table=table.name))
                await connection.call("GetTable", game_session_pb2.GetTableRequest(name=table.name))

        sent = await asyncio.wait_for(asyncio.gather(*(
            play_seat(c, make_bot("random", seed=f"{table_id}-{seat}"), rules,
                      pace=lambda c=c: look_around(c))  # type: ignore[misc]
            for seat, (c, _) in enumerate(seats)
        )), timeout=120)
        assert sum(sent) > 20
        await spectator.wait_until(lambda m: m.finished, timeout=10)
        export = await seats[0][0].call("ExportRecords", game_session_pb2.ExportRecordsRequest(table=table.name))
    finally:
        for connection, _ in seats:
            await connection.close()
        await spectator.close()

    # the truth: each hand's deal and actions, replayed
    hands = []
    public_log = [(m.seq, m.WhichOneof("event")) for method, m in spectator_log.messages if method in STREAMS]
    started = [m for method, m in spectator_log.messages
               if method in STREAMS and m.WhichOneof("event") == "hand_started"]
    for record in export.hands:
        data = json.loads(record.record_json)
        parsed = parse_record(data)
        # the deal is the one the revealed seed gives, and the commitment sent at the start holds
        assert parsed.state.deal == deal_from_seed(rules, players, record.seed)
        assert commitment(record.seed, table.name, record.hand_number) == record.commitment
        assert record.commitment == started[record.hand_number - 1].hand_started.deal_commitment
        hands.append(replay_knowledge(rules, players, parsed.state.deal, parsed.state.dealer, parsed.actions))
    assert hands, "the match was played"
    timeline = build_timeline(public_log, hands)

    leaks: list[Leak] = []
    for received in [spectator_log, *(r for _, r in seats)]:
        assert len(received.messages) > 20
        for method, message in received.messages:
            for seq, payload, kind in checks_of(method, message):
                leaks.extend(check_message(timeline, received.viewer, seq, payload, kind))
    assert not leaks, "\n".join(f"{leak.viewer} at {leak.seq}: {leak.what}" for leak in leaks[:10])

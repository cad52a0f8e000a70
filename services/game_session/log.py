"""A table's event log: its entries, their JSON text, and their encodings for the streams.

Log entries are JSON objects; the keys are short because every event of every table is one:

    t   type: an engine event type (hand_started, drew, ...) or a service one (turn_timer,
        auto_played, seat_taken_over, seat_returned, annulment_proposed, annulment_voted,
        annulment_resolved, chat, table_cancelled, match_ended for an annulment); `events.KINDS`
        has one entry per type
    ms  when (milliseconds since the epoch)
    e   the engine event, whole (`Event.to_json`, secret layer included): never sent as is
    x   the service's facts (commitment, seed, outcomes, chat text, ...)
    a   the player action that caused the event (first event of an action only), `s` its seat,
        `by` who chose it: "player", "bot" (a bot seat) or "auto" (a timeout)
    rq  [scope, request_id, request hash, number of entries]: the request that made this entry
        and the following ones (idempotent retries are answered from the log)

An entry lives in two phases. Open: made by a change, its content (`data`) may still take the
request that made it (`mark_request`). Sealed (`seal`), once written and published: its JSON text
is fixed, its event is encoded for every viewer class the streams will ask for, and the dict and
the engine event are let go (a live table then holds a few objects per event instead of dozens,
which keeps the garbage collector's passes short). A sealed entry never changes: a form nobody
asked for at the seal is built from the JSON text each time it is read, not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from buraco.v1 import game_session_pb2
from engine.events import Event
from services.game_session import events, wire

TableEvent = game_session_pb2.TableEvent


def to_json(data: Any) -> str:
    """A log entry's JSON text, compact (as `json.dumps(data, separators=(",", ":"))` writes it,
    but UTF-8 rather than `\\u` escapes), with orjson: these small dicts are written for every event."""
    return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS).decode()


def from_json(text: str | bytes) -> Any:
    """A log entry's data from its JSON text."""
    return orjson.loads(text)


class Encodings(NamedTuple):
    """An entry's event as the streams send it (`wire.frame` of a serialized `TableEvent`),
    made once at the seal: one form for everyone (a public event), or one per seat plus, when
    someone was watching, one for spectators (an event with a private layer)."""

    everyone: bytes | None = None
    seats: tuple[bytes, ...] = ()
    spectators: bytes | None = None

    def get(self, public: bool, viewer: int | None) -> bytes | None:
        if public:
            return self.everyone
        if viewer is None:
            return self.spectators
        return self.seats[viewer] if viewer < len(self.seats) else None


class SealedEntryError(RuntimeError):
    """An attempt to change an entry after its seal (a bug: the log would disagree with memory)."""


class Entry:
    """One logged event of a table (see the module docstring)."""

    # Every entry of a match stays in memory while its table is live (old hands as text only):
    # a slot more is 8 bytes times every event of every table, so what can be derived is.
    __slots__ = ("_data", "_encodings", "_event", "_text", "request", "seq", "type")

    def __init__(self, seq: int, data: dict[str, Any], event: Event | None = None) -> None:
        self.seq = seq
        self.type = str(data["t"])
        events.kind(self.type)  # an unknown type is refused here, when the entry is made or read
        self._data: dict[str, Any] | None = data
        self._event = event
        self._text: str | None = None
        self._encodings: Encodings | None = None
        #: (scope, request_id) of the request that made this change, on its first entry, while the
        #: table is live in this process (a `Play` stream names the requests it answers with it)
        self.request: tuple[str, str] | None = None

    @classmethod
    def restored(cls, seq: int, text: str) -> Entry:
        """An entry read back from the log: its JSON text, parsed on demand."""
        data = from_json(text)
        entry = cls(seq, data)
        entry._text = text
        return entry

    # -- content --------------------------------------------------------------------------------
    @property
    def sealed(self) -> bool:
        """Whether the entry is sealed (its dict let go)."""
        return self._data is None

    @property
    def public(self) -> bool:
        """Whether everyone sees the same event (no private layer)."""
        return self.type in events.PUBLIC_TYPES

    @property
    def data(self) -> dict[str, Any]:
        """The entry's content (parsed again from its JSON text once sealed; do not change it)."""
        if self._data is not None:
            return self._data
        assert self._text is not None
        loaded: dict[str, Any] = from_json(self._text)
        return loaded

    @property
    def event(self) -> Event | None:
        """The engine event the entry logs (None for a service fact)."""
        if self._event is not None:
            return self._event
        data = self.data
        if "e" not in data:
            return None
        event = Event.from_json(data["e"])
        if self._data is not None:
            self._event = event
        return event

    def mark_request(self, scope: str, request_id: str, digest: str, count: int) -> None:
        """Record on a change's first entry the idempotent request that made it and its `count`
        entries (before its text is written)."""
        if self._text is not None or self._data is None:
            raise SealedEntryError(f"entry {self.seq} is written already")
        self._data["rq"] = [scope, request_id, digest, count]
        self.request = (scope, request_id)

    def text(self) -> str:
        """The entry's JSON text, as it is written to the log (fixed from the first call on)."""
        if self._text is None:
            assert self._data is not None
            self._text = to_json(self._data)
        return self._text

    # -- the seal -------------------------------------------------------------------------------
    def seal(self, players: int = 0, spectators: bool = True) -> None:
        """Once written and published: encode the forms the streams will ask for (each seat's and,
        when `spectators` (someone watches now) or the event is public, the spectators'; none with
        `players` 0), fix the text, let the dict and the engine event go. A second seal does nothing."""
        if self._data is None:
            return
        if players:
            if self.type in events.PUBLIC_TYPES:
                encodings = Encodings(everyone=self._frame(None))
            else:
                encodings = Encodings(
                    seats=tuple(self._frame(seat) for seat in range(players)),
                    spectators=self._frame(None) if spectators else None,
                )
            self._encodings = encodings
        self.text()
        self._data = None
        self._event = None

    def compact(self) -> None:
        """Keep only the JSON text (an old hand's entry, read again rarely)."""
        self.seal()
        self._encodings = None

    @property
    def encoded(self) -> bool:
        """Whether the entry holds encodings for the streams (compacted entries hold none)."""
        return self._encodings is not None

    # -- what viewers see -------------------------------------------------------------------------
    def framed(self, viewer: int | None) -> bytes:
        """The event as `viewer` (a seat, None for a spectator) may see it, serialized and framed
        as an element of `TableChanges.events` (`wire.frame`)."""
        encodings = self._encodings
        if encodings is not None:
            form = encodings.get(self.type in events.PUBLIC_TYPES, viewer)
            if form is not None:
                return form
        return self._frame(viewer)

    def proto(self, viewer: int | None) -> TableEvent:
        """The event as `viewer` may see it, as a message (a unary call's answer)."""
        return TableEvent.FromString(wire.unframe(self.framed(viewer)))

    def _frame(self, viewer: int | None) -> bytes:
        return wire.frame(events.build_proto(self, viewer).SerializeToString())


@dataclass
class Request:
    """An idempotent request already applied: its hash and the entries it made."""

    digest: str
    first_seq: int
    last_seq: int

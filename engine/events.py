"""Events: what happened, named in the past tense, each with what every seat may see of it.

An ``Event`` keeps its facts in three layers, so that filtering cannot forget a field:

- ``public``: what every seat and every spectator sees;
- ``private``: per seat, what only that seat sees (the card it drew, its dealt hand, its morto);
- ``secret``: what no seat sees while the hand runs (the deal's stock and mortos); it exists only
  in the authoritative log, from which a table is rebuilt.

``for_seat(seat)`` merges ``public`` with that seat's ``private`` part; ``for_seat(None)`` is the
spectator form. ``to_json()`` is the whole event, for the log.

Event types: ``hand_started``, ``drew``, ``took_pile``, ``melded``, ``added``, ``discarded``,
``morto_taken``, ``morto_to_stock``, ``hand_ended``, ``match_ended``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: an event's facts as its maker takes them: ``facts[0]`` the maker, which returns the event's
#: ``(public, private)`` layers from the whole tuple
Facts = tuple[Any, ...]
Maker = Callable[[Facts], tuple[dict[str, Any], dict[int, dict[str, Any]]]]


class Event:
    """One event. Its layers are given (``public``, ``private``, ``secret``), or made from ``facts`` when
    first read: the engine makes an event at every action and most are never read (self-play,
    search), so the common ones defer their dictionaries and strings. Facts are immutable values
    taken at the moment of the event, so the layers made later say what they would have said then."""

    # written out rather than a dataclass, for the same reason as engine.actions.MeldCards: every
    # action makes one, and a compiled dataclass still builds itself in interpreted code
    __slots__ = ("_facts", "_private", "_public", "_secret", "seat", "type")

    def __init__(self, type: str, seat: int, public: dict[str, Any] | None = None,
                 private: dict[int, dict[str, Any]] | None = None, secret: dict[str, Any] | None = None,
                 facts: Facts | None = None) -> None:
        self.type = type
        self.seat = seat  # the seat that acted, or -1 for the table
        self._facts = facts
        self._public = public
        self._private = private
        self._secret = secret

    def _layers(self) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
        """The public and private layers, made now if not yet (from the facts, else empty)."""
        facts = self._facts
        if facts is not None:
            maker: Maker = facts[0]
            self._public, self._private = maker(facts)
            self._facts = None
        public = self._public
        if public is None:
            public = self._public = {}
        private = self._private
        if private is None:
            private = self._private = {}
        return public, private

    @property
    def public(self) -> dict[str, Any]:
        """What every seat and every spectator sees."""
        public = self._public
        return public if public is not None else self._layers()[0]

    @property
    def private(self) -> dict[int, dict[str, Any]]:
        """By seat: what only that seat sees."""
        private = self._private
        return private if private is not None else self._layers()[1]

    @property
    def secret(self) -> dict[str, Any]:
        """What no seat sees while the hand runs."""
        secret = self._secret
        if secret is None:
            secret = self._secret = {}
        return secret

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Event) and self.type == other.type and self.seat == other.seat
                and self.public == other.public and self.private == other.private and self.secret == other.secret)

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value: not hashable

    def __repr__(self) -> str:
        return (f"Event(type={self.type!r}, seat={self.seat!r}, public={self.public!r}, "
                f"private={self.private!r}, secret={self.secret!r})")

    def for_seat(self, seat: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "seat": self.seat, **self.public}
        if seat is not None and seat in self.private:
            out.update(self.private[seat])
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "seat": self.seat, "public": self.public}
        if self.private:
            out["private"] = {str(k): v for k, v in self.private.items()}
        if self.secret:
            out["secret"] = self.secret
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> Event:
        return Event(
            type=str(data["type"]),
            seat=int(data["seat"]),
            public=dict(data.get("public", {})),
            private={int(k): dict(v) for k, v in data.get("private", {}).items()},
            secret=dict(data.get("secret", {})),
        )

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

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Event:
    type: str
    seat: int  # the seat that acted, or -1 for the table
    public: dict[str, Any] = field(default_factory=dict)
    private: dict[int, dict[str, Any]] = field(default_factory=dict)
    secret: dict[str, Any] = field(default_factory=dict)

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

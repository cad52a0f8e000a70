"""What one seat sees: a read-only mapping whose fields are computed on first access.

``HandState.view(seat)`` returns a ``View``. It behaves like a dict for reading (``view["hand"]``,
``view.get``, ``in``, iteration, ``==`` with a dict) and ``to_dict()`` gives a plain, JSON-ready
dict. Fields are computed only when read, so a bot that needs the phase alone pays for the phase
alone; each field is computed once per view. A view describes the state at the moment it was taken:
reading a field not read before, after the state has changed, raises ``StaleViewError`` rather
than mixing two moments.

Fields: ``seat``, ``players``, ``hand_number``, ``dealer``, ``phase``, ``to_act``, ``hand_sizes``,
``melds`` (per side, each ``{"kind", "cards", "canastra"}``), ``discard`` (the whole pile, bottom
first), ``stock_count``, ``mortos_taken``, ``mortos_in_stock``, ``must_meld``, ``lone_card``,
``score`` (per side), ``match_totals`` (per side, the match's totals before this hand); ``hand``
(the seat's own cards, sorted) unless the viewer is a spectator; and once the hand is over
``went_out``, ``end_reason`` and ``hands`` (every hand, now public).

The hand is read through ``engine.position``'s protocol: this module does not import
``engine.state``, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from engine.cards import CARD_STR
from engine.errors import StaleViewError
from engine.position import ViewedPosition


def _hand(state: ViewedPosition, seat: int) -> list[str]:
    counts = state.counts[seat]
    return [CARD_STR[c] for c, n in enumerate(counts) if n for _ in range(n)]


_FIELDS: Final[dict[str, Callable[[ViewedPosition, int | None], Any]]] = {
    "seat": lambda s, seat: seat,
    "players": lambda s, seat: s.players,
    "hand_number": lambda s, seat: s.hand_number,
    "dealer": lambda s, seat: s.dealer,
    "phase": lambda s, seat: s.phase,
    "to_act": lambda s, seat: s.current_player(),
    "hand_sizes": lambda s, seat: s.sizes[:],
    "melds": lambda s, seat: [[m.to_json(s.rules) for m in side] for side in s.melds],
    "discard": lambda s, seat: [CARD_STR[c] for c in s.pile],
    "stock_count": lambda s, seat: len(s.stock),
    "mortos_taken": lambda s, seat: s.morto_taken[:],
    "mortos_in_stock": lambda s, seat: s.morto_to_stock[:],
    "must_meld": lambda s, seat: CARD_STR[s.must_meld] if s.must_meld >= 0 else None,
    "lone_card": lambda s, seat: CARD_STR[s.lone] if s.lone >= 0 else None,
    "score": lambda s, seat: s.score(),
    "match_totals": lambda s, seat: s.match_totals[:],
}
_OWN: Final[dict[str, Callable[[ViewedPosition, int | None], Any]]] = {
    "hand": lambda s, seat: _hand(s, seat) if seat is not None else None,
}
_OVER: Final[dict[str, Callable[[ViewedPosition, int | None], Any]]] = {
    "went_out": lambda s, seat: s.went_out,
    "end_reason": lambda s, seat: s.end_reason,
    "hands": lambda s, seat: [_hand(s, p) for p in range(s.players)],
}


#: the fields a seat's view shows while the hand runs (a spectator's lacks ``hand``): every
#: mapping offered to a bot as a seat's view shows exactly these (``engine.bots.expert.RolloutView``)
SEAT_KEYS: Final[tuple[str, ...]] = (*_FIELDS, *_OWN)

# the fields of a view, at 2 * (a seat's view) + (the hand over)
_KEYS: Final[list[tuple[str, ...]]] = [
    (*_FIELDS, *(("hand",) if own else ()), *(_OVER if over else ()))
    for own in (False, True) for over in (False, True)
]


class View(Mapping[str, Any]):
    __slots__ = ("_keys", "_seat", "_state", "_values", "_version")

    def __init__(self, state: ViewedPosition, seat: int | None) -> None:
        self._state = state
        self._seat = seat
        self._version = state.version
        self._values: dict[str, Any] | None = None  # made at the first read: many views are never read
        self._keys = _KEYS[(2 if seat is not None else 0) + (1 if state.phase == "hand_over" else 0)]

    def __getitem__(self, key: str) -> Any:
        values = self._values
        if values is None:
            values = self._values = {}
        elif key in values:
            return values[key]
        compute = _FIELDS.get(key) or (_OWN.get(key) if self._seat is not None else None) or (
            _OVER.get(key) if "went_out" in self._keys else None)
        if compute is None:
            raise KeyError(key)
        if self._state.version != self._version:
            raise StaleViewError(f"view field {key!r} read after the state changed; take a new view")
        value = compute(self._state, self._seat)
        values[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of every field (JSON-compatible)."""
        return {k: self[k] for k in self._keys}

    def __repr__(self) -> str:
        return f"View(seat={self._seat}, {self.to_dict()!r})"

"""Rulesets: every variant of the sources as plain data.

A ``Ruleset`` is a frozen dataclass. The eight named presets of the rules digest are in
``PRESETS``; a custom ruleset is a preset with some parameters overridden
(``ruleset_from_spec({"preset": "fechado", "target": 3000})``). ``Ruleset.check()`` refuses
inconsistent combinations with a message naming the parameters. ``docs/rules.md`` gives each
parameter's meaning and source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final, Literal

from engine.errors import RulesetError

StockOut = Literal["morto_then_end", "end"]
TieRule = Literal["starter", "extra_hand"]

HAND_SIZE: Final = 11
MORTO_SIZE: Final = 11
MIN_MELD: Final = 3
CANASTRA: Final = 7


@dataclass(frozen=True, slots=True)
class Ruleset:
    name: str = "custom"
    #: jokers in the deck: 0 (104 cards) or 4 (108 cards); 2 is accepted for house variants
    jokers: int = 4
    #: groups of one rank ("trincas") are melds; otherwise sequences only
    groups: bool = True
    #: a group of 2s is allowed (only meaningful with ``groups``)
    groups_of_twos: bool = True
    #: a sequence may hold natural aces at both ends (A-2-...-K-A, 14 cards)
    ace_to_ace: bool = True
    two_value: int = 10
    joker_value: int = 20
    ace_value: int = 15
    high_value: int = 10  # 8..K
    low_value: int = 5  # 3..7
    bonus_dirty: int = 100
    bonus_clean: int = 200
    #: bonus of a clean 13-card sequence (A..K or 2..A); ``None``: no such kind, it scores as clean
    bonus_royal: int | None = 500
    #: bonus of a clean A..A sequence; ``None``: no such kind, it scores as clean
    bonus_ace_to_ace: int | None = 1000
    going_out_bonus: int = 100
    #: penalty of a side that never took its morto
    morto_penalty: int = 100
    #: going out needs a clean canastra (clean, royal or ace-to-ace); otherwise any canastra
    clean_to_go_out: bool = True
    #: the last card may be melded or added to go out; otherwise going out needs a discard
    go_out_by_meld: bool = True
    #: closed pile: whoever takes it must at once meld or add its top card
    closed_pile: bool = False
    #: a one-card pile taken cannot be discarded again in the same turn
    lone_discard: bool = False
    #: a player may not go out by discarding a wild that could be added to the side's melds
    no_wild_going_out: bool = False
    #: a side that never took its morto may go out only when no morto is left on the table (both
    #: mortos became the stock, or the other side took its own); otherwise as soon as its own morto
    #: became the stock
    go_out_after_both_mortos: bool = False
    #: a side with no morto left to take that may not go out keeps two cards: a meld or addition that
    #: would leave the player one card or none is refused unless, once made, the side may go out
    keep_two_without_canastra: bool = False
    #: when the stock runs out: an untaken morto becomes the stock, then the hand ends
    #: ("morto_then_end"); or the hand ends at once ("end")
    stock_out: StockOut = "morto_then_end"
    #: a morto taken by an indirect batida whose taker never played again costs the penalty
    unplayed_morto_penalty: bool = True
    #: points to win the match; 0 means express (one hand)
    target: int = 2000
    #: both sides over the target (or level in express) with equal totals: the side that started the
    #: match wins ("starter"), or another hand is played ("extra_hand")
    tie: TieRule = "starter"

    #: the hash, computed once (rulesets key the engine's memo tables, looked up on every move)
    _hash: int = dataclasses.field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_hash")
        object.__setattr__(self, "_hash", hash(values))

    def __hash__(self) -> int:
        return self._hash

    @property
    def deck_size(self) -> int:
        return 104 + self.jokers

    def check(self) -> Ruleset:
        """Refuse inconsistent parameters; returns ``self`` for chaining."""
        problems: list[str] = []
        if self.jokers not in (0, 2, 4):
            problems.append(f"jokers must be 0, 2 or 4, not {self.jokers}")
        if self.groups_of_twos and not self.groups:
            problems.append("groups_of_twos needs groups")
        if self.bonus_ace_to_ace is not None and not self.ace_to_ace:
            problems.append("bonus_ace_to_ace is set but ace_to_ace sequences are not allowed")
        for field in ("two_value", "joker_value", "ace_value", "high_value", "low_value", "bonus_dirty",
                      "bonus_clean", "going_out_bonus", "morto_penalty", "target"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                problems.append(f"{field} must be a non-negative integer, not {value!r}")
        for field in ("bonus_royal", "bonus_ace_to_ace"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                problems.append(f"{field} must be a non-negative integer or null, not {value!r}")
        if self.stock_out not in ("morto_then_end", "end"):
            problems.append(f"stock_out must be 'morto_then_end' or 'end', not {self.stock_out!r}")
        if self.tie not in ("starter", "extra_hand"):
            problems.append(f"tie must be 'starter' or 'extra_hand', not {self.tie!r}")
        for field in ("groups", "groups_of_twos", "ace_to_ace", "clean_to_go_out", "go_out_by_meld",
                      "closed_pile", "lone_discard", "no_wild_going_out", "go_out_after_both_mortos",
                      "keep_two_without_canastra", "unplayed_morto_penalty"):
            if not isinstance(getattr(self, field), bool):
                problems.append(f"{field} must be true or false")
        if problems:
            raise RulesetError(f"ruleset {self.name!r} is inconsistent: " + "; ".join(problems))
        return self

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _FIELD_ORDER}

    def __reduce__(self) -> tuple[type[Ruleset], tuple[Any, ...]]:
        """Pickled as the constructor and its fields in order, which the compiled build (mypyc) needs:
        its classes lack the setstate a frozen slotted dataclass pickles through, so a ruleset can be
        sent to a worker process (``multiprocessing``) in both builds."""
        return (Ruleset, tuple(getattr(self, name) for name in _FIELD_ORDER))

    def override(self, **changes: Any) -> Ruleset:
        unknown = sorted(set(changes) - PARAMETERS)
        if unknown:
            raise RulesetError(f"unknown ruleset parameter(s): {', '.join(unknown)}")
        wrong = [f"{k} must be {_KIND_NAMES[type(getattr(self, k))]}, not {v!r}" for k, v in changes.items()
                 if k != "name" and not _same_kind(getattr(self, k), v, k)]
        if wrong:
            raise RulesetError(f"ruleset {self.name!r}: " + "; ".join(wrong))
        return dataclasses.replace(self, **changes).check()


_NULLABLE = frozenset({"bonus_royal", "bonus_ace_to_ace"})
_KIND_NAMES = {bool: "true or false", int: "an integer", str: "a string", type(None): "an integer or null"}


def _same_kind(current: object, value: object, field: str) -> bool:
    """An override has the parameter's type (checked before the frozen dataclass is built)."""
    if value is None:
        return field in _NULLABLE
    if isinstance(current, bool) or isinstance(value, bool):
        return isinstance(current, bool) and isinstance(value, bool)
    if current is None:
        return isinstance(value, int)
    return isinstance(value, type(current))


_FIELD_ORDER: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Ruleset) if f.init)
PARAMETERS: frozenset[str] = frozenset(_FIELD_ORDER)

_P = Ruleset(name="", target=2000, tie="starter")

PRESETS: dict[str, Ruleset] = {
    r.name: r.check()
    for r in (
        # P: the platform's five modalities
        dataclasses.replace(_P, name="aberto", jokers=0, groups=False, groups_of_twos=False),
        dataclasses.replace(
            _P, name="aberto_sujo", groups_of_twos=False, ace_to_ace=False, two_value=20, joker_value=30,
            bonus_ace_to_ace=None, clean_to_go_out=False, go_out_by_meld=False,
            unplayed_morto_penalty=False,
        ),
        dataclasses.replace(_P, name="fechado", closed_pile=True),
        dataclasses.replace(_P, name="fechado_stbl", groups=False, groups_of_twos=False, closed_pile=True),
        dataclasses.replace(_P, name="fechado_sujo", clean_to_go_out=False, closed_pile=True),
        # M: 104 cards, sequences only, the lone-discard rule; a match is one hand. M gives no card
        # values, canastra bonuses, going-out bonus or hand size: those are P's (docs/rules.md)
        dataclasses.replace(
            _P, name="classico_104", jokers=0, groups=False, groups_of_twos=False, lone_discard=True,
            unplayed_morto_penalty=False, target=0,
        ),
        # V: Burraco/Biriba, 2,005 points, the hand ends with the stock, another hand on a tie; a side
        # with its morto and no canastra keeps two cards
        dataclasses.replace(
            _P, name="buraco_2005", ace_to_ace=False, two_value=20, joker_value=30, bonus_royal=None,
            bonus_ace_to_ace=None, clean_to_go_out=False, no_wild_going_out=True,
            keep_two_without_canastra=True, stock_out="end", unplayed_morto_penalty=False, target=2005,
            tie="extra_hand",
        ),
        # J: Buraco Aberto with jokers worth 50; a match is one hand; a side that never took its morto
        # goes out only once no morto is left on the table
        dataclasses.replace(_P, name="aberto_joker50", groups=False, groups_of_twos=False, joker_value=50,
                            go_out_after_both_mortos=True, target=0),
    )
}


def preset(name: str) -> Ruleset:
    try:
        return PRESETS[name]
    except KeyError:
        raise RulesetError(f"unknown ruleset {name!r}; presets are {', '.join(PRESETS)}") from None


def ruleset_from_spec(spec: object) -> Ruleset:
    """A preset name, or ``{"preset": NAME, **overrides}`` (the game-record form)."""
    if isinstance(spec, str):
        return preset(spec)
    if isinstance(spec, dict):
        name = spec.get("preset")
        if not isinstance(name, str):
            raise RulesetError("a custom ruleset needs a 'preset' name to start from")
        base = preset(name)
        overrides = {k: v for k, v in spec.items() if k != "preset"}
        if "name" in overrides:
            raise RulesetError("'name' is not a parameter that can be overridden")
        if not overrides:
            return base
        return base.override(name=f"{name}+custom", **overrides)
    raise RulesetError(f"a ruleset is a preset name or an object, not {spec!r}")

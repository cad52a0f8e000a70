"""Commands typed at the terminal client, and the command that makes an action (pure, no I/O).

    <number>            the legal move of that number in the hint list
    draw | d            draw from the stock
    take | t            take the discard pile
    meld C C C [as C]   lay down a new meld (`as` names the card a wild stands for)
    add N C [C ...]     add cards to your side's meld number N
    discard C | x C     discard a card
    hints | h | ?       list the legal moves again
    show | s            show the table again
    say TEXT            chat to the table
    annul | annul yes | annul no    propose a friendly annulment, or vote on the open one
    leave               leave the match (a bot takes your seat)
    help                this list
    quit | q            stop the client (the seat stays yours; reconnect to resume)

Cards are written as in the game records (`4H`, `10S`, `JK`), in any case, or with suit symbols
(`4♥`).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.actions import DRAW, TAKE_PILE, Action, AddCards, Discard, MeldCards, add_action, meld_action
from engine.cards import parse
from engine.errors import MalformedError

HELP = __doc__.split("\n\n")[1] if __doc__ else ""
SYMBOL_SUITS = {"♠": "S", "♥": "H", "♦": "D", "♣": "C", "♤": "S", "♡": "H", "♢": "D", "♧": "C"}


class CommandError(ValueError):
    """A command that cannot be understood; the message says why."""


@dataclass(frozen=True)
class Play:
    """An action to send to the server."""

    action: Action


@dataclass(frozen=True)
class Hint:
    """The legal move of this number (from 1) in the last hint list."""

    number: int


@dataclass(frozen=True)
class Say:
    text: str


@dataclass(frozen=True)
class Annul:
    vote: bool | None  # None: propose


@dataclass(frozen=True)
class Simple:
    """A command without arguments: hints, show, help, leave, quit."""

    name: str


Command = Play | Hint | Say | Annul | Simple

_SIMPLE = {
    "hints": "hints", "h": "hints", "?": "hints",
    "show": "show", "s": "show",
    "help": "help",
    "leave": "leave",
    "quit": "quit", "q": "quit", "exit": "quit",
}


def parse_card(word: str) -> int:
    """A card code from `4H`, `10s`, `jk`, `4♥`; CommandError with the reason otherwise."""
    text = word.strip()
    if text and text[-1] in SYMBOL_SUITS:
        text = text[:-1] + SYMBOL_SUITS[text[-1]]
    try:
        return parse(text)
    except MalformedError:
        raise CommandError(f"{word!r} is not a card: write rank then suit, like 4H, 10S, QD, AC or JK") from None


def parse_command(line: str) -> Command | None:
    """The command a line asks for; None for an empty line; CommandError when it cannot be read."""
    words = line.strip().split()
    if not words:
        return None
    head, rest = words[0].lower(), words[1:]
    if head.isdigit():
        if rest:
            raise CommandError("a move number stands alone, like `3`")
        number = int(head)
        if number < 1:
            raise CommandError("moves are numbered from 1")
        return Hint(number)
    if head in _SIMPLE:
        if rest:
            raise CommandError(f"`{head}` takes no arguments")
        return Simple(_SIMPLE[head])
    if head in ("draw", "d"):
        _no_args(head, rest)
        return Play(DRAW)
    if head in ("take", "t", "pile"):
        _no_args(head, rest)
        return Play(TAKE_PILE)
    if head in ("meld", "m"):
        wild_as = None
        lowered = [w.lower() for w in rest]
        if "as" in lowered:
            at = lowered.index("as")
            if at != len(rest) - 2:
                raise CommandError("write the wild's card last: `meld 4H JK 6H as 5H`")
            wild_as = parse_card(rest[-1])
            rest = rest[:at]
        if len(rest) < 3:
            raise CommandError("a meld needs at least 3 cards: `meld 4H 5H 6H`")
        return Play(meld_action([parse_card(w) for w in rest], wild_as))
    if head in ("add", "a"):
        if len(rest) < 2 or not rest[0].isdigit():
            raise CommandError("write the meld's number then the cards: `add 0 7H`")
        return Play(add_action(int(rest[0]), [parse_card(w) for w in rest[1:]]))
    if head in ("discard", "x"):
        if len(rest) != 1:
            raise CommandError("discard one card: `discard KS`")
        return Play(Discard(parse_card(rest[0])))
    if head == "say":
        text = line.strip()[len(words[0]):].strip()
        if not text:
            raise CommandError("say what? `say good game`")
        return Say(text)
    if head == "annul":
        if not rest:
            return Annul(None)
        if len(rest) == 1 and rest[0].lower() in ("yes", "y", "no", "n"):
            return Annul(rest[0].lower().startswith("y"))
        raise CommandError("`annul` proposes; `annul yes` or `annul no` votes")
    raise CommandError(f"unknown command {words[0]!r}; type `help` for the list")


def _no_args(head: str, rest: list[str]) -> None:
    if rest:
        raise CommandError(f"`{head}` takes no arguments")


def describe_action(action: Action) -> str:
    """The command that does `action` (`draw`, `take`, `meld 4H 5H 6H`, `add 0 7H`, `discard KS`):
    `parse_command` reads it back as the same action."""
    data = action.to_json()
    kind = data["do"]
    if kind == "draw":
        return "draw"
    if kind == "take_discard":
        return "take"
    if kind == "meld":
        text = "meld " + " ".join(data["cards"])
        return text + (f" as {data['wild_as']}" if "wild_as" in data else "")
    if kind == "add":
        return f"add {data['meld']} " + " ".join(data["cards"])
    return f"discard {data['card']}"


def action_kind(action: Action) -> str:
    """The command's word for the kind of `action`: draw, take, meld, add or discard."""
    if isinstance(action, MeldCards):
        return "meld"
    if isinstance(action, AddCards):
        return "add"
    if isinstance(action, Discard):
        return "discard"
    return "draw" if action == DRAW else "take"

"""Text rendering of a table for the terminal client (pure: a model in, lines out)."""

from __future__ import annotations

from collections.abc import Sequence

from buraco.v1 import common_pb2
from engine.actions import Action
from services.cli.commands import describe_action
from services.client.model import TableModel, sort_cards

SUIT_SYMBOLS = {"S": "♠", "H": "♥", "D": "♦", "C": "♣"}
RED = "\x1b[31m"
RESET = "\x1b[0m"
PHASE_WORDS = {"draw": "to draw or take the pile", "play": "to meld, add, then discard", "hand_over": "hand over"}
CANASTRA_WORDS: dict[int, str] = {
    common_pb2.Meld.CANASTRA_DIRTY: "dirty canastra",
    common_pb2.Meld.CANASTRA_CLEAN: "clean canastra",
    common_pb2.Meld.CANASTRA_ROYAL: "royal canastra",
    common_pb2.Meld.CANASTRA_ACE_TO_ACE: "ace-to-ace canastra",
}


def pretty_card(card: str, color: bool = False) -> str:
    """`10H` -> `10♥`, `JK` -> `JK★` (hearts and diamonds red when `color`)."""
    if card.upper() == "JK":
        return "JK★"
    rank, suit = card[:-1], card[-1].upper()
    text = rank + SUIT_SYMBOLS.get(suit, suit)
    if color and suit in "HD":
        return RED + text + RESET
    return text


def pretty_cards(cards: Sequence[str], color: bool = False) -> str:
    return " ".join(pretty_card(c, color) for c in cards) if cards else "—"


def render_table(model: TableModel, color: bool = False) -> list[str]:
    """The whole table as the viewer sees it."""
    lines: list[str] = []
    target = ""
    if model.table is not None and model.table.options.target_points:
        target = f" (to {model.table.options.target_points})"
    scores = " - ".join(str(s) for s in model.match_scores)
    lines.append(f"{model.table_name} · hand {model.hand_number} · match score {scores}{target} · seq {model.seq}")
    for seat, info in enumerate(model.seats):
        tags = []
        if seat == model.viewer_seat:
            tags.append("you")
        if info.bot_controlled:
            tags.append("bot playing")
        if seat == model.dealer:
            tags.append("dealer")
        marker = "▶" if seat == model.to_act and model.phase in ("draw", "play") else " "
        tag = f" [{', '.join(tags)}]" if tags else ""
        lines.append(f" {marker} seat {seat} {info.label}{tag}: {info.hand_size} cards, side {seat & 1}")
    for side in (0, 1):
        mine = model.viewer_seat is not None and (model.viewer_seat & 1) == side
        morto = "morto taken" if model.morto_taken[side] else (
            "morto in the stock" if model.mortos_in_stock[side] else "morto waiting")
        lines.append(f" side {side}{' (yours)' if mine else ''}: {morto}")
        if not model.melds[side]:
            lines.append("    no melds")
        for index, meld in enumerate(model.melds[side]):
            note = CANASTRA_WORDS.get(meld.canastra, "")
            lines.append(f"    [{index}] {pretty_cards(meld.cards, color)}{'  (' + note + ')' if note else ''}")
    top = pretty_card(model.pile[-1], color) if model.pile else "empty"
    lines.append(f" stock: {model.stock_count} cards · pile: {len(model.pile)} cards, top {top}")
    if model.pile:
        lines.append(f"   pile (bottom first): {pretty_cards(model.pile, color)}")
    if model.viewer_seat is not None:
        lines.append(f" your hand ({len(model.hand)}): {pretty_cards(sort_cards(model.hand), color)}")
    if model.finished:
        lines.append(" the match is over")
    elif model.hand_number == 0:
        lines.append(" waiting for the first deal (when every player has joined)")
    elif model.phase in ("draw", "play"):
        who = "your turn" if model.my_turn else f"{model.seat_name(model.to_act)}'s turn"
        extra = ""
        if model.my_turn and model.must_meld:
            extra = f" (the closed pile: meld {pretty_card(model.must_meld, color)} first)"
        lines.append(f" {who}, {PHASE_WORDS[model.phase]}{extra}")
    return lines


def render_hints(actions: Sequence[Action], color: bool = False) -> list[str]:
    """The legal moves numbered from 1, as the commands that make them."""
    lines = []
    for number, action in enumerate(actions, start=1):
        command = describe_action(action)
        words = command.split()
        shown = " ".join([words[0], *(pretty_card(w, color) if _is_card(w) else w for w in words[1:])])
        lines.append(f"  {number:>3}. {shown}   ({command})")
    return lines


def _is_card(word: str) -> bool:
    return word != "as" and not word.isdigit()

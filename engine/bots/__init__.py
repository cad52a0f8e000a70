"""Bots: players that see only ``view(seat)`` and the legal actions of the moment.

``make_bot(kind, seed, rules=None)`` builds one (``"random"``, ``"heuristic"`` or ``"expert"``, the
heuristic's choices searched by determinised rollouts within a CPU budget per decision);
``bot.choose(view, legal)`` returns the next action; ``bot.choose_discard(view, legal)`` the discard
the bot would make (used by the game-session service when a player's time runs out).
"""

from engine.bots.base import BOT_KINDS, Bot, make_bot
from engine.bots.expert import ExpertBot
from engine.bots.heuristic import HeuristicBot
from engine.bots.random_bot import RandomBot

__all__ = ["BOT_KINDS", "Bot", "ExpertBot", "HeuristicBot", "RandomBot", "make_bot"]

"""Bots against bots (``make bench-bots``): win rates with confidence intervals, average scores, speed.

``python -m bench.selfplay --ruleset R --players 2|4 --games N --bots heuristic,random --seed S``
plays N matches to the ruleset's target (``--hands N`` plays N single hands instead). The first bot
plays side 0 and the second side 1 in even games, the other way round in odd games, and the first
dealer moves every two games, so neither seat order nor the first move favours a bot. Every deal
and every bot is seeded from ``--seed``: the same command prints the same results (but hands/s).

Printed, per bot: hands won (a hand is won by the side with the higher hand total; ties are
counted apart) and matches won, each with its 95% Wilson interval; the average hand score and
match score of the bot's side. Then the number of hands, turns and actions, and hands/s and
turns/s (bots' thinking and engine time together, one process, one core). ``--bench`` adds
``bench: NAME VALUE UNIT`` lines for the first bot against the second.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

from engine.bots.base import BOT_KINDS
from engine.errors import EngineError
from engine.rules import Ruleset, ruleset_from_spec
from engine.selfplay import SelfPlayResult, run


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% for ``z = 1.96``)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _rate(won: int, n: int) -> str:
    lo, hi = wilson(won, n)
    pct = 100.0 * won / n if n else 0.0
    return f"{won}/{n} = {pct:.1f}% (95% CI {100 * lo:.1f}%..{100 * hi:.1f}%)"


def report(result: SelfPlayResult, bench: bool = False) -> list[str]:
    rules = result.rules
    target = "express" if rules.target == 0 else str(rules.target)
    lines = [f"ruleset {rules.name}, {result.players} players, target {target}"]
    for st in result.stats:
        line = f"{st.kind}: hands won {_rate(st.hands_won, st.hands)}, tied {st.hands_tied}"
        if st.matches:
            line += f"; matches won {_rate(st.matches_won, st.matches)}"
        line += f"; average hand score {st.hand_points / max(1, st.hands):.1f}"
        if st.matches:
            line += f", average match score {st.match_points / st.matches:.1f}"
        lines.append(line)
    played = f"{result.matches} matches, {result.hands} hands" if result.matches else f"{result.hands} single hands"
    lines.append(f"played {played}, {result.turns} turns, {result.actions} actions in {result.seconds:.2f} s: "
                 f"{result.hands_per_second:.1f} hands/s, {result.turns_per_second:.0f} turns/s")
    if bench:
        a, b = result.stats
        name = f"{a.kind}_vs_{b.kind}"
        preset = rules.name.replace("+custom", "")
        lo, hi = wilson(a.hands_won, a.hands)
        lines.append(f"bench: {name}_hand_winrate_{preset} {100 * a.hands_won / max(1, a.hands):.1f} %")
        lines.append(f"bench: {name}_hand_winrate_{preset}_ci95_low {100 * lo:.1f} %")
        lines.append(f"bench: {name}_hand_winrate_{preset}_ci95_high {100 * hi:.1f} %")
        if a.matches:
            lo, hi = wilson(a.matches_won, a.matches)
            lines.append(f"bench: {name}_match_winrate_{preset} {100 * a.matches_won / a.matches:.1f} %")
            lines.append(f"bench: {name}_match_winrate_{preset}_ci95_low {100 * lo:.1f} %")
            lines.append(f"bench: {name}_match_winrate_{preset}_ci95_high {100 * hi:.1f} %")
        lines.append(f"bench: {name}_hands_per_second_{preset} {result.hands_per_second:.1f} hands/s")
    return lines


def _ruleset_arg(text: str) -> Ruleset:
    spec: object = text
    if text.lstrip().startswith("{"):
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"--ruleset is not valid JSON: {exc}") from None
    try:
        return ruleset_from_spec(spec)
    except EngineError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bots_arg(text: str) -> tuple[str, str]:
    kinds = [k.strip() for k in text.split(",")]
    if len(kinds) != 2 or any(k not in BOT_KINDS for k in kinds):
        raise argparse.ArgumentTypeError(f"--bots takes two of {', '.join(BOT_KINDS)} separated by a comma")
    return kinds[0], kinds[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.selfplay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ruleset", type=_ruleset_arg, default="fechado",
                        help='a preset name, or JSON overrides such as \'{"preset": "fechado", "target": 0}\'')
    parser.add_argument("--players", type=int, choices=(2, 4), default=2)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--games", type=int, default=0, help="matches to play (to the ruleset's target)")
    group.add_argument("--hands", type=int, default=0, help="single hands to play instead of matches")
    parser.add_argument("--bots", type=_bots_arg, default=("heuristic", "random"),
                        help="two bot kinds, the first for side 0 in even games: heuristic,random")
    parser.add_argument("--min-hands", type=int, default=0,
                        help="with --games: keep playing matches until this many hands were played")
    parser.add_argument("--seed", default="0", help="seeds every deal and every bot")
    parser.add_argument("--bench", action="store_true", help="also print bench: lines")
    args = parser.parse_args(argv)
    if args.games < 0 or args.hands < 0 or args.min_hands < 0:
        parser.error("--games, --hands and --min-hands must not be negative")
    if args.hands and args.min_hands:
        parser.error("--min-hands goes with --games (matches), not with --hands")
    games = args.games if args.games or args.hands or args.min_hands else 100
    result = run(args.ruleset, args.players, args.bots, args.seed, games=games if not args.hands else 0,
                 hands=args.hands, min_hands=args.min_hands)
    for line in report(result, bench=args.bench):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

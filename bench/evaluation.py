"""Fit the expert's learned evaluation on heuristic self-play, and measure how well it predicts.

For each preset and number of players: the heuristic bot plays every seat of ``--hands`` hands
(fixed seeds); at every ``--every``-th turn's draw, the position's features
(``engine.bots.evaluation.side_features``, side 0's less side 1's) are kept with the hand's final
utility for side 0 (the expert's own: the score difference, plus or minus the win's weight in a
one-hand match). The weights are fitted by least squares (a small ridge term) per stage of the hand;
the turns a hand lasts per card left to draw, through the origin.

The last ``--holdout`` hands are not fitted: on them the tool prints, by fifth of the hand, the
correlation with the final utility of the learned value and of the expert's static estimate
(``ExpertBot._utility`` of an unfinished hand), and ``bench:`` lines of the same. ``--write``
writes the weights of every pairing fitted (merged with those already there) into
``engine/bots/evaluation_weights.py``.

The defaults are the fit of the weights committed (every preset at 2 and 4 players, 2,000 hands
fitted and 500 measured each; a few minutes on the compiled engine):

    cd build/native && PYTHONPATH=$PWD/../.. python -m bench.evaluation --write
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from engine.bots.evaluation import N_FEATURES, differences, draws_left, stage
from engine.bots.evaluation_weights import STAGES, WEIGHTS
from engine.bots.expert import ExpertBot
from engine.bots.heuristic import HeuristicBot
from engine.match import MatchState
from engine.melds import card_values
from engine.rules import PRESETS, Ruleset, preset
from engine.state import DRAW_PHASE

RIDGE = 1e-3  # relative to each feature's sum of squares in the stage: keeps rare features' weights bounded
WEIGHTS_FILE = Path(__file__).resolve().parent.parent / "engine" / "bots" / "evaluation_weights.py"


@dataclass(slots=True)
class Snapshot:
    stage: int
    fifth: int  # fifth of the hand's turns the snapshot falls in (known once the hand ended)
    features: list[float]  # side 0's less side 1's
    static: float  # the expert's static estimate for side 0
    draws_left: int
    turns_left: int
    utility: float = 0.0


@dataclass(slots=True)
class Fit:
    name: str
    players: int
    turns_per_draw: float
    weights: list[list[float]]
    correlations: dict[str, list[float]] = field(default_factory=dict)


def play(rules: Ruleset, players: int, hands: int, every: int, seed: str) -> list[list[Snapshot]]:
    """``hands`` hands of heuristic self-play, the snapshots of each."""
    values = card_values(rules)
    expert = ExpertBot(0, rules)
    out: list[list[Snapshot]] = []
    for h in range(hands):
        bots = [HeuristicBot(f"{seed}/{h}/{s}", rules) for s in range(players)]
        match = MatchState(rules, players, first_dealer=h % players)
        match.start_hand(seed=f"{seed}/{h}")
        hand = match.hand
        assert hand is not None
        shots: list[tuple[int, Snapshot]] = []
        while not hand.is_terminal():
            if hand.phase == DRAW_PHASE and hand.turns % every == 0:
                shots.append((hand.turns, Snapshot(stage(hand), 0, differences(hand, 0, values),
                                                   expert._utility(hand, 0), draws_left(hand), 0)))
            seat = hand.to_act
            match.apply(bots[seat].choose(hand.view(seat), hand.legal_actions()), seat)
        utility = expert._utility(hand, 0)
        total = hand.turns
        for turn, shot in shots:
            shot.utility = utility
            shot.turns_left = total - turn
            shot.fifth = min(4, (turn - 1) * 5 // max(1, total))
        out.append([s for _, s in shots])
    return out


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """``a x = b`` by Gaussian elimination with partial pivoting (``a`` square, small)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if m[col][col] == 0.0:
            continue
        for r in range(n):
            if r != col and m[r][col] != 0.0:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] if m[i][i] != 0.0 else 0.0 for i in range(n)]


def fit_stage(shots: list[Snapshot]) -> list[float]:
    """Least squares of the utility on the features (no intercept: the value is antisymmetric)."""
    if not shots:
        return [0.0] * N_FEATURES
    xtx = [[0.0] * N_FEATURES for _ in range(N_FEATURES)]
    xty = [0.0] * N_FEATURES
    for s in shots:
        x = s.features
        for i in range(N_FEATURES):
            if x[i] != 0.0:
                xty[i] += x[i] * s.utility
                row = xtx[i]
                for j in range(N_FEATURES):
                    row[j] += x[i] * x[j]
    for i in range(N_FEATURES):
        xtx[i][i] += RIDGE * max(1.0, xtx[i][i])
    return solve(xtx, xty)


def correlation(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 3:
        return math.nan
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def fit(name: str, players: int, hands: int, holdout: int, every: int, seed: str) -> Fit:
    rules = preset(name)
    played = play(rules, players, hands + holdout, every, seed)
    train = [s for hand in played[:hands] for s in hand]
    test = [s for hand in played[hands:] for s in hand]
    weights = [fit_stage([s for s in train if s.stage == k]) for k in range(STAGES)]
    num = sum(s.draws_left * s.turns_left for s in train)
    den = sum(s.draws_left * s.draws_left for s in train)
    result = Fit(name, players, num / den if den else 0.0, weights)
    for label in ("static", "learned"):
        row = []
        for fifth in range(5):
            shots = [s for s in test if s.fifth == fifth]
            if label == "static":
                xs = [s.static for s in shots]
            else:
                xs = [sum(w * x for w, x in zip(weights[s.stage], s.features, strict=True)) for s in shots]
            row.append(correlation(xs, [s.utility for s in shots]))
        result.correlations[label] = row
    return result


def write(fits: list[Fit]) -> None:
    """The weights of ``fits``, merged with those already written, into ``WEIGHTS_FILE``."""
    merged: dict[str, tuple[float, tuple[tuple[float, ...], ...]]] = dict(WEIGHTS)
    for f in fits:
        merged[f"{f.name}/{f.players}"] = (f.turns_per_draw, tuple(tuple(row) for row in f.weights))
    lines = ["WEIGHTS: Final[dict[str, tuple[float, tuple[tuple[float, ...], ...]]]] = {"]
    for key, (turns_per_draw, rows) in sorted(merged.items()):
        lines.append(f'    "{key}": ({turns_per_draw:.4g}, (')
        lines.extend("        (" + ", ".join(f"{w:.6g}" for w in row) + ")," for row in rows)
        lines.append("    )),")
    lines.append("}")
    text = WEIGHTS_FILE.read_text()
    WEIGHTS_FILE.write_text(text[: text.index("WEIGHTS: Final")] + "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.evaluation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="all", help="comma-separated presets, or 'all'")
    parser.add_argument("--players", default="2,4", help="comma-separated: 2, 4 or both")
    parser.add_argument("--hands", type=int, default=2000, help="hands fitted per pairing")
    parser.add_argument("--holdout", type=int, default=500, help="hands measured, not fitted")
    parser.add_argument("--every", type=int, default=3, help="a snapshot every this many turns")
    parser.add_argument("--seed", default="evaluation")
    parser.add_argument("--write", action="store_true", help="write the weights into " + str(WEIGHTS_FILE.name))
    args = parser.parse_args(argv)
    names = list(PRESETS) if args.presets == "all" else [p.strip() for p in args.presets.split(",") if p.strip()]
    for name in names:
        preset(name)  # an unknown name fails here, before any play
    counts = [int(p) for p in args.players.split(",")]
    if any(p not in (2, 4) for p in counts) or args.hands < 1 or args.holdout < 1 or args.every < 1:
        parser.error("--players takes 2 and/or 4; --hands, --holdout and --every at least 1")
    fits: list[Fit] = []
    print("correlation with the hand's final utility, held-out hands, by fifth of the hand")
    for name in names:
        for players in counts:
            f = fit(name, players, args.hands, args.holdout, args.every, f"{args.seed}/{name}/{players}")
            fits.append(f)
            for label, row in f.correlations.items():
                cells = " ".join(f"{c:6.2f}" for c in row)
                print(f"  {name:16} {players}p {label:8} {cells}")
                for fifth, c in enumerate(row):
                    print(f"bench: evaluation_corr_{label}_{name}_{players}p_fifth{fifth + 1} {c:.3f} r")
            print(f"  {name:16} {players}p turns per card left to draw {f.turns_per_draw:.2f}")
            sys.stdout.flush()
    if args.write:
        write(fits)
        print(f"wrote {WEIGHTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the expert's searches are worth, decision by decision, measured offline.

Matches are a coarse measure of a change to the expert's search: on the same deals two runs of the
same expert differ by several matches in a hundred (docs/performance.md, "Bots"). This tool measures
a change where it acts, per decision. The expert plays one-hand games against the heuristic bot on
fixed deals (``--hands``; its seats are side 0's). At every ``--every``-th decision it searches:

- each *arm* (``--arm KNOB=VALUE[,KNOB=VALUE]``; the first arm, by default the expert as it is,
  is the reference) runs that decision's search as in play, with its CPU budget and the same seeds;
- every candidate is also played in ``--truth-worlds`` more worlds to the end of the hand, on seeds
  of their own (held out from every arm's search): the *truth*, each candidate's mean gain over the
  heuristic's choice. By default (``--truth players``) those worlds are the real position, the
  hands as dealt and only the cards nobody has seen (the stock, the mortos face down) shuffled
  again, played on by copies of the table's own bots as they are at the decision (the opponents'
  heuristic bots with their memory of the hand; for each expert seat, its advisor): the value of
  the choice in the deal being played, against these opponents. ``--truth real`` plays them on
  with fresh heuristic bots instead, and ``--truth sampled`` deals the worlds as the search deals
  its own: both share the search's model (of the opponents' play; of their play and their cards),
  so they favour whatever trusts that model most, and a looser switch that gained on them lost in
  matches (docs/performance.md, "Bots"). A change found here is confirmed in matches before it
  is kept.

An arm's worth at a decision is the truth's gain of the candidate it picked (0 when it kept the
heuristic's choice). The report gives, per arm, the mean worth in points a decision with its standard
error, how often it switched and cut its rollouts, its worlds a search, and each arm's difference
from the first, paired decision by decision. The game goes on with the first arm's choice.

The expert's search runs here as Python from ``engine/bots/expert.py`` (loaded from its source, so
that the tool can step into a decision) over the engine and heuristic bot as installed: the
compiled ones when run from ``build/native``, as ``make bench-bots`` runs. A search in Python buys
a few worlds fewer than the compiled expert's in the same budget; both arms alike.

    cd build/native && PYTHONPATH=$PWD/../.. python -m bench.decisions --preset aberto --players 2 \\
        --hands 6 --arm cut_worlds=0 --arm cut_worlds=8
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import math
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from engine.bots.evaluation import stage_at
from engine.bots.expert import MAX_ROLLOUT_ACTIONS, distinct
from engine.bots.heuristic import HeuristicBot
from engine.bots.sampling import SamplingError, information
from engine.match import MatchState
from engine.rules import PRESETS, preset
from engine.state import HandState

EXPERT_SOURCE = Path(__file__).resolve().parent.parent / "engine" / "bots" / "expert.py"


def pure_expert() -> ModuleType:
    """``engine/bots/expert.py`` loaded from its source as a module of its own (never the compiled one)."""
    name = "bench_decisions_expert"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXPERT_SOURCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    # the rollouts' view as installed, with the readings it takes: in the compiled engine an
    # interpreted class cannot subclass its compiled base (``reading.TypedView``), and the two are the
    # same code
    from engine.bots import expert as installed

    module.RolloutView = installed.RolloutView  # type: ignore[attr-defined]
    module.MeldReadings = installed.MeldReadings  # type: ignore[attr-defined]
    return module


@dataclass(slots=True)
class Decision:
    stage: int
    candidates: int
    truth: list[float]  # per candidate: mean gain over the heuristic's choice in the held-out worlds
    picks: list[int] = field(default_factory=list)  # per arm: the candidate it picked
    worlds: list[int] = field(default_factory=list)  # per arm: worlds its search bought
    cut: list[bool] = field(default_factory=list)  # per arm: whether its rollouts were cut short
    # a search of half the truth's worlds with no threshold: the held-out gain (the second half's) of
    # the candidate with the best mean over the first half (0 when that is the heuristic's choice).
    # With the real position's worlds (``--truth players`` or ``real``) this search saw the hidden
    # hands: a ceiling no search of the seat's knowledge reaches; with sampled worlds, one of what
    # more worlds would buy
    half_best: float = 0.0

    def worth(self, arm: int) -> float:
        return self.truth[self.picks[arm]]


def half_best(first: list[float], total: list[float], rest: int) -> float:
    """``Decision.half_best`` from each candidate's summed gains over the first half of the worlds and
    over all of them (``rest`` worlds in the second half); ties go to the earlier candidate."""
    best = max(range(len(first)), key=lambda i: (first[i], -i))
    return (total[best] - first[best]) / rest


def parse_arm(text: str, knobs: Mapping[str, type]) -> dict[str, Any]:
    """``KNOB=VALUE[,KNOB=VALUE]`` (an empty text: the expert as it is)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        knob, _, value = part.partition("=")
        if knob not in knobs:
            raise ValueError(f"unknown expert knob {knob!r}; knobs are {', '.join(sorted(knobs))}")
        kind = knobs[knob]
        out[knob] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return out


def probe_class(base: Any) -> Any:
    """An expert that, at its sampled decisions, runs every arm's search and the truth."""

    class Probe(base):  # type: ignore[misc]
        def __init__(self, seed: str, rules: Any, arms: list[dict[str, Any]], truth_worlds: int, every: int,
                     records: list[Decision], budget_ms: float, truth: str) -> None:
            super().__init__(seed, rules, budget_ms=budget_ms)
            self.truth = truth
            self.real: HandState | None = None  # the hand being played (set before each decision)
            self.table_bots: list[Any] = []  # every seat's bot (set with ``real``)
            self.arms = arms
            self.truth_worlds = truth_worlds
            self.every = every
            self.records = records
            self.probe_seed = seed
            self.decisions = 0

        def _search(self, view: Any, candidates: list[Any], start: float) -> Any:
            unique = distinct(candidates)
            if len(unique) < 2:
                return base._search(self, view, unique, start)
            self.decisions += 1
            if self.decisions % self.every:
                return self._arm_search(0, view, unique, start)
            try:
                info = information(view, self.memory, self.rules)
            except SamplingError:
                return self._arm_search(0, view, unique, start)
            truth, half_best = self._truth(info, unique)
            record = Decision(stage_at(info.rules, info.players, info.stock_count), len(unique), truth,
                              half_best=half_best)
            rng_state = self.rng.getstate()
            for arm in range(len(self.arms)):
                self.rng.setstate(rng_state)  # every arm's search deals the same worlds
                pick = self._arm_search(arm, view, unique, self.clock())
                record.picks.append(unique.index(pick))
                record.worlds.append(self.last_worlds)
                record.cut.append(self.last_horizon > 0)
            self.records.append(record)
            return unique[record.picks[0]]

        def _arm_search(self, arm: int, view: Any, candidates: list[Any], start: float) -> Any:
            saved = {knob: getattr(self, knob) for knob in self.arms[arm]}
            for knob, value in self.arms[arm].items():
                setattr(self, knob, value)
            try:
                return base._search(self, view, candidates, start)
            finally:
                for knob, value in saved.items():
                    setattr(self, knob, value)

        def _truth(self, info: Any, candidates: list[Any]) -> tuple[list[float], float]:
            """Every candidate in ``truth_worlds`` worlds of their own, to the end of the hand: each one's
            mean gain over the heuristic's choice, and ``Decision.half_best``."""
            side = info.seat & 1
            k = len(candidates)
            total = [0.0] * k
            half = self.truth_worlds // 2
            first_half: list[float] = []
            self._evaluation = None
            for w in range(self.truth_worlds):
                rng = random.Random(f"truth/{self.probe_seed}/{self.decisions}/{w}")
                if self.truth != "sampled" and self.real is not None:
                    outcomes = self._real_world(candidates, side, rng)
                else:
                    outcomes = base._play_world(self, info, candidates, [True] * k, side, rng, math.inf, None)
                assert outcomes is not None
                for i in range(k):
                    total[i] += outcomes[i] - outcomes[0]
                if w + 1 == half:
                    first_half = total[:]
            return [t / self.truth_worlds for t in total], half_best(first_half, total, self.truth_worlds - half)

        def _real_world(self, candidates: list[Any], side: int, rng: random.Random) -> list[float]:
            """Every candidate from the real position, its hands as dealt, the cards nobody has seen (the
            stock and the mortos still face down) shuffled again; the rest of the hand played by fresh
            heuristic bots (``real``) or by copies of the table's own (``players``)."""
            assert self.real is not None
            world = self.real.clone()
            open_mortos = [m for m in world.mortos if m is not None]
            pool = [c for m in open_mortos for c in m] + world.stock
            rng.shuffle(pool)
            at = 0
            for i, m in enumerate(world.mortos):
                if m is not None:
                    world.mortos[i] = tuple(pool[at:at + len(m)])
                    at += len(m)
            world.stock = pool[at:]
            world.touch()
            policy_seed = rng.getrandbits(30)
            out = []
            for action in candidates:
                state = world.clone()
                state.apply(action)
                if self.truth == "players":
                    value = self._play_on(state, side, policy_seed)
                else:
                    value = self._rollout(state, side, policy_seed, math.inf, None)
                assert value is not None
                out.append(value)
            return out

        def _play_on(self, state: HandState, side: int, seed: int) -> float:
            """The hand played to its end by copies of the table's bots as they are now: the opponents'
            heuristic bots with their memory of the hand, and for each expert seat its advisor (the
            heuristic that has seen every view the expert saw); each copy's random choices reseeded."""
            players = []
            for s, bot in enumerate(self.table_bots):
                played = bot if isinstance(bot, HeuristicBot) else bot.advisor
                # the ruleset shared, not copied: compiled, a frozen dataclass cannot be rebuilt field by field
                clone = copy.deepcopy(played, {id(played.rules): played.rules})
                clone.rng = random.Random(seed + s)
                players.append(clone)
            actions = 0
            while not state.is_terminal() and actions < MAX_ROLLOUT_ACTIONS:
                seat = state.to_act
                state.apply(players[seat].choose(state.view(seat), state.legal_actions()))
                actions += 1
            return float(self._utility(state, side))

    return Probe


def play(name: str, players: int, hands: int, arms: list[dict[str, Any]], truth_worlds: int, every: int,
         seed: str, budget_ms: float, truth: str = "players") -> list[Decision]:
    rules = preset(name)
    probe = probe_class(pure_expert().ExpertBot)
    records: list[Decision] = []
    for h in range(hands):
        bots: list[Any] = [probe(f"{seed}/{h}/{s}", rules, arms, truth_worlds, every, records, budget_ms, truth)
                           if s % 2 == 0 else HeuristicBot(f"{seed}/{h}/{s}", rules) for s in range(players)]
        match = MatchState(rules, players, first_dealer=h % players)
        match.start_hand(seed=f"{seed}/deal/{h}")
        hand = match.hand
        assert hand is not None
        while not hand.is_terminal():
            seat = hand.to_act
            bot = bots[seat]
            if not isinstance(bot, HeuristicBot):
                bot.real = hand  # for the truth only: the search never reads it
                bot.table_bots = bots
            match.apply(bot.choose(hand.view(seat), hand.legal_actions()), seat)
    return records


def mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def report(name: str, players: int, labels: list[str], records: list[Decision],
           truth: str = "players") -> list[str]:
    lines = [f"{name}, {players} players: {len(records)} decisions measured"]
    key = f"{name}_{players}p"
    for arm, label in enumerate(labels):
        worth = [r.worth(arm) for r in records]
        mean, se = mean_se(worth)
        switched = sum(1 for r in records if r.picks[arm] != 0)
        cut = sum(1 for r in records if r.cut[arm])
        worlds = sum(r.worlds[arm] for r in records) / max(1, len(records))
        line = (f"  arm {arm} ({label}): worth {mean:+.2f} +- {se:.2f} points a decision; switched "
                f"{100 * switched / max(1, len(records)):.1f}%, rollouts cut {100 * cut / max(1, len(records)):.1f}%, "
                f"worlds a search {worlds:.1f}")
        if arm:
            diff, dse = mean_se([r.worth(arm) - r.worth(0) for r in records])
            line += f"; against arm 0 {diff:+.2f} +- {dse:.2f}"
            lines.append(f"bench: decisions_worth_diff_{key}_arm{arm} {diff:.2f} points")
        lines.append(line)
        lines.append(f"bench: decisions_worth_{key}_arm{arm} {mean:.2f} points")
        early = [r.worth(arm) for r in records if 0 <= r.stage <= 1]
        late = [r.worth(arm) for r in records if r.stage >= 2]
        (em, es), (lm, ls) = mean_se(early), mean_se(late)
        lines.append(f"    first two fifths of the stock drawn: {len(early)} decisions, {em:+.2f} +- {es:.2f}; "
                     f"later: {len(late)}, {lm:+.2f} +- {ls:.2f}")
    ideal, ise = mean_se([r.half_best for r in records])
    half = "half the held-out worlds" + (", seeing the hidden hands," if truth != "sampled" else "")
    lines.append(f"  a search of {half} with no threshold (the best mean on the first half, valued on the "
                 f"second): {ideal:+.2f} +- {ise:.2f} points a decision")
    lines.append(f"bench: decisions_worth_{key}_half_best {ideal:.2f} points")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decisions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="aberto", choices=sorted(PRESETS))
    parser.add_argument("--players", type=int, default=2, choices=(2, 4))
    parser.add_argument("--hands", type=int, default=4, help="one-hand games played")
    parser.add_argument("--arm", action="append", default=None,
                        help="expert knobs of an arm, KNOB=VALUE[,KNOB=VALUE] (repeat; the first is the reference)")
    parser.add_argument("--truth-worlds", type=int, default=40, help="held-out worlds per measured decision")
    parser.add_argument("--every", type=int, default=3, help="measure every this many searched decisions")
    parser.add_argument("--budget-ms", type=float, default=50.0, help="each arm's CPU budget per decision")
    parser.add_argument("--seed", default="decisions")
    parser.add_argument("--truth", choices=("players", "real", "sampled"), default="players",
                        help="the held-out worlds: the real hands with the unseen cards shuffled again, played "
                             "on by copies of the table's bots (players) or by fresh heuristic bots (real); or "
                             "worlds sampled as the search samples them (which share the search's model)")
    args = parser.parse_args(argv)
    if args.hands < 1 or args.truth_worlds < 2 or args.every < 1 or args.budget_ms <= 0:
        parser.error("--hands and --every at least 1, --truth-worlds at least 2, --budget-ms above 0")
    expert = pure_expert().ExpertBot(0)
    knobs = {k: type(getattr(expert, k)) for k in dir(expert)
             if not k.startswith("_") and isinstance(getattr(expert, k), (bool, int, float))
             and k not in ("searches", "short_searches", "switches", "worlds", "rollouts", "last_worlds",
                           "last_rollouts", "cut_searches", "last_horizon", "turn_cost", "budget_ms",
                           "max_worlds", "horizon", "strict")}
    texts = args.arm or [""]
    try:
        arms = [parse_arm(t, knobs) for t in texts]
    except ValueError as exc:
        parser.error(str(exc))
    labels = [t or "the expert as it is" for t in texts]
    records = play(args.preset, args.players, args.hands, arms, args.truth_worlds, args.every, args.seed,
                   args.budget_ms, args.truth)
    for line in report(args.preset, args.players, labels, records, args.truth):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

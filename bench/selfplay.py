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

``--suite PRESETS`` (a comma-separated list, or ``all``) plays the first bot against the second in
each of these presets with 2 and with 4 players (``--suite-players``; 4 players: a pair of each,
partners on a side), ``--games`` matches each (``--express-games`` for one-hand presets, whose
matches are a single hand), on ``--jobs`` processes. It times every decision of an ``expert`` bot
(CPU, ``time.process_time``, around ``choose``; the collector run as a game-session replica runs it,
``ServiceCollector``) and prints, with ``--bench``, per preset and table
size the match win rate with its 95% Wilson interval and the number of matches, and the win rate
over the duplicate pairs of games with its 95% interval (Student's t over the pairs, ``paired_rate``:
the pair is the unit of a duplicate sample, and its two games are not independent); then how many
pairings the first bot won over 60% of (the expert's target against the heuristic) at the low end of
either interval, and the CPU per expert decision over the whole suite (mean, p99, max; and the share
of decisions that searched). ``--outcomes FILE`` appends every game's outcome to FILE as JSON lines.

A/B of the expert's tuning, on the same deals: ``--expert-set KNOB=VALUE`` (repeatable) sets a knob
on every expert of the suite; two suites' outcome files, same seed and games, are compared game by
game with ``--compare A B`` (the games each won, those won by one only, the sign test). Likewise
for the heuristic: with ``--bots heuristic,heuristic``, ``--heuristic-set KNOB=VALUE`` (repeatable)
plays a variant of the heuristic (the first bot) against the plain one. A suite can
be played in parts (``--first-game N``: ``--games`` matches of each pairing from game N, the same
deals as a whole run's games N to N + games - 1),
and ``--summarize FILE...`` gives the win rates over the parts' outcome files together.
``--budget-ms`` sets the expert's CPU budget per decision (default: the bot's default). ``--smoke``
is the suite at a tiny size (one single hand per preset and table size, a 5 ms budget), for CI.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import multiprocessing
import statistics
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from engine.actions import Action, Discard
from engine.bots.base import BOT_KINDS, Bot, make_bot
from engine.bots.expert import ExpertBot, student_quantile
from engine.bots.heuristic import HeuristicBot
from engine.errors import EngineError
from engine.match import MatchState
from engine.rules import PRESETS, Ruleset, ruleset_from_spec
from engine.selfplay import BotStats, SelfPlayResult, first_dealer, play_hand, run, side_of_bot
from services.common.collector import GC_SETTLE_SECONDS, GC_THRESHOLDS, collect_young_and_freeze


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% for ``z = 1.96``)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


#: the expert's target against the heuristic (issue 25): at least this share of matches in every pairing
TARGET_RATE = 0.6


def student_t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of freedom: the engine's
    own (the expert's switch asks it), from the normal law's ``p`` quantile."""
    return student_quantile(NormalDist().inv_cdf(p), df)


@dataclass(slots=True)
class PairedRate:
    """A win rate over duplicate pairs of games (the same deals, each bot on either side).

    The two games of a pair are not independent (the deal's luck favours the same side in both), so
    the unit of the sample is the pair: its value is the share of its games the bot won (0, 1/2 or
    1), the rate is their mean and its 95% interval Student's t over the pairs' values. Where the
    deal's luck decides a match, a pair is split (one win each) and the interval is narrower than
    Wilson's over the games as if independent; where the same bot wins both or loses both games of a
    pair, wider. A game without its pair (an odd count) is a unit of its own. Where every pair is
    alike (all won, say), the pairs give no spread to size the interval by, and it is Wilson's."""

    rate: float
    low: float
    high: float
    pairs: int
    both_won: int
    split: int
    both_lost: int


def paired_rate(won: Sequence[bool]) -> PairedRate:
    """``won[g]``: whether the bot won game ``g``; games ``2k`` and ``2k + 1`` are a duplicate pair."""
    units: list[float] = []
    both_won = split = both_lost = 0
    for first in range(0, len(won), 2):
        pair = won[first:first + 2]
        units.append(sum(pair) / len(pair))
        if len(pair) == 2:
            wins = sum(pair)
            both_won += wins == 2
            split += wins == 1
            both_lost += wins == 0
    k = len(units)
    if k == 0:
        return PairedRate(0.0, 0.0, 1.0, 0, 0, 0, 0)
    mean = sum(units) / k
    if k < 2:
        return PairedRate(mean, 0.0, 1.0, k, both_won, split, both_lost)
    sd = statistics.stdev(units)
    if sd == 0.0:  # every pair alike: the sample shows no spread to size an interval by; Wilson's over the games
        low, high = wilson(sum(won), len(won))
        return PairedRate(mean, low, high, k, both_won, split, both_lost)
    half = student_t_quantile(0.975, k - 1) * sd / math.sqrt(k)
    return PairedRate(mean, max(0.0, mean - half), min(1.0, mean + half), k, both_won, split, both_lost)


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


class ServiceCollector:
    """Python's collector run as a game-session replica runs it (services/common/collector.py):
    young passes every 10,000 allocations, and every ``GC_SETTLE_SECONDS`` the survivors moved out
    of its sight, so that no collection re-scans the engine's memo tables. The replica settles on
    its event loop, not on the thread that decides for a bot; here the settle runs between two
    decisions, outside their timing. Without it, a full collection of this process (hundreds of
    thousands of memoised objects) would fall inside a decision now and then, a pause the service
    does not have, and the bench's longest decisions would measure the collector.

    The collector is process-wide: it is run so only in the bench's own processes (``enabled`` set
    when run as a program, inherited by its forked workers), never in a process that imports the
    bench (the tests)."""

    def __init__(self) -> None:
        self.enabled = False
        self.settled: float | None = None

    def settle_if_due(self) -> None:
        if not self.enabled:
            return
        now = time.process_time()
        if self.settled is None:
            gc.set_threshold(*GC_THRESHOLDS)
        if self.settled is None or now - self.settled >= GC_SETTLE_SECONDS:
            collect_young_and_freeze()
            self.settled = now


#: One per process (the collector is process-wide): the worker processes' own after a fork.
COLLECTOR = ServiceCollector()


class TimedBot:
    """A bot whose decisions are timed (CPU, ``time.process_time``): the bench's view of its cost,
    with the collector run as the service runs it (``ServiceCollector``)."""

    def __init__(self, bot: Bot, times: list[float]) -> None:
        self.bot = bot
        self.name = bot.name
        self.times = times  # ms per ``choose`` call, appended

    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        COLLECTOR.settle_if_due()
        start = time.process_time()
        action = self.bot.choose(view, legal)
        self.times.append(1000.0 * (time.process_time() - start))
        return action

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        return self.bot.choose_discard(view, legal)


@dataclass(slots=True)
class MatchOutcome:
    """One match of a suite, as a worker process returns it."""

    swap: int  # bot b played side (b + swap) % 2
    hand_totals: list[list[int]]  # per hand, per side
    totals: list[int]
    winner: int
    turns: int
    actions: int
    cpu_ms: list[float] = field(default_factory=list)  # per expert decision
    searched: int = 0  # expert decisions that searched
    short_searches: int = 0  # ... with fewer worlds than the expert's prune_after: too few to switch
    switches: int = 0  # ... whose choice replaced the heuristic's
    cut_searches: int = 0  # ... whose rollouts were cut short and valued by the learned evaluation
    worlds: int = 0  # worlds the searches dealt (what the budget bought: each plays every live candidate)
    deals: list[str] = field(default_factory=list)  # per hand: a digest of its deal (duplicate pairs share them)


def play_match(rules_spec: dict[str, Any], players: int, kinds: tuple[str, str], seed: str, game: int,
               budget_ms: float | None, single_hand: bool, knobs: Mapping[str, Any] | None = None) -> MatchOutcome:
    """Match (or hand) ``game`` of a pairing, seated as ``engine.selfplay.run`` seats it, dealt in
    duplicate: games ``2k`` and ``2k + 1`` deal the same hands (hand ``h`` of both from the seed of
    pair ``k``) with the same first dealer, each bot on the other side, so that the luck of the deal
    cancels out of the comparison and only the play differs. ``knobs`` (``expert_knobs``) are set
    on every expert bot of the match, but those named ``heuristic.KNOB`` (``heuristic_knobs``): those
    are set on the first bot's players, a heuristic bot (a variant against the plain heuristic)."""
    rules = Ruleset(**rules_spec)
    swap = side_of_bot(0, game)
    side_kind = [kinds[swap], kinds[1 - swap]]
    times: list[float] = []
    bots: list[Bot] = []
    experts: list[ExpertBot] = []
    for seat in range(players):
        bot = make_bot(side_kind[seat & 1], f"{seed}/{game}/{seat}", rules, budget_ms=budget_ms)
        if isinstance(bot, ExpertBot):
            for knob, value in (knobs or {}).items():
                if not knob.startswith(HEURISTIC_PREFIX):
                    setattr(bot, knob, value)
            experts.append(bot)
            bots.append(TimedBot(bot, times))
        elif isinstance(bot, HeuristicBot):
            if (seat & 1) == swap:  # the first bot's
                bot.tune({knob[len(HEURISTIC_PREFIX):]: value for knob, value in (knobs or {}).items()
                          if knob.startswith(HEURISTIC_PREFIX)})
            bots.append(bot)
        else:
            bots.append(bot)
    match = MatchState(rules, players, first_dealer=first_dealer(game, players))
    outcome = MatchOutcome(swap, [], [0, 0], -1, 0, 0)
    while match.needs_deal():
        match.start_hand(seed=f"{seed}/deal/{game // 2}/{match.hands_played}")
        assert match.hand is not None
        deal = json.dumps(match.hand.deal.to_json(), sort_keys=True).encode()
        outcome.deals.append(hashlib.sha256(deal).hexdigest()[:16])
        outcome.actions += play_hand(match, bots)
        assert match.hand is not None
        outcome.turns += match.hand.turns
        outcome.hand_totals.append([s["total"] for s in match.hand_scores[-1]])
        if single_hand:
            break
    outcome.totals = match.totals[:]
    outcome.winner = match.winner
    outcome.cpu_ms = times
    outcome.searched = sum(b.searches for b in experts)
    outcome.short_searches = sum(b.short_searches for b in experts)
    outcome.switches = sum(b.switches for b in experts)
    outcome.cut_searches = sum(b.cut_searches for b in experts)
    outcome.worlds = sum(b.worlds for b in experts)
    return outcome


def first_bot_won(swap: int, winner: int, hand_totals: list[list[int]], single_hand: bool) -> bool:
    """Whether the first bot (side ``swap % 2``) won a game: the match's winner, or a single hand's
    higher total (a single hand decides no match)."""
    mine = swap % 2
    if single_hand:
        return hand_totals[0][mine] > hand_totals[0][1 - mine]
    return winner == mine


def _play_match_task(task: tuple[dict[str, Any], int, tuple[str, str], str, int, float | None, bool,
                                 Mapping[str, Any] | None]) -> MatchOutcome:
    return play_match(*task)


@dataclass(slots=True)
class SuiteRun:
    result: SelfPlayResult
    cpu_ms: list[float]
    searched: int
    short_searches: int
    switches: int
    cut_searches: int
    worlds: int
    won: list[bool]  # per game: whether the first bot won it (the match, or the single hand)
    outcomes: list[MatchOutcome]


def run_pairing(rules: Ruleset, players: int, kinds: tuple[str, str], seed: str, games: int,
                budget_ms: float | None, single_hands: bool, jobs: int,
                knobs: Mapping[str, Any] | None = None, first_game: int = 0) -> SuiteRun:
    """``games`` matches (or single hands) of one pairing, games ``first_game`` to ``first_game +
    games - 1`` (``first_game`` even: whole duplicate pairs), tallied as ``engine.selfplay.run``
    tallies."""
    if first_game % 2:
        raise ValueError("first_game must be even: a duplicate pair is games 2k and 2k + 1")
    stats = [BotStats(kinds[0]), BotStats(kinds[1])]
    result = SelfPlayResult(rules, players, stats)
    tasks = [(rules.to_dict(), players, kinds, seed, game, budget_ms, single_hands, knobs)
             for game in range(first_game, first_game + games)]
    started = time.perf_counter()
    if jobs > 1 and games > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            outcomes = pool.map(_play_match_task, tasks, chunksize=1)
    else:
        outcomes = [_play_match_task(t) for t in tasks]
    result.seconds = time.perf_counter() - started
    cpu: list[float] = []
    searched = short = switches = cut = worlds = 0
    won: list[bool] = []
    for o in outcomes:
        won.append(first_bot_won(o.swap, o.winner, o.hand_totals, single_hands))
        cpu.extend(o.cpu_ms)
        searched += o.searched
        short += o.short_searches
        switches += o.switches
        cut += o.cut_searches
        worlds += o.worlds
        result.turns += o.turns
        result.actions += o.actions
        for totals in o.hand_totals:
            result.hands += 1
            for b in (0, 1):
                side = (b + o.swap) % 2
                st = stats[b]
                st.hands += 1
                st.hand_points += totals[side]
                if totals[side] > totals[1 - side]:
                    st.hands_won += 1
                elif totals[side] == totals[1 - side]:
                    st.hands_tied += 1
        if not single_hands:
            result.matches += 1
            for b in (0, 1):
                side = (b + o.swap) % 2
                st = stats[b]
                st.matches += 1
                st.match_points += o.totals[side]
                st.matches_won += o.winner == side
    return SuiteRun(result, cpu, searched, short, switches, cut, worlds, won, outcomes)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by the nearest-rank method."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def suite(presets: list[str], players_list: list[int], kinds: tuple[str, str], seed: str, games: int,
          express_games: int, budget_ms: float | None, single_hands: bool, jobs: int, bench: bool,
          outcomes_path: Path | None = None, knobs: Mapping[str, Any] | None = None,
          first_game: int = 0) -> Iterator[str]:
    """Every preset at every table size: the report of each pairing as it ends, then the CPU per expert
    decision over the suite. With ``outcomes_path``, every game's outcome is appended to that file as
    a JSON line (preset, table size, game number, the expert's ``knobs`` and ``MatchOutcome`` but the
    decisions' CPU times), for analyses the summary does not print (``compare``)."""
    cpu: list[float] = []
    searched = short = switches = cut = worlds = 0
    over = [0, 0, 0]  # pairings; of which the low end of the 95% interval is over 60%: Wilson's, the pairs'
    name = f"{kinds[0]}_vs_{kinds[1]}"
    budget = ExpertBot(0).budget_ms if budget_ms is None else budget_ms
    unit = "single hands" if single_hands else "matches"
    yield (f"suite {name}: presets {', '.join(presets)}; players {', '.join(map(str, players_list))}; "
           f"{games} {unit} each ({express_games} in one-hand presets)"
           + (f", from game {first_game}" if first_game else "") + "; "
           f"expert budget {budget} ms CPU per decision; {jobs} process(es)"
           + "".join(f"; {'' if knob.startswith(HEURISTIC_PREFIX) else 'expert '}{knob} = {value}"
                     for knob, value in (knobs or {}).items()))
    for preset_name in presets:
        rules = PRESETS[preset_name]
        n = express_games if rules.target == 0 else games
        for players in players_list:
            run_ = run_pairing(rules, players, kinds, seed, n, budget_ms, single_hands, jobs, knobs, first_game)
            cpu.extend(run_.cpu_ms)
            searched += run_.searched
            short += run_.short_searches
            switches += run_.switches
            cut += run_.cut_searches
            worlds += run_.worlds
            yield from report(run_.result)
            if run_.searched:
                yield _searches_line(run_.searched, run_.short_searches, run_.switches, run_.cut_searches, run_.worlds)
            paired = paired_rate(run_.won)
            lo, hi = wilson(sum(run_.won), len(run_.won))  # the games won: the first bot's matches or hands won
            over[0] += 1
            over[1] += lo > TARGET_RATE
            over[2] += paired.low > TARGET_RATE
            yield (f"duplicate pairs ({kinds[0]}): {paired.pairs}, both won {paired.both_won}, split {paired.split}, "
                   f"both lost {paired.both_lost}; win rate {100 * paired.rate:.1f}% (95% CI "
                   f"{100 * paired.low:.1f}%..{100 * paired.high:.1f}%, Student's t over the pairs)")
            if outcomes_path is not None:
                with outcomes_path.open("a", encoding="utf-8") as out:
                    for index, o in enumerate(run_.outcomes):
                        row = {"preset": preset_name, "players": players, "game": first_game + index,
                               "seed": seed, "kinds": list(kinds), "knobs": dict(knobs or {}), "won": run_.won[index],
                               **asdict(o)}
                        del row["cpu_ms"]
                        out.write(json.dumps(row, sort_keys=True) + "\n")
            if bench:
                a = run_.result.stats[0]
                key = f"{name}_{'hand' if single_hands else 'match'}_winrate_{preset_name}_{players}p"
                won, total = (a.hands_won, a.hands) if single_hands else (a.matches_won, a.matches)
                yield f"bench: {key} {100 * won / max(1, total):.1f} %"
                yield f"bench: {key}_ci95_low {100 * lo:.1f} %"
                yield f"bench: {key}_ci95_high {100 * hi:.1f} %"
                yield f"bench: {key}_paired_ci95_low {100 * paired.low:.1f} %"
                yield f"bench: {key}_paired_ci95_high {100 * paired.high:.1f} %"
                count = "hands" if single_hands else "matches"
                yield f"bench: {name}_{count}_{preset_name}_{players}p {total} {count}"
    yield (f"pairings where {kinds[0]} won over {100 * TARGET_RATE:.0f}% at the low end of the 95% interval: "
           f"{over[2]} of {over[0]} (duplicate pairs), {over[1]} of {over[0]} (Wilson, the games as independent)")
    if bench:
        yield f"bench: {name}_pairings {over[0]} pairings"
        yield f"bench: {name}_pairings_over_{100 * TARGET_RATE:.0f}pct_paired {over[2]} pairings"
        yield f"bench: {name}_pairings_over_{100 * TARGET_RATE:.0f}pct_wilson {over[1]} pairings"
    if cpu:
        mean = sum(cpu) / len(cpu)
        yield (f"expert decisions: {len(cpu)}, of which {searched} searched; CPU per decision mean "
               f"{mean:.2f} ms, p50 {percentile(cpu, 0.5):.2f} ms, p99 {percentile(cpu, 0.99):.2f} ms, "
               f"max {max(cpu):.2f} ms (budget {budget} ms)")
        if searched:
            yield _searches_line(searched, short, switches, cut, worlds)
        if bench:
            yield f"bench: expert_cpu_per_decision_mean {mean:.2f} ms"
            yield f"bench: expert_cpu_per_decision_p99 {percentile(cpu, 0.99):.2f} ms"
            yield f"bench: expert_cpu_per_decision_max {max(cpu):.2f} ms"
            yield f"bench: expert_decisions {len(cpu)} decisions"
            yield f"bench: expert_searched_decisions {100 * searched / len(cpu):.1f} %"
            if searched:
                yield f"bench: expert_searches_short {100 * short / searched:.1f} %"
                yield f"bench: expert_searches_switched {100 * switches / searched:.1f} %"
                yield f"bench: expert_searches_cut {100 * cut / searched:.1f} %"
                yield f"bench: expert_worlds_per_search {worlds / searched:.2f} worlds"


def _searches_line(searched: int, short: int, switches: int, cut: int, worlds: int) -> str:
    """What the expert's searches bought: those that ended with too few worlds to replace the
    heuristic's choice (its budget spent on a world or two), those that replaced it, those whose
    rollouts were cut short (valued by the learned evaluation), and the worlds they dealt (the faster
    the rollouts, the more a budget buys)."""
    return (f"expert searches: {searched}; with too few worlds to switch {short} ({100 * short / searched:.1f}%); "
            f"switched from the heuristic's choice {switches} ({100 * switches / searched:.1f}%); "
            f"rollouts cut short {cut} ({100 * cut / searched:.1f}%); "
            f"worlds dealt {worlds} ({worlds / searched:.2f} a search)")


#: the expert's tuning knobs that ``--expert-set`` may set, with their types (those of a new bot's
#: values: in the compiled engine the class holds descriptors, not the defaults)
EXPERT_KNOBS: dict[str, type] = {
    name: type(getattr(ExpertBot(0), name)) for name in (
        "discard_candidates", "play_candidates", "search_all_plays", "prune_after", "prune_z", "pick_z",
        "pairs_pick_z", "express_pick_z", "express_pairs_pick_z", "pick_margin", "student_switch", "win_weight",
        "express_pairs_win_weight", "hand_weight", "morto_weight", "cut_worlds", "min_cut_turns", "assume_laid",
        "assume_declined", "match_aware", "tuned_policy")
}


#: ``--heuristic-set``'s knobs go into the same mapping as the expert's, named with this prefix
HEURISTIC_PREFIX = "heuristic."
#: the heuristic's tuning knobs that ``--heuristic-set`` may set, with their types (as the expert's);
#: and ``pile_params.STAGE``, one stage's four parameters of taking the pile (``HeuristicBot.PILE_PARAMS``)
HEURISTIC_KNOBS: dict[str, type] = {
    name: type(getattr(HeuristicBot(0), name)) for name in (
        "pile_per_laid", "pile_wild", "max_stale_turns", "wild_spent", "wild_spent_well", "keep_wilds",
        "wild_surplus", "dirtying", "direct_batida", "indirect_batida", "feed_danger", "feed_near_canastra",
        "close_hand", "close_meld", "out_when_pressed", "length_weight", "shed_value")
}


def heuristic_knobs(settings: Sequence[str]) -> dict[str, Any]:
    """``KNOB=VALUE`` settings of the heuristic as a mapping of ``heuristic.KNOB`` to values of the
    knobs' types (``pile_params.STAGE=BAR,DEAD,LINK,SMALL``: a tuple of four numbers); ``ValueError``
    naming the setting otherwise."""
    out: dict[str, Any] = {}
    for setting in settings:
        knob, sep, text = setting.partition("=")
        knob = knob.strip()
        stage = knob.partition("pile_params.")[2] if knob.startswith("pile_params.") else ""
        if stage:
            if stage not in HeuristicBot.PILE_PARAMS:
                stages = ", ".join(HeuristicBot.PILE_PARAMS)
                raise ValueError(f"{setting!r}: pile_params takes a stage, one of {stages}")
            try:
                params = tuple(float(x) for x in text.split(","))
            except ValueError:
                params = ()
            if not sep or len(params) != 4:
                raise ValueError(f"{setting!r}: pile_params.{stage} takes four numbers: BAR,DEAD,LINK,SMALL")
            out[HEURISTIC_PREFIX + knob] = params
            continue
        if not sep or knob not in HEURISTIC_KNOBS:
            raise ValueError(f"{setting!r}: expected KNOB=VALUE with KNOB one of {', '.join(HEURISTIC_KNOBS)}, "
                             f"or pile_params.STAGE")
        out[HEURISTIC_PREFIX + knob] = _knob_value(setting, knob, HEURISTIC_KNOBS[knob], text)
    return out


def _knob_value(setting: str, knob: str, kind: type, text: str) -> Any:
    """``text`` as a value of ``kind`` (``true``/``false`` for a bool); ``ValueError`` naming ``setting``."""
    try:
        if kind is bool:
            if text.strip().lower() not in ("true", "false"):
                raise ValueError(text)
            return text.strip().lower() == "true"
        return kind(text)
    except ValueError:
        raise ValueError(f"{setting!r}: {knob} takes a {kind.__name__}") from None


def expert_knobs(settings: Sequence[str]) -> dict[str, Any]:
    """``KNOB=VALUE`` settings as a mapping of the expert's knobs to values of their types; ``ValueError``
    naming the setting otherwise."""
    out: dict[str, Any] = {}
    for setting in settings:
        knob, sep, text = setting.partition("=")
        knob = knob.strip()
        if not sep or knob not in EXPERT_KNOBS:
            raise ValueError(f"{setting!r}: expected KNOB=VALUE with KNOB one of {', '.join(EXPERT_KNOBS)}")
        out[knob] = _knob_value(setting, knob, EXPERT_KNOBS[knob], text)
    return out


def _outcome_rows(path: Path) -> dict[tuple[str, int, str, int], dict[str, Any]]:
    rows: dict[tuple[str, int, str, int], dict[str, Any]] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
                rows[(row["preset"], row["players"], row["seed"], row["game"])] = row
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{path}:{number}: not an outcome line of --outcomes ({exc})") from None
    return rows


def _won(row: Mapping[str, Any]) -> bool:
    """Whether the first bot won the game of an outcome line (its ``won``, or for a line without it, a
    match's winner, or a single hand's totals, against the first bot's side)."""
    if "won" in row:
        return bool(row["won"])
    winner = int(row["winner"])
    single_hand = winner < 0 and len(row["hand_totals"]) == 1
    return first_bot_won(int(row["swap"]), winner, row["hand_totals"], single_hand)


def summarize(paths: Sequence[Path]) -> Iterator[str]:
    """The win rates of the first bot per pairing over one or more ``--outcomes`` files (a suite run in
    parts with ``--first-game``, say): games won, Wilson's interval, the duplicate pairs' interval,
    and how many pairings are over 60% at the low end of each. A game found twice is refused."""
    rows: dict[tuple[str, int, str, int], dict[str, Any]] = {}
    for path in paths:
        for key, row in _outcome_rows(path).items():
            if key in rows:
                raise ValueError(f"{path}: game {key[3]} of {key[0]} {key[1]}p (seed {key[2]}) is in another file too")
            rows[key] = row
    pairings: dict[tuple[str, int, str], dict[int, bool]] = {}
    for (preset, players, seed, game), row in rows.items():
        pairings.setdefault((preset, players, seed), {})[game] = _won(row)
    over = [0, 0]
    for (preset, players, seed), games in pairings.items():
        numbers = sorted(games)
        won = [games[g] for g in numbers]
        if numbers != list(range(numbers[0], numbers[0] + len(numbers))) or numbers[0] % 2:
            raise ValueError(f"{preset} {players}p (seed {seed}): games {numbers[0]}..{numbers[-1]} are not whole "
                             "duplicate pairs in a row")
        lo, hi = wilson(sum(won), len(won))
        paired = paired_rate(won)
        over[0] += lo > TARGET_RATE
        over[1] += paired.low > TARGET_RATE
        yield (f"{preset} {players}p (seed {seed}, games {numbers[0]}..{numbers[-1]}): won {sum(won)}/{len(won)} = "
               f"{100 * sum(won) / len(won):.1f}%; Wilson {100 * lo:.1f}%..{100 * hi:.1f}%; duplicate pairs "
               f"{100 * paired.low:.1f}%..{100 * paired.high:.1f}% (both won {paired.both_won}, split {paired.split}, "
               f"both lost {paired.both_lost})")
    yield (f"pairings over {100 * TARGET_RATE:.0f}% at the low end of the 95% interval: {over[1]} of {len(pairings)} "
           f"(duplicate pairs), {over[0]} of {len(pairings)} (Wilson)")


def sign_test(only_a: int, only_b: int) -> float:
    """The two-sided p-value of the sign test: ``only_a`` games won by A alone against ``only_b`` by B
    alone, each equally likely if A and B play as well as each other (ties dropped)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / (1 << n))


def compare(a_path: Path, b_path: Path) -> Iterator[str]:
    """Two suites' outcomes (``--outcomes``) on the same games (preset, table size, seed and game
    number: the same deals), compared game by game: per pairing, the games each won, those won by
    one only, and the sign test's p-value. A paired comparison: the luck of the deals is the same on
    both sides, so a difference of a few games means more than between two unpaired rates."""
    a_rows, b_rows = _outcome_rows(a_path), _outcome_rows(b_path)
    common = sorted(set(a_rows) & set(b_rows))
    if not common:
        raise ValueError(f"{a_path} and {b_path} share no game (preset, table size, seed, game number)")
    knobs = [dict(rows[common[0]].get("knobs", {})) for rows in (a_rows, b_rows)]
    yield f"A: {a_path} (knobs {knobs[0] or 'defaults'}); B: {b_path} (knobs {knobs[1] or 'defaults'})"
    pairings: dict[tuple[str, int], list[tuple[bool, bool]]] = {}
    for key in common:
        pairings.setdefault((key[0], key[1]), []).append((_won(a_rows[key]), _won(b_rows[key])))
    total = [0, 0, 0, 0, 0]
    for (preset, players), games in pairings.items():
        won_a = sum(a for a, _ in games)
        won_b = sum(b for _, b in games)
        only_a = sum(a and not b for a, b in games)
        only_b = sum(b and not a for a, b in games)
        for i, v in enumerate((len(games), won_a, won_b, only_a, only_b)):
            total[i] += v
        yield (f"{preset} {players}p: {len(games)} games; A won {won_a}, B won {won_b}; A alone {only_a}, "
               f"B alone {only_b}; sign test p = {sign_test(only_a, only_b):.3f}")
    yield (f"all: {total[0]} games; A won {total[1]}, B won {total[2]}; A alone {total[3]}, B alone {total[4]}; "
           f"sign test p = {sign_test(total[3], total[4]):.3f}")


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
    parser.add_argument("--budget-ms", type=float, default=None,
                        help="the expert bot's CPU budget per decision, in ms (default: the bot's default)")
    parser.add_argument("--suite", default="",
                        help="presets (comma-separated, or 'all') to play at every table size of --suite-players")
    parser.add_argument("--suite-players", default="2,4", help="with --suite: table sizes, e.g. 2,4")
    parser.add_argument("--express-games", type=int, default=-1,
                        help="with --suite: matches in one-hand presets (default: --games)")
    parser.add_argument("--jobs", type=int, default=1, help="with --suite: worker processes")
    parser.add_argument("--first-game", type=int, default=0,
                        help="with --suite: play --games (--express-games) matches of each pairing from "
                             "game N (N even), games N to N + games - 1: a suite in parts, whose --outcomes "
                             "files together are the whole")
    parser.add_argument("--outcomes", type=Path, default=None,
                        help="with --suite: append every game's outcome to this file (JSON lines)")
    parser.add_argument("--expert-set", action="append", default=[], metavar="KNOB=VALUE",
                        help=f"with --suite: set an expert knob ({', '.join(EXPERT_KNOBS)}); repeatable")
    parser.add_argument("--heuristic-set", action="append", default=[], metavar="KNOB=VALUE",
                        help="with --suite and a heuristic first bot: set a knob on its players (a variant "
                             f"against the plain heuristic: {', '.join(HEURISTIC_KNOBS)}, pile_params.STAGE); "
                             "repeatable")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                        help="compare two --outcomes files game by game (the same seed and games) and exit")
    parser.add_argument("--summarize", nargs="+", type=Path, metavar="FILE",
                        help="the win rates per pairing over --outcomes files (a suite run in parts) and exit")
    parser.add_argument("--smoke", action="store_true",
                        help="with --suite: one single hand per preset and table size, a 5 ms budget (CI)")
    args = parser.parse_args(argv)
    if args.games < 0 or args.hands < 0 or args.min_hands < 0:
        parser.error("--games, --hands and --min-hands must not be negative")
    if args.hands and args.min_hands:
        parser.error("--min-hands goes with --games (matches), not with --hands")
    if args.compare or args.summarize:
        try:
            for line in compare(*args.compare) if args.compare else summarize(args.summarize):
                print(line)
        except (OSError, ValueError) as exc:
            parser.error(f"{'--compare' if args.compare else '--summarize'}: {exc}")
        return 0
    if args.first_game < 0 or args.first_game % 2:
        parser.error("--first-game takes an even number (a duplicate pair is games 2k and 2k + 1)")
    try:
        knobs = expert_knobs(args.expert_set)
    except ValueError as exc:
        parser.error(f"--expert-set: {exc}")
    try:
        knobs.update(heuristic_knobs(args.heuristic_set))
    except ValueError as exc:
        parser.error(f"--heuristic-set: {exc}")
    if args.heuristic_set and (args.bots[0] != "heuristic" or not args.suite):
        parser.error("--heuristic-set: a variant of the first bot, with --suite: --bots heuristic,...")
    if args.suite:
        presets = list(PRESETS) if args.suite == "all" else [p.strip() for p in args.suite.split(",")]
        unknown = [p for p in presets if p not in PRESETS]
        if unknown:
            parser.error(f"--suite: unknown preset(s) {', '.join(unknown)}")
        try:
            players_list = [int(p) for p in args.suite_players.split(",")]
        except ValueError:
            parser.error("--suite-players takes table sizes such as 2,4")
        if any(p not in (2, 4) for p in players_list):
            parser.error("--suite-players takes table sizes such as 2,4")
        if args.smoke:
            games, express, budget, single = 1, 1, 5.0 if args.budget_ms is None else args.budget_ms, True
        else:
            games = args.games or args.hands or 10
            express = args.express_games if args.express_games >= 0 else games
            budget, single = args.budget_ms, bool(args.hands)
        for line in suite(presets, players_list, args.bots, args.seed, games, express, budget, single,
                          max(1, args.jobs), args.bench, args.outcomes, knobs, args.first_game):
            print(line, flush=True)
        return 0
    games = args.games if args.games or args.hands or args.min_hands else 100
    result = run(args.ruleset, args.players, args.bots, args.seed, games=games if not args.hands else 0,
                 hands=args.hands, min_hands=args.min_hands)
    for line in report(result, bench=args.bench):
        print(line)
    return 0


if __name__ == "__main__":
    COLLECTOR.enabled = True
    sys.exit(main())

"""The expert player: determinised Monte Carlo search over the heuristic bot's best candidates.

At each decision that is a real choice, the bot

1. asks the heuristic bot (its *advisor*, fed the same views) for its choice, and for a few
   alternatives in the heuristic's own order: the other way to draw, the next-best discards, the
   best meld the heuristic declined, or, when the heuristic would meld, the next-best meld and
   stopping to discard instead (``_candidates``);
2. deals *worlds*: the cards the seat cannot see, sampled consistently with everything it knows
   (its view and the public history it remembered, ``engine/bots/sampling.py``); with
   ``assume_laid`` or ``assume_declined`` above 0 (off by default: docs/performance.md, "Bots"), the
   worlds lean towards other hands that laid down what they could and held nothing to take the pile
   for;
3. in each world plays every candidate, then the rest of the hand with the heuristic bot in every
   seat (the opponents are played as the heuristic plays, the seat itself too; with
   ``tuned_policy``, off by default, the seat's side and its advisor play the heuristic tuned,
   ``heuristic.TUNED_KNOBS``), up to the end of
   the hand, and scores the result for its side (``_utility``: the hand's score difference; in a
   one-hand match, and with ``match_aware`` in a hand in which a side reaches the match's target
   from the view's ``match_totals``, winning the match weighs ``win_weight`` more). Where
   the ruleset has a learned evaluation (``engine/bots/evaluation.py``) and ``cut_worlds`` worlds
   played to the end of the hand would not fit in the budget (early in a long hand), the rollouts
   stop after as many turns as let them fit, and the evaluation values where they stopped
   (``_horizon``);
4. keeps the heuristic's choice unless another candidate beats it by a margin the evidence
   supports: the differences are paired (every candidate is played in the same worlds, with the same
   seeds: common random numbers), a candidate is dropped once it is clearly worse, and it replaces
   the heuristic's choice only if its mean gain exceeds a threshold in standard errors that depends
   on the match's kind (``pick_z``, ``pairs_pick_z``, ``express_pick_z``, ``express_pairs_pick_z``:
   to a target or one hand, two players or two pairs; ``threshold``) and ``pick_margin`` points.

Guarantees:

- **Only what the seat may see.** The bot reads its ``view`` as a mapping (public fields and its
  own hand) and the ``legal`` actions; it never touches the state behind the view. Every position
  it searches is one it built itself from that knowledge (``sampling.information``/``sample``).
- **Always legal.** The action returned is one of ``legal``: candidates are taken from it.
- **Budget.** A decision stops dealing worlds once the CPU time it used (``time.process_time``,
  from the start of ``choose``), plus the mean cost of one world, would pass ``budget_ms``. A
  world plays every live candidate once (a few rollouts), so the overshoot is bounded by one
  world's cost estimate; rollouts are also capped in length (``MAX_ROLLOUT_ACTIONS``). Trivial
  decisions (one legal action, a draw with the pile not takeable, the draw forced by the
  anti-exchange rule below) do no search. ``budget_ms=0`` gives exactly the heuristic's choice
  (the tuned heuristic's with ``tuned_policy``).
- **Deterministic for its seed**, for a given number of worlds per decision: the worlds and the
  rollouts' seeds derive from the seed and the decision's number, never from the clock. Under a
  CPU budget the number of worlds depends on the machine's speed, so two runs agree only as far
  as their budgets bought the same worlds (and cut their rollouts alike: the cut is sized by the
  measured CPU cost of a rollout's turn); ``max_worlds`` with ``budget_ms=None`` is exact, its
  rollouts never cut.
- **No endless pile exchange.** Like the heuristic, it draws when the stock has not shrunk since its
  previous turn, so two bots that keep taking the pile still run the stock down.

``choose_discard`` (a timed-out turn's automatic discard) answers at once with the heuristic's
discard: the player's time is up.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from engine.actions import DRAW, TAKE_PILE, Action, AddCards, Discard, MeldCards
from engine.bots.evaluation import Evaluation, weights_for
from engine.bots.heuristic import TUNED_KNOBS, HeuristicBot
from engine.bots.reading import TableMeld, TypedView, read_meld
from engine.bots.sampling import Information, PublicMemory, SamplingError, information, sample
from engine.cards import CARD_STR, JOKER
from engine.errors import EngineError
from engine.melds import Meld, card_values
from engine.rules import Ruleset
from engine.state import HandState
from engine.view import SEAT_KEYS

#: a rollout stops after this many actions (a hand lasts a few hundred): a guard, never reached in play
MAX_ROLLOUT_ACTIONS = 4000
#: a rollout reads the CPU clock every this many actions (a few hundred microseconds of play)
CLOCK_EVERY = 16
DEFAULT_BUDGET_MS = 50.0


class ExpertBot:
    name = "expert"

    # Tuning knobs (defaults for every instance; experiments and tests may set them on one bot).
    discard_candidates: int = 3  # discards searched when the heuristic discards
    play_candidates: int = 2  # melds/additions searched when the heuristic melds
    search_all_plays: bool = False  # search every meld the heuristic makes, not only the critical ones
    prune_after: int = 3  # worlds before a candidate may be dropped
    prune_z: float = 1.0  # dropped when its mean gain is this many standard errors below 0
    # The switch: a candidate replaces the heuristic's choice when its mean gain is this many standard
    # errors above 0 (and ``pick_margin`` points), one threshold per kind of match (``threshold``). A
    # decision buys a few worlds, whose score differences are heavy-tailed: a test too loose lets
    # chance flips overrule a choice that was as good or better, one too strict refuses the switches
    # worth making. Where the balance lies was measured per kind of match, on the same deals
    # (docs/performance.md, "Bots"):
    # - to a target (the ruleset's target above 0), two players: a looser test's chance flips lose
    #   matches where a search buys few worlds (long hands, as ``aberto``'s), and elsewhere its
    #   switches won no more matches once measured on a second set of deals
    pick_z: float = 2.0
    # - to a target, two pairs: a rollout is worth the hand's score difference, without a win's jump,
    #   and the looser test's switches won more matches than its chance flips lost
    pairs_pick_z: float = 1.5
    # - one hand (target 0), two players: a rollout is worth the hand won or lost (``win_weight``), a
    #   world's difference between two candidates is nearly always a few points or twice
    #   ``win_weight``, and a few worlds' flips (rollouts that part ways after the decision) pass a
    #   test of two standard errors: the switches such a test lets through lose matches
    express_pick_z: float = 3.0
    # - one hand, two pairs: neither a stricter nor a looser test won more matches
    express_pairs_pick_z: float = 2.0
    pick_margin: float = 5.0  # ... and at least this many points of mean gain
    # the threshold read as a one-sided tail of the normal law, and asked of Student's t with as many
    # degrees of freedom as the candidate's worlds less one: the standard error of a few worlds is
    # itself a guess, and with three or four worlds a z test passes far more chance flips than its
    # tail says; with many worlds the two tests agree. On by default: measured in every kind of match
    # (docs/performance.md, "Bots"), it lost in none beyond the noise of a run and won clearly where
    # searches buy the fewest worlds. False: the threshold in standard errors as it is
    student_switch: bool = True
    # express (one-hand) matches: the worth of winning the hand. Only the win counts there, so it
    # outweighs any likely margin; the points difference still ranks lines that win (or lose) alike
    win_weight: float = 1000.0
    # ... in a one-hand match between two pairs (``win_weight`` serves two players, and the matches to
    # a target with ``match_aware``). The same as ``win_weight``: a lower weight won more matches in
    # one of the two one-hand presets and fewer in the other (docs/performance.md, "Bots")
    express_pairs_win_weight: float = 1000.0
    hand_weight: float = 0.6  # at a fixed horizon: cards in hand count this share of their value
    morto_weight: float = 0.5  # ... a morto not yet taken this share of its penalty
    # shortened rollouts: where the ruleset has a learned evaluation (``engine/bots/evaluation.py``)
    # and a world played to the end of the hand would cost more than the budget over ``cut_worlds``,
    # the rollouts stop after as many turns as let ``cut_worlds`` worlds fit (at least
    # ``min_cut_turns``), valued by the learned evaluation. 0 (the default until a measure shows the
    # cut worth it: docs/performance.md, "Bots"): always to the end of the hand
    cut_worlds: int = 0
    min_cut_turns: int = 8
    # worlds lean towards hands that laid down what they could (``sampling.sample``'s ``laid``): per
    # card another seat could have laid down at its last turn, the chance the world deals it elsewhere
    assume_laid: float = 0.0
    # ... and towards hands that held nothing to meld with the pile's top they declined (``declined``)
    assume_declined: float = 0.0
    # in a match to a target, a hand that ends the match (a side reaches the target: the view's
    # ``match_totals`` plus the hand's score) weighs ``win_weight`` more for the side that wins the
    # match. False (the default until a measure shows it worth it: docs/performance.md, "Bots"):
    # every hand is valued by its score difference alone
    match_aware: bool = False
    # its own side's players, the advisor and the side's seats in the rollouts, play the heuristic
    # tuned (``heuristic.TUNED_KNOBS``); the opponents in the rollouts stay the plain heuristic.
    # False (the default until a measure shows it worth it: docs/performance.md, "Bots"): every
    # player is the plain heuristic
    tuned_policy: bool = False

    def __init__(self, seed: int | str = 0, rules: Ruleset | None = None,
                 budget_ms: float | None = DEFAULT_BUDGET_MS, max_worlds: int = 10_000,
                 horizon: int | None = None, clock: Callable[[], float] = time.process_time,
                 strict: bool = False) -> None:
        """``budget_ms``: CPU per decision (``None``: no time limit, ``max_worlds`` alone bounds it);
        ``max_worlds``: worlds per decision at most; ``horizon``: turns a rollout plays before a static
        evaluation (``None``: to the end of the hand); ``clock``: the CPU clock (tests pass a fake);
        ``strict``: raise instead of falling back on the heuristic when a view cannot be searched."""
        self.rules = rules if rules is not None else Ruleset()
        self.values = card_values(self.rules)
        # the advisor sees every view this bot sees, so its memory (pile taken, discards) stays its own
        # and with no search the expert plays exactly as HeuristicBot(seed, rules) (tuned with
        # ``tuned_policy``)
        self.advisor = HeuristicBot(seed, rules)
        self._advisor_tuned = False  # whether the advisor plays tuned (brought to ``tuned_policy`` at each decision)
        self.rng = random.Random(f"expert/{seed}")
        self.memory = PublicMemory()
        self.budget_ms = budget_ms
        self.max_worlds = max_worlds
        self.horizon = horizon
        self.clock = clock
        self.strict = strict
        self._printed: dict[Meld, dict[str, Any]] = {}  # melds' view form, for RolloutView
        self._readings = MeldReadings()  # melds as the rollouts' players read them, for RolloutView
        self._evaluations: dict[int, Evaluation | None] = {}  # per number of players
        self._evaluation: Evaluation | None = None  # the current search's, when its rollouts are cut
        self.turn_cost = 0.0  # CPU seconds per rollout turn, a running mean over worlds (0: none yet)
        self._world_turns = 0  # turns the current world's rollouts played
        # counters (read by tests and benches): decisions searched, worlds dealt, rollouts played;
        # searches that ended with fewer worlds than ``prune_after`` (too few to replace the
        # heuristic's choice: the budget bought no evidence), and searches that replaced it
        self.searches = 0
        self.short_searches = 0
        self.switches = 0
        self.worlds = 0
        self.rollouts = 0
        self.last_worlds = 0
        self.last_rollouts = 0
        self.cut_searches = 0  # searches whose rollouts were cut short (``cut_worlds``)
        self.last_horizon = 0  # the last search's rollout length in turns (0: to the end of the hand)

    # --- the Bot interface ---------------------------------------------------------------------------
    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        start = self.clock()
        self._tune_advisor()
        self.last_worlds = self.last_rollouts = 0
        self.memory.observe(view)
        if view["phase"] == "draw":
            advice = self.advisor.choose(view, legal)
            if len(legal) == 1 or TAKE_PILE not in legal:
                return advice
            if self.memory.stale_turns >= self.advisor.max_stale_turns:
                return DRAW  # the stock has not shrunk since the last turn: draw (no endless exchange)
            other = DRAW if advice != DRAW else TAKE_PILE
            return self._search(view, [advice, other], start)
        if len(legal) == 1:
            action = self.advisor.choose(view, legal)  # a lone discard: the advisor records it
        else:
            advice = self.advisor.choose(view, legal)
            action = self._search(view, self._candidates(view, legal, advice), start)
            if isinstance(action, Discard):
                self.advisor.choose(view, [action])  # the advisor's memory: the discard actually made
        if isinstance(action, Discard):
            self.memory.note_discard(view, action.card)
        return action

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        self._tune_advisor()
        self.memory.observe(view)
        action = self.advisor.choose_discard(view, legal)
        self.memory.note_discard(view, action.card)
        return action

    def _tune_advisor(self) -> None:
        """The advisor's knobs as ``tuned_policy`` says; it may be set on a bot after it was made, so
        every decision calls this, and it does nothing unless the knob changed since the last call."""
        if self._advisor_tuned == self.tuned_policy:
            return
        self.advisor.tune(TUNED_KNOBS if self.tuned_policy else HeuristicBot(0, self.rules).knobs(TUNED_KNOBS))
        self._advisor_tuned = self.tuned_policy

    # --- candidates ----------------------------------------------------------------------------------
    def _candidates(self, view: Mapping[str, Any], legal: list[Action], advice: Action) -> list[Action]:
        """The heuristic's choice first, then the alternatives worth a search, in the heuristic's order."""
        if (self.budget_ms is not None and self.budget_ms <= 0) or self.max_worlds <= 0:
            return [advice]  # no search: skip the ranking (and keep the advisor's RNG as a plain heuristic's)
        plays: list[Action] = [a for a in legal if isinstance(a, (MeldCards, AddCards))]
        discards: list[Action] = [a for a in legal if isinstance(a, Discard)]
        out: list[Action] = [advice]
        if isinstance(advice, Discard):
            rest = [d for d in discards if d != advice]
            while rest and len(out) < self.discard_candidates:
                d = self.advisor.choose_discard(view, rest)
                out.append(d)
                rest.remove(d)
            if plays:
                out.append(self.advisor.choose(view, plays))  # the best meld, which the heuristic declined
            return out
        if not self.search_all_plays and not self._critical(view, advice):
            return out
        rest = [p for p in plays if p != advice]
        while rest and len(out) < self.play_candidates:
            p = self.advisor.choose(view, rest)
            out.append(p)
            rest.remove(p)
        if discards:
            out.append(self.advisor.choose_discard(view, discards))  # stop melding now
        return out

    def _critical(self, view: Mapping[str, Any], play: Action) -> bool:
        """A meld or addition worth a search: it spends a wild, or leaves two cards or fewer (the
        batida, going out, or a hand too small to keep playing safely)."""
        if not isinstance(play, (MeldCards, AddCards)):
            return True
        left = int(view["hand_sizes"][int(view["seat"])]) - len(play.cards)
        return left <= 2 or any(c == JOKER or c % 13 == 1 for c in play.cards)

    # --- search --------------------------------------------------------------------------------------
    def _search(self, view: Mapping[str, Any], candidates: list[Action], start: float) -> Action:
        """The candidate to play: the first (the heuristic's) unless the rollouts show a better one."""
        candidates = distinct(candidates)
        if len(candidates) == 1:
            return candidates[0]
        budget = None if self.budget_ms is None else self.budget_ms / 1000.0
        if (budget is not None and budget <= 0) or self.max_worlds <= 0:
            return candidates[0]
        try:
            info = information(view, self.memory, self.rules)
        except SamplingError:
            if self.strict:
                raise
            return candidates[0]
        self.searches += 1
        if len(self._printed) > 4096:
            self._printed.clear()  # bounded: a hand's melds are a few hundred forms at most
        if len(self._readings.by_meld) > 4096:
            self._readings.clear()
        side = info.seat & 1
        k = len(candidates)
        total = [0.0] * k  # per candidate: sum of its gain over candidate 0, world by world
        square = [0.0] * k
        played = [0] * k
        alive = [True] * k
        decision_seed = self.rng.getrandbits(62)
        deadline = start + budget if budget is not None else math.inf
        horizon = self._horizon(info, k, budget)
        self.last_horizon = 0 if horizon is None else horizon
        worlds = 0
        used = 0.0
        while worlds < self.max_worlds:
            if budget is not None:
                before = used
                used = self.clock() - start
                if worlds and self._world_turns > 0:  # what the last world cost per turn its rollouts played
                    cost = (used - before) / self._world_turns
                    self.turn_cost = cost if self.turn_cost <= 0.0 else self.turn_cost + 0.1 * (cost - self.turn_cost)
                if used + (used / worlds if worlds else 0.0) > budget:
                    break
            self._world_turns = 0
            world_rng = random.Random(decision_seed + worlds)
            try:
                outcomes = self._play_world(info, candidates, alive, side, world_rng, deadline, horizon)
            except EngineError:
                if self.strict:
                    raise
                break
            if outcomes is None:
                break  # out of time within the world
            worlds += 1
            base = outcomes[0]
            for i in range(1, k):
                if alive[i]:
                    gain = outcomes[i] - base
                    total[i] += gain
                    square[i] += gain * gain
                    played[i] += 1
                    if played[i] >= self.prune_after:
                        mean, se = _mean_se(total[i], square[i], played[i])
                        if mean + self.prune_z * se < 0 or (se == 0.0 and mean == 0.0):
                            alive[i] = False  # clearly worse, or no different from the heuristic's choice
            if not any(alive[1:]):
                break
        self.last_worlds = worlds
        self.worlds += worlds
        if worlds < self.prune_after:
            self.short_searches += 1
        best = 0
        best_mean = 0.0
        for i in range(1, k):
            if played[i] >= self.prune_after:
                mean, se = _mean_se(total[i], square[i], played[i])
                if mean > self.pick_margin and mean - self.threshold(info.players, played[i]) * se > 0 \
                        and mean > best_mean:
                    best, best_mean = i, mean
        if best:
            self.switches += 1
        return candidates[best]

    def threshold(self, players: int, worlds: int) -> float:
        """The switch's threshold in standard errors, for a candidate played in ``worlds`` worlds (at
        least 2): the one of this match's kind (one hand or to a target, two players or two pairs),
        with ``student_switch`` read as Student's t of ``worlds - 1`` degrees of freedom."""
        if self.rules.target == 0:
            z = self.express_pick_z if players == 2 else self.express_pairs_pick_z
        else:
            z = self.pick_z if players == 2 else self.pairs_pick_z
        return student_quantile(z, worlds - 1) if self.student_switch else z

    def _horizon(self, info: Information, candidates: int, budget: float | None) -> int | None:
        """The turns each rollout of this search plays (``None``: to the end of the hand, or the
        fixed ``horizon``), and the evaluation that values where a shortened one stops."""
        self._evaluation = None
        if self.horizon is not None or budget is None or self.cut_worlds <= 0 or self.turn_cost <= 0.0:
            return self.horizon
        if info.players not in self._evaluations:
            self._evaluations[info.players] = weights_for(self.rules, info.players)
        evaluation = self._evaluations[info.players]
        if evaluation is None:
            return None
        affordable = budget / (self.cut_worlds * candidates * self.turn_cost)
        if evaluation.remaining_turns(info.stock_count, sum(info.morto_open)) <= affordable:
            return None  # the worlds it wants fit with rollouts to the end of the hand
        self._evaluation = evaluation
        self.cut_searches += 1
        return max(self.min_cut_turns, int(affordable))

    def _play_world(self, info: Information, candidates: list[Action], alive: list[bool], side: int,
                    rng: random.Random, deadline: float, horizon: int | None) -> list[float] | None:
        """One world: each live candidate played, then the hand rolled out; the utility per candidate,
        or ``None`` when the CPU clock passed ``deadline`` first (the world is then dropped whole: its
        candidates are compared only on the same worlds)."""
        world = sample(info, rng, self.assume_laid, self.assume_declined)
        policy_seed = rng.getrandbits(30)
        out = [0.0] * len(candidates)
        for i, action in enumerate(candidates):
            if alive[i]:
                state = world.clone()
                state.apply(action)
                value = self._rollout(state, side, policy_seed, deadline, horizon)
                if value is None:
                    return None
                out[i] = value
        return out

    def _rollout(self, state: HandState, side: int, seed: int, deadline: float,
                 horizon: int | None) -> float | None:
        """Play on with the heuristic bot in every seat, ``horizon`` turns or to the end of the hand;
        the result for ``side``, or ``None`` if the clock passed ``deadline`` (read every
        ``CLOCK_EVERY`` actions)."""
        self.rollouts += 1
        self.last_rollouts += 1
        rules = self.rules
        bots = [HeuristicBot(seed + s, rules) for s in range(state.players)]
        if self.tuned_policy:
            for s in range(side, state.players, 2):
                bots[s].tune(TUNED_KNOBS)
        first = state.turns
        stop = first + horizon if horizon is not None else 1 << 30
        actions = 0
        clock = self.clock
        while not state.is_terminal() and state.turns < stop and actions < MAX_ROLLOUT_ACTIONS:
            if actions % CLOCK_EVERY == 0 and clock() > deadline:
                return None
            seat = state.to_act
            view = RolloutView(state, seat, self._printed, self._readings)
            state.apply(bots[seat].choose(view, state.legal_actions()))
            actions += 1
        self._world_turns += state.turns - first
        return self._utility(state, side)

    def _utility(self, state: HandState, side: int) -> float:
        """The hand's score difference for ``side`` (estimated at a horizon); in a one-hand match,
        winning the hand weighs ``win_weight`` more (``express_pairs_win_weight`` between two pairs).
        A hand stopped by a shortened rollout is valued by the learned evaluation, which predicts this
        same utility."""
        if self._evaluation is not None and not state.is_terminal():
            return self._evaluation.value(state, side)
        score = state.score()
        diff = float(score[side]["total"] - score[1 - side]["total"])
        if not state.is_terminal():
            diff += self._static(state, side) - self._static(state, 1 - side)
        target = self.rules.target
        if target == 0:
            if diff != 0.0:
                weight = self.win_weight if state.players == 2 else self.express_pairs_win_weight
                diff += weight if diff > 0 else -weight
        elif self.match_aware and state.is_terminal():
            mine = state.match_totals[side] + score[side]["total"]
            theirs = state.match_totals[1 - side] + score[1 - side]["total"]
            if (mine >= target or theirs >= target) and mine != theirs:
                diff += self.win_weight if mine > theirs else -self.win_weight
        return diff

    def _static(self, state: HandState, side: int) -> float:
        """What a side's hands and morto will probably cost it once the hand ends (not yet counted)."""
        values = self.values
        cost = 0.0
        for seat in range(side, state.players, 2):
            counts = state.counts[seat]
            cost += sum(values[c] * counts[c] for c in range(len(counts)) if counts[c])
        out = -self.hand_weight * cost
        if state.mortos[side] is not None:
            out -= self.morto_weight * self.rules.morto_penalty
        return out


def _hand_strings(counts: list[int]) -> list[str]:
    return [CARD_STR[c] for c, n in enumerate(counts) if n for _ in range(n)]


class MeldReadings:
    """The rollout players' readings of the melds on the table (``TableMeld``), kept across the
    positions of a bot's searches: by meld, and per side the last row read (its melds and their
    readings), which the next position of a rollout shows again all but a meld or two. Every reading
    is the one ``read_meld`` gives the meld's view form: a meld is immutable, so it reads the same
    wherever it lies."""

    __slots__ = ("by_meld", "melds", "rows")

    def __init__(self) -> None:
        self.by_meld: dict[Meld, TableMeld] = {}
        self.melds: list[list[Meld]] = [[], []]  # per side: the melds of the last row read
        self.rows: list[list[TableMeld]] = [[], []]  # ... and their readings

    def clear(self) -> None:
        self.by_meld.clear()
        self.melds = [[], []]
        self.rows = [[], []]


class RolloutView(TypedView):
    """A seat's view of one of the expert's own simulated positions, for its rollout players.

    The same keys and values as ``HandState.view(seat)`` of a hand being played (the tests compare
    them), computed on each read, with each meld's printed form cached across positions (``cache``,
    one per bot): the rollout's heuristic players read every meld at every decision, and a meld,
    immutable, prints the same every time. As a ``TypedView`` it also gives those players the hand,
    the pile and the melds as they would read them from its fields, without printing them (the
    readings kept in ``readings``, one per bot). Read it before the position changes, as a ``View``.
    """

    __slots__ = ("_cache", "_readings", "_seat", "_state")

    KEYS = SEAT_KEYS

    def __init__(self, state: HandState, seat: int, cache: dict[Meld, dict[str, Any]],
                 readings: MeldReadings) -> None:
        self._state = state
        self._seat = seat
        self._cache = cache
        self._readings = readings

    def hand_counts(self) -> list[int]:
        return self._state.counts[self._seat][:]

    def pile_codes(self) -> list[int]:
        return self._state.pile[:]

    def table_melds(self) -> list[list[TableMeld]]:
        readings = self._readings
        by_meld = readings.by_meld
        out: list[list[TableMeld]] = []
        for side in range(2):
            melds = self._state.melds[side]
            last = readings.melds[side]
            row = readings.rows[side]
            n = len(melds)
            same = n == len(last)
            if same:
                for i in range(n):
                    if melds[i] is not last[i]:
                        same = False
                        break
            if not same:
                made: list[TableMeld] = []
                for i in range(n):
                    m = melds[i]
                    if i < len(last) and last[i] is m:
                        made.append(row[i])  # unchanged since the last row
                        continue
                    read = by_meld.get(m)
                    if read is None:
                        printed = self._view_form(m)
                        read = by_meld[m] = read_meld(printed["kind"], tuple(printed["cards"]), printed["canastra"])
                    made.append(read)
                readings.melds[side] = melds[:]
                readings.rows[side] = row = made
            out.append(row[:])
        return out

    def _view_form(self, m: Meld) -> dict[str, Any]:
        """The meld as the view's ``melds`` field shows it, from the bot's cache."""
        cache = self._cache
        printed = cache.get(m)
        if printed is None:
            printed = cache[m] = m.to_json(self._state.rules)
        return printed

    def __getitem__(self, key: str) -> Any:
        # the keys the rollouts' players read at every decision first (the hand, the pile and the
        # melds they read typed)
        s = self._state
        if key == "phase":
            return s.phase
        if key == "seat":
            return self._seat
        if key == "players":
            return s.players
        if key == "stock_count":
            return len(s.stock)
        if key == "hand_sizes":
            return s.sizes[:]
        if key == "mortos_taken":
            return s.morto_taken[:]
        if key == "mortos_in_stock":
            return s.morto_to_stock[:]
        if key == "hand_number":
            return s.hand_number
        if key == "dealer":
            return s.dealer
        if key == "score":
            return s.score()
        if key == "match_totals":
            return s.match_totals[:]
        if key == "melds":
            return [[self._view_form(m) for m in side] for side in s.melds]
        if key == "discard":
            return [CARD_STR[c] for c in s.pile]
        if key == "hand":
            return _hand_strings(s.counts[self._seat])
        if key == "to_act":
            return s.current_player()
        if key == "must_meld":
            return CARD_STR[s.must_meld] if s.must_meld >= 0 else None
        if key == "lone_card":
            return CARD_STR[s.lone] if s.lone >= 0 else None
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)

    def __contains__(self, key: object) -> bool:
        return key in self.KEYS


def distinct(candidates: list[Action]) -> list[Action]:
    """The candidates without repeats, in their order (the heuristic's choice first)."""
    out: list[Action] = []
    for a in candidates:
        if a not in out:
            out.append(a)
    return out


#: Student's t quantiles already computed, per (normal quantile, degrees of freedom): bounded, as the
#: quantiles asked are the few thresholds' values and the degrees of freedom under 1,000
_STUDENT: dict[tuple[float, int], float] = {}


def student_quantile(z: float, df: int) -> float:
    """The quantile of Student's t with ``df`` degrees of freedom (at least 1) whose upper tail is the
    normal law's above ``z`` (the same tail below ``-z`` for a negative ``z``): found by bisection on
    the t law's distribution (Abramowitz and Stegun 26.7.3-4) under 1,000 degrees of freedom, and from
    there by the first terms of the Cornish-Fisher expansion about ``z`` (26.7.5), within 1e-9 of it
    for ``z`` up to 4. The series lose their digits in tails under about 1e-12 (``z`` past 7): there
    the quantile found is only at least ``z``, which keeps a threshold set out of reach out of reach."""
    if df < 1:
        raise ValueError("Student's t needs at least one degree of freedom")
    if z < 0.0:
        return -student_quantile(-z, df)
    if z == 0.0:
        return 0.0
    if df >= 1000:
        z2 = z * z
        n = float(df)
        return z * (1.0 + (z2 + 1.0) / (4.0 * n) + (5.0 * z2 * z2 + 16.0 * z2 + 3.0) / (96.0 * n * n)
                    + (3.0 * z2 ** 3 + 19.0 * z2 * z2 + 17.0 * z2 - 15.0) / (384.0 * n ** 3))
    key = (z, df)
    known = _STUDENT.get(key)
    if known is not None:
        return known
    tail = 0.5 * math.erfc(z / math.sqrt(2.0))
    low, high = z, z
    while _t_upper_tail(high, df) > tail:
        high *= 2.0
    for _ in range(60):
        middle = 0.5 * (low + high)
        if _t_upper_tail(middle, df) > tail:
            low = middle
        else:
            high = middle
    _STUDENT[key] = high
    return high


def _t_upper_tail(t: float, df: int) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom, t at least 0 (the finite series for
    an integer ``df``)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        term = math.cos(theta)  # the series in cos(theta) ** (2j + 1), j = 0 .. (df - 3) / 2
        series = 0.0
        for j in range(1, (df - 1) // 2 + 1):
            series += term
            term *= c2 * (2 * j) / (2 * j + 1)
        inside = 2.0 / math.pi * (theta + math.sin(theta) * series)  # P(|T| < t)
    else:
        term = 1.0  # the series in cos(theta) ** 2j, j = 0 .. (df - 2) / 2
        series = 0.0
        for j in range(1, df // 2 + 1):
            series += term
            term *= c2 * (2 * j - 1) / (2 * j)
        inside = math.sin(theta) * series
    return 0.5 * (1.0 - inside)


def _mean_se(total: float, square: float, n: int) -> tuple[float, float]:
    """Mean and standard error of ``n`` values from their sum and sum of squares."""
    mean = total / n
    var = max(0.0, square / n - mean * mean) * n / max(1, n - 1)
    return mean, math.sqrt(var / n)


__all__ = [
    "DEFAULT_BUDGET_MS", "MAX_ROLLOUT_ACTIONS", "ExpertBot", "MeldReadings", "RolloutView", "distinct",
    "student_quantile",
]

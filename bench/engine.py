"""Engine speed: ``python -m bench.engine`` (``make bench-engine``).

The engine imported is whichever comes first on the import path: the pure-Python sources, or the
mypyc build of ``make engine-native`` when run from ``build/native`` with the repository on
``PYTHONPATH`` (what ``make bench-engine`` does second). The first line printed says which.

Prints one figure per line as ``bench: NAME VALUE UNIT``:

- hands/s and turns/s of random-legal self-play (the comparison policy of ``engine/bots/random_bot.py``)
  and of heuristic self-play, on one core, for 2 and 4 players; and hands/s with 2 players with
  Python's collector run as the game-session service runs it (``..._service_gc``, see
  ``SETTLE_SECONDS``);
- microseconds per ``legal_actions()`` call (median and p99) on 22-card hands after the morto.

Options: ``--seconds S`` per measurement (default 5), ``--ruleset R`` (default ``fechado``).

Two more checks, for work on the engine's speed:

- ``--digest``: the play digest, one line per policy and table size as ``digest: NAME HEX``: a
  sha256 of every legal-action list (in order) and every action chosen over fixed seeds in every
  preset (``play_digest``). An engine that plays identically prints identical digests; a change of
  the legal list's order changes what random-legal play picks, and so the digest.
- ``--baseline PATH``: the same figures for another checkout's engine (a worktree of the commit
  compared against, built alike: ``make venv engine-native`` in it), measured in the same run and
  interleaved with this one's (A B A B, each measurement in a fresh process), printed as ratios
  ``bench: NAME_ratio X x`` (this engine's hands/s over the baseline's), with both digests compared
  (``bench: play_digest_equal 1.0 bool``, 0.0 when they differ). ``--native`` runs both engines
  compiled (each from its own ``build/native``).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine.actions import Discard, MeldCards
from engine.bots.base import Bot, make_bot
from engine.deal import deal_from_seed
from engine.rules import PRESETS, Ruleset, ruleset_from_spec
from engine.state import HandState


def play_hand(rules: Ruleset, players: int, seed: int, bots: list[Bot]) -> int:
    """One hand of self-play; returns the number of turns."""
    state = HandState(rules, players, deal_from_seed(rules, players, seed), dealer=seed % players)
    while not state.is_terminal():
        seat = state.to_act
        action = bots[seat].choose(state.view(seat), state.legal_actions())
        state.apply(action, seat)
    return state.turns


#: How the game-session service runs Python's collector (services/game_session/__main__.py and
#: manager.settle_garbage_collector): what is alive is moved out of the collector's sight
#: (`gc.freeze`) at start and again every few seconds, so that full collections stop re-scanning the
#: engine's memo tables (hundreds of thousands of objects). `..._service_gc` figures measure play
#: under that regime, the others under Python's default one.
SETTLE_SECONDS = 3.0


def settle() -> None:
    gc.collect(1)
    gc.freeze()


def hands_per_second(rules: Ruleset, players: int, kind: str, seconds: float,
                     service_gc: bool = False) -> tuple[float, float, int]:
    """Hands and turns per CPU second of self-play; `service_gc`: with the collector run as the
    game-session service runs it (its cost counted)."""
    bots = [make_bot(kind, seed=s) for s in range(players)]
    hands = turns = 0
    start = settled = time.process_time()
    if service_gc:
        settle()
    seed = 0
    try:
        while (now := time.process_time()) - start < seconds:
            if service_gc and now - settled >= SETTLE_SECONDS:
                settle()
                settled = now
            turns += play_hand(rules, players, seed, bots)
            hands += 1
            seed += 1
        elapsed = time.process_time() - start
    finally:
        if service_gc:
            gc.unfreeze()
    return hands / elapsed, turns / elapsed, hands


def positions_after_morto(rules: Ruleset, count: int, seed: int = 0) -> list[HandState]:
    """Play-phase positions where the player to act holds 22 cards, having taken the morto.

    Built from real deals: the seat draws, melds its way to an empty hand (taking its morto directly),
    and the hand is padded from the stock to exactly 22 cards.
    """
    rng = random.Random(seed)
    out: list[HandState] = []
    attempt = 0
    while len(out) < count:
        attempt += 1
        state = HandState(rules, 2, deal_from_seed(rules, 2, f"bench-{seed}-{attempt}"))
        state.apply(state.legal_actions()[0])  # draw
        seat = state.to_act
        # meld greedily until the morto comes in
        for _ in range(30):
            if state.morto_taken[seat & 1] or state.phase != "play":
                break
            melds = [a for a in state.legal_actions() if isinstance(a, MeldCards)]
            if not melds:
                break
            state.apply(rng.choice(melds))
        if not state.morto_taken[seat & 1] or state.phase != "play":
            # no direct batida from this deal: give the seat its morto as if it had
            morto = state.mortos[seat & 1]
            assert morto is not None
            state.touch()
            for c in morto:
                state.counts[seat][c] += 1
            state.sizes[seat] += len(morto)
            state.mortos[seat & 1] = None
            state.morto_taken[seat & 1] = True
        while state.sizes[seat] < 22 and state.stock:
            c = state.stock.pop()
            state.counts[seat][c] += 1
            state.sizes[seat] += 1
        while state.sizes[seat] > 22:
            discard = next(a for a in state.legal_actions() if isinstance(a, Discard))
            state.counts[seat][discard.card] -= 1
            state.sizes[seat] -= 1
            state.stock.append(discard.card)
            state.touch()
        state.touch()
        out.append(state)
    return out


def legal_actions_latency(rules: Ruleset, samples: int) -> tuple[float, float, float]:
    positions = positions_after_morto(rules, samples)
    times: list[float] = []
    sizes: list[int] = []
    for state in positions:
        # CPU time of this thread: on a shared machine, time spent waiting for a core is not the engine's
        t0 = time.thread_time_ns()
        actions = state.legal_actions()
        times.append((time.thread_time_ns() - t0) / 1000)
        sizes.append(len(actions))
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1], statistics.mean(sizes)


def baseline_mops(seconds: float = 1.0) -> float:
    """A fixed pure-Python workload (millions of loop steps per CPU second), measured in the same
    run: figures divided by it compare across machines and across a noisy shared machine."""
    steps = 0
    start = time.process_time()
    while time.process_time() - start < seconds:
        acc: dict[int, int] = {}
        for i in range(100_000):
            acc[i & 255] = acc.get(i & 255, 0) + (i ^ (i >> 3))
        steps += 100_000
    return steps / (time.process_time() - start) / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--ruleset", default="fechado")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--all-presets", action="store_true", help="also random-legal hands/s for every preset")
    parser.add_argument("--digest", action="store_true", help="also the play digests (digest: NAME HEX)")
    parser.add_argument("--digest-only", action="store_true", help="only the play digests")
    parser.add_argument("--baseline", type=Path, help="compare with the engine of this checkout (ratios)")
    parser.add_argument("--native", action="store_true", help="with --baseline: both engines compiled")
    parser.add_argument("--rounds", type=int, default=3, help="with --baseline: A B rounds per figure")
    parser.add_argument("--kinds", default="random,heuristic", help="with --baseline: the policies measured")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # KIND:PLAYERS, one figure (--baseline's runs)
    parser.add_argument("--warmup", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rules = ruleset_from_spec(args.ruleset)

    def report(name: str, value: float, unit: str) -> None:
        print(f"bench: {name} {value:.1f} {unit}", flush=True)

    if args.measure:
        kind, players = args.measure.split(":")
        hands_per_second(rules, int(players), kind, args.warmup)
        hps, _, _ = hands_per_second(rules, int(players), kind, args.seconds)
        print(f"measure: {hps:.3f} {'native' if native() else 'pure'}", flush=True)
        return
    if args.digest_only:
        for name, value in digests().items():
            print(f"digest: {name} {value}", flush=True)
        return
    if args.baseline is not None:
        print(f"# ruleset {rules.name}; CPU time of one core; this checkout against {args.baseline}, "
              f"{'both compiled (mypyc)' if args.native else 'both pure Python'}; medians of {args.rounds} "
              f"interleaved runs of {args.seconds:g} s each (after {args.warmup:g} s of warm-up)", flush=True)
        compare_with_baseline(args.baseline.resolve(), args.native, args.ruleset, args.seconds, args.warmup,
                              args.rounds, args.kinds.split(","), report)
        return

    print(f"# ruleset {rules.name}; CPU time of one core; {'native (mypyc)' if native() else 'pure Python'}")
    base = baseline_mops()
    report("python_baseline", base, "Mops/s")
    kinds = ["random"]
    try:
        make_bot("heuristic")
        kinds.append("heuristic")
    except ValueError:
        print("# the heuristic bot is not available", flush=True)
    for kind in kinds:
        for players in (2, 4):
            hps, tps, _ = hands_per_second(rules, players, kind, args.seconds)
            report(f"{kind}_hands_per_s_{players}p", hps, "hands/s")
            report(f"{kind}_turns_per_s_{players}p", tps, "turns/s")
            report(f"{kind}_hands_per_s_{players}p_per_baseline_mops", hps / base, "hands/Mops")
        # the same, with the collector run as the game-session service runs it (SETTLE_SECONDS)
        hps, _, _ = hands_per_second(rules, 2, kind, args.seconds, service_gc=True)
        report(f"{kind}_hands_per_s_2p_service_gc", hps, "hands/s")
        report(f"{kind}_hands_per_s_2p_service_gc_per_baseline_mops", hps / base, "hands/Mops")
    if args.all_presets:
        for name in PRESETS:
            hps, _, _ = hands_per_second(PRESETS[name], 2, "random", args.seconds / 2)
            report(f"random_hands_per_s_2p_{name}", hps, "hands/s")
    median, p99, mean_actions = legal_actions_latency(rules, args.samples)
    report("legal_actions_22_cards_median", median, "us")
    report("legal_actions_22_cards_p99", p99, "us")
    report("legal_actions_22_cards_mean_count", mean_actions, "actions")
    if args.digest:
        for name, value in digests().items():
            print(f"digest: {name} {value}", flush=True)


#: The presets and the hands per preset of the play digest (``play_digest``).
DIGEST_PRESETS = tuple(PRESETS)
DIGEST_HANDS = {"random": 12, "heuristic": 4}


def play_digest(kind: str, players: int, hands: int, presets: tuple[str, ...] = DIGEST_PRESETS) -> str:
    """A sha256 of every legal-action list (in order), every action chosen and every hand's result,
    over ``hands`` hands of self-play by ``kind`` in each preset with fixed seeds: two engines that
    print the same digest listed the same actions in the same order at every step, and so played
    the same hands."""
    digest = hashlib.sha256()
    for name in presets:
        rules = PRESETS[name]
        for hand in range(hands):
            seed = f"digest-{name}-{players}-{hand}"
            bots = [make_bot(kind, seed=f"{seed}-{s}", rules=rules) for s in range(players)]
            state = HandState(rules, players, deal_from_seed(rules, players, seed), dealer=hand % players)
            while not state.is_terminal():
                seat = state.to_act
                legal = state.legal_actions()
                action = bots[seat].choose(state.view(seat), legal)
                digest.update(json.dumps([seat, [a.to_json() for a in legal], action.to_json()],
                                         separators=(",", ":")).encode())
                state.apply(action, seat)
            digest.update(json.dumps([state.end_reason, state.went_out, state.returns()]).encode())
    return digest.hexdigest()


def digests(hands_scale: float = 1.0) -> dict[str, str]:
    out = {}
    for kind, hands in DIGEST_HANDS.items():
        for players in (2, 4):
            out[f"play_digest_{kind}_{players}p"] = play_digest(kind, players, max(1, round(hands * hands_scale)))
    return out


# --- the baseline in the same run ---------------------------------------------------------------------
#
# Each measurement runs this very file in a fresh process (``runpy``), its engine taken from a
# checkout's root (pure Python) or from that checkout's ``build/native`` (``--native``): the working
# directory goes first on the import path (``python -c``), so ``engine`` is that checkout's. Fresh
# processes keep the engines' memo tables apart; the same warm-up precedes every measurement.

_RUNNER = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
HERE = Path(__file__).resolve()


def _engine_process(root: Path, native_build: bool, args: list[str]) -> str:
    cwd = root / "build" / "native" if native_build else root
    if native_build and not (cwd / "engine").is_dir():
        raise SystemExit(f"bench.engine: no compiled engine in {cwd} (run `make engine-native` there)")
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", _RUNNER, str(HERE), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench.engine: the engine of {root} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _measure_in_process(root: Path, native_build: bool, kind: str, players: int, ruleset: str,
                        seconds: float, warmup: float) -> tuple[float, bool]:
    out = _engine_process(root, native_build, ["--measure", f"{kind}:{players}", "--ruleset", ruleset,
                                               "--seconds", str(seconds), "--warmup", str(warmup)])
    value = compiled = None
    for line in out.splitlines():
        if line.startswith("measure: "):
            _, value, compiled = line.split()
    assert value is not None and compiled is not None, out
    return float(value), compiled == "native"


def compare_with_baseline(baseline: Path, native_build: bool, ruleset: str, seconds: float, warmup: float,
                          rounds: int, kinds: list[str], report: Any) -> None:
    """This checkout's engine against ``baseline``'s: hands/s per policy and table size, measured
    A B A B (``rounds`` times each), and the ratio of the medians; then the play digests."""
    here = HERE.parent.parent
    mode = "native" if native_build else "pure"
    for kind in kinds:
        for players in (2, 4):
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(rounds):
                for root, into in ((baseline, theirs), (here, ours)):
                    value, compiled = _measure_in_process(root, native_build, kind, players, ruleset, seconds, warmup)
                    if compiled != native_build:
                        raise SystemExit(f"bench.engine: {root}'s engine is {'' if compiled else 'not '}compiled")
                    into.append(value)
            name = f"{kind}_hands_per_s_{players}p_{mode}"
            print(f"# {name}: baseline {' '.join(f'{v:.1f}' for v in theirs)}; "
                  f"this engine {' '.join(f'{v:.1f}' for v in ours)}", flush=True)
            report(f"{name}_baseline", statistics.median(theirs), "hands/s")
            report(name, statistics.median(ours), "hands/s")
            print(f"bench: {name}_ratio {statistics.median(ours) / statistics.median(theirs):.2f} x", flush=True)
    theirs_d = _engine_process(baseline, native_build, ["--digest-only"])
    ours_d = _engine_process(here, native_build, ["--digest-only"])
    print(f"# baseline digests:\n{theirs_d.strip()}", flush=True)
    print(f"# this engine's digests:\n{ours_d.strip()}", flush=True)
    report(f"play_digest_equal_{mode}", float(theirs_d == ours_d and "digest:" in ours_d), "bool")


def native() -> bool:
    """Whether the engine runs compiled by mypyc (``make engine-native``)."""
    import engine.state

    return not engine.state.__file__.endswith(".py")


if __name__ == "__main__":
    main()

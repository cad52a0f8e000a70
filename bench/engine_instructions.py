"""Engine cost in instructions: ``python -m bench.engine_instructions``.

On a shared machine wall-clock figures move by 15-20% from one run to the next; the number of
instructions a fixed piece of play executes does not. This runs a fixed number of hands (fixed
seeds from a cold start, as ``bench.engine`` starts: ``fechado``, 2 players, one bot per seat
seeded by its seat) under valgrind's cachegrind (``--cache-sim=no``: instructions only) for this
checkout's engine and a baseline checkout's, pure Python and compiled (each from its own
``build/native``), subtracts the interpreter's start and imports (the same run with no hand), and
prints each figure and the ratio (baseline over this: how many times fewer instructions)::

    python -m bench.engine_instructions --baseline /work/wt-engine-base
    python -m bench.engine_instructions --baseline /work/wt-engine-base --only random:pure:100

Each run is one process at a time (valgrind slows it some 50 times: about a minute each).
``PYTHONHASHSEED`` is fixed so that the counts repeat to the last digits.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
#: (policy, build, hands): the figures of docs/performance.md, "### Engine"
DEFAULT_RUNS = ("random:pure:100", "random:native:300", "heuristic:native:60")
_RUNNER = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def play(kind: str, hands: int, ruleset: str, players: int) -> None:
    """``hands`` hands of self-play, seeds 0, 1, 2 ... (``bench.engine.hands_per_second``'s)."""
    from engine.bots.base import make_bot
    from engine.deal import deal_from_seed
    from engine.rules import ruleset_from_spec
    from engine.state import HandState

    rules = ruleset_from_spec(ruleset)
    bots = [make_bot(kind, seed=s) for s in range(players)]
    for seed in range(hands):
        state = HandState(rules, players, deal_from_seed(rules, players, seed), dealer=seed % players)
        while not state.is_terminal():
            seat = state.to_act
            state.apply(bots[seat].choose(state.view(seat), state.legal_actions()), seat)


def instructions(root: Path, native_build: bool, kind: str, hands: int, ruleset: str, players: int) -> int:
    """Instructions of one run of ``play`` on ``root``'s engine under cachegrind."""
    cwd = root / "build" / "native" if native_build else root
    if native_build and not (cwd / "engine").is_dir():
        raise SystemExit(f"no compiled engine in {cwd} (run `make engine-native` there)")
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, "-c", _RUNNER, str(HERE), "--play", f"{kind}:{hands}", "--ruleset", ruleset,
           "--players", str(players)]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"cachegrind run failed ({root}):\n{done.stderr[-3000:]}")
    return int(found.group(1).replace(",", ""))


def play_instructions(root: Path, native_build: bool, kind: str, hands: int, ruleset: str, players: int) -> int:
    """Instructions of ``hands`` hands, the interpreter's start and imports subtracted."""
    return (instructions(root, native_build, kind, hands, ruleset, players)
            - instructions(root, native_build, kind, 0, ruleset, players))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="also this checkout's engine, and the ratios")
    parser.add_argument("--only", action="append", help="KIND:pure|native:HANDS (repeatable)")
    parser.add_argument("--ruleset", default="fechado")
    parser.add_argument("--players", type=int, default=2)
    parser.add_argument("--play", help=argparse.SUPPRESS)  # KIND:HANDS, inside valgrind
    args = parser.parse_args(argv)
    if args.play:
        kind, hands = args.play.split(":")
        play(kind, int(hands), args.ruleset, args.players)
        return
    here = HERE.parent.parent
    for spec in args.only or DEFAULT_RUNS:
        kind, build, hands_text = spec.split(":")
        hands = int(hands_text)
        native_build = build == "native"
        ours = play_instructions(here, native_build, kind, hands, args.ruleset, args.players)
        line = f"instructions: {kind} {build} {hands} hands: this {ours / 1e9:.3f} G"
        if args.baseline is not None:
            theirs = play_instructions(args.baseline.resolve(), native_build, kind, hands, args.ruleset,
                                       args.players)
            line += f"; baseline {theirs / 1e9:.3f} G; ratio {theirs / ours:.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()

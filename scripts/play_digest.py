"""A digest of how the engine plays, to check that an optimisation changed nothing.

    python scripts/play_digest.py [HANDS]          # pure Python
    PYTHONPATH=build/native python scripts/play_digest.py [HANDS]   # the mypyc build

For every preset, 2 and 4 players, random-legal and heuristic bots, HANDS hands (default 40) from
seeds 0.., it hashes every legal-action list, every choice, every event, each hand's score and its
final state. Run it before and after a change meant to be behaviour-preserving: the TOTAL line
must not move. (Not a test: a rule change moves it on purpose.)
"""

from __future__ import annotations

import hashlib
import json
import sys

from engine.bots.base import make_bot
from engine.deal import deal_from_seed
from engine.rules import PRESETS
from engine.state import HandState


def main() -> None:
    hands = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    total = hashlib.sha256()
    for name, rules in sorted(PRESETS.items()):
        for players in (2, 4):
            for kind in ("random", "heuristic"):
                digest = hashlib.sha256()
                bots = [make_bot(kind, seed=s) for s in range(players)]
                for seed in range(hands):
                    state = HandState(rules, players, deal_from_seed(rules, players, seed), dealer=seed % players)
                    while not state.is_terminal():
                        seat = state.to_act
                        legal = state.legal_actions()
                        digest.update(repr(legal).encode())
                        action = bots[seat].choose(state.view(seat), legal)
                        digest.update(repr(action).encode())
                        events = state.apply(action, seat)
                        digest.update(json.dumps([e.to_json() for e in events], sort_keys=True).encode())
                    digest.update(json.dumps(state.score(), sort_keys=True).encode())
                    digest.update(json.dumps(state.to_json(), sort_keys=True).encode())
                total.update(digest.digest())
                print(name, players, kind, digest.hexdigest()[:16], flush=True)
    print("TOTAL", total.hexdigest())


if __name__ == "__main__":
    main()

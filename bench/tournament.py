"""`python -m bench.tournament`: the speed of the tournament service's pure parts at the
largest field the wallet allows (1,024 players), printed as `bench: NAME VALUE UNIT` lines.

- Swiss pairing of 1,024 entrants over 15 rounds of random results (the worst round and the mean),
  with the ratio to a baseline measured in the same run: sorting the same entrants and pairing
  neighbours (what a pairing that checks nothing would cost).
- The Swiss standings with their tie-breaks after those 15 rounds, and the prize shares.
- A 1,024-entrant elimination bracket played out.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from services.tournament import pairing, prizes, standings
from services.tournament.pairing import SwissEntrant


def _timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tournament")
    parser.add_argument("--entrants", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    ids = [f"e{i}" for i in range(args.entrants)]
    seeds = {e: i + 1 for i, e in enumerate(ids)}
    points = dict.fromkeys(ids, 0)
    met: dict[str, set[str]] = {e: set() for e in ids}
    byes = dict.fromkeys(ids, 0)
    results: list[standings.Result] = []
    pairing_times: list[float] = []
    baseline_times: list[float] = []
    rematches = 0
    for number in range(1, args.rounds + 1):
        entrants = [SwissEntrant(e, points[e], seeds[e], frozenset(met[e]), byes[e]) for e in ids]
        started = time.perf_counter()
        round_ = pairing.swiss_round(entrants)
        pairing_times.append(time.perf_counter() - started)

        def plain(entrants: list[SwissEntrant] = entrants) -> list[tuple[str, str]]:
            order = pairing.swiss_order(entrants)
            return [(order[i].id, order[i + 1].id) for i in range(0, len(order) - 1, 2)]

        baseline_times.append(_timed(plain))
        rematches += round_.rematches
        for a, b in round_.pairs:
            met[a].add(b)
            met[b].add(a)
            winner = rng.choice((a, b))
            points[winner] += 1
            results.append(standings.Result(number, (a, b), winner, (rng.randrange(2000), rng.randrange(2000))))
        if round_.bye is not None:
            byes[round_.bye] += 1
            points[round_.bye] += 1
            results.append(standings.Result(number, (round_.bye,), round_.bye, bye=True))
    table: list[list[standings.Standing]] = []
    standing_time = _timed(lambda: table.append(standings.swiss_standings(seeds, results)))
    placed = [prizes.Placed(s.entrant, s.rank, (s.entrant,)) for s in table[0]]
    structure = {place: 10_000 // 10 for place in range(1, 11)}
    prize_time = _timed(lambda: prizes.shares(placed, structure))

    def elimination() -> None:
        slots = pairing.first_round(ids)
        while len(slots) > 1:
            slots = pairing.next_round(
                [a if b is None or (a is not None and rng.random() < 0.5) else b for a, b in slots]
            )

    elimination_time = _timed(elimination)
    worst, mean = max(pairing_times), sum(pairing_times) / len(pairing_times)
    baseline = sum(baseline_times) / len(baseline_times)
    print(f"bench: swiss_pairing_worst_round_{args.entrants} {worst * 1000:.1f} ms")
    print(f"bench: swiss_pairing_mean_round_{args.entrants} {mean * 1000:.1f} ms")
    print(f"bench: swiss_pairing_vs_sort_and_pair {mean / baseline:.1f} x")
    print(f"bench: swiss_rematches_{args.rounds}_rounds {rematches} pairs")
    print(f"bench: swiss_standings_{args.entrants} {standing_time * 1000:.1f} ms")
    print(f"bench: prize_shares_{args.entrants} {prize_time * 1000:.2f} ms")
    print(f"bench: elimination_bracket_{args.entrants} {elimination_time * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

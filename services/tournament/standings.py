"""Standings from results: points, tie-breaks, ranks and shared places. Pure functions, no I/O.

Swiss (docs/tournaments.md, "Standings and tie-breaks"): a win is 1 point, a bye is 1 point, a
forfeit win is 1 point, a loss or a double forfeit 0. Ties in points are broken, in this order, by
1. Buchholz: the sum of the points of every opponent the entrant was paired with (byes count 0);
2. Sonneborn-Berger: the sum of the points of the opponents the entrant beat;
3. points difference: the sum over played matches of the entrant's match score minus the
   opponent's (forfeits and byes count 0).
Entrants equal on points and all three share a rank.

Single elimination: entrants are ranked by the round in which they were knocked out, the champion
first; entrants knocked out in the same round share a rank. `points` is matches won (a bye counts
as a win); there are no tie-breaks.

A rank is 1 + the number of entrants strictly ahead, so shared ranks leave gaps (1, 2, 3, 3, 5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SWISS_TIE_BREAKS = ("buchholz", "sonneborn_berger", "points_difference")
ELIMINATION_TIE_BREAKS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Result:
    """One decided pairing."""

    round: int
    #: One entrant (a bye) or two.
    entrants: tuple[str, ...]
    #: None: nobody won (both forfeited).
    winner: str | None
    #: Match scores in `entrants` order, when the match was played.
    scores: tuple[int, int] | None = None
    bye: bool = False
    forfeit: bool = False


@dataclass(frozen=True)
class Standing:
    entrant: str
    rank: int
    points: int
    tie_breaks: tuple[int, ...]
    eliminated: bool


def _ranked(keys: Mapping[str, tuple[int, ...]], seeds: Mapping[str, int]) -> list[tuple[str, int]]:
    """Entrants ordered by key (larger is better), then seed; each with its rank."""
    ordered = sorted(keys, key=lambda e: (tuple(-k for k in keys[e]), seeds[e], e))
    ranked: list[tuple[str, int]] = []
    for position, entrant in enumerate(ordered):
        if position and keys[ordered[position - 1]] == keys[entrant]:
            ranked.append((entrant, ranked[-1][1]))
        else:
            ranked.append((entrant, position + 1))
    return ranked


def swiss_points(entrants: Sequence[str], results: Sequence[Result]) -> dict[str, int]:
    points = dict.fromkeys(entrants, 0)
    for result in results:
        if result.winner is not None:
            points[result.winner] += 1
    return points


def swiss_standings(seeds: dict[str, int], results: Sequence[Result]) -> list[Standing]:
    """`seeds`: every entrant's seed (1 = strongest)."""
    points = swiss_points(list(seeds), results)
    buchholz = dict.fromkeys(seeds, 0)
    sonneborn = dict.fromkeys(seeds, 0)
    difference = dict.fromkeys(seeds, 0)
    for result in results:
        if len(result.entrants) != 2:
            continue
        a, b = result.entrants
        buchholz[a] += points[b]
        buchholz[b] += points[a]
        if result.winner == a:
            sonneborn[a] += points[b]
        elif result.winner == b:
            sonneborn[b] += points[a]
        if result.scores is not None:
            difference[a] += result.scores[0] - result.scores[1]
            difference[b] += result.scores[1] - result.scores[0]
    keys = {e: (points[e], buchholz[e], sonneborn[e], difference[e]) for e in seeds}
    return [
        Standing(e, rank, points[e], (buchholz[e], sonneborn[e], difference[e]), False)
        for e, rank in _ranked(keys, seeds)
    ]


def knocked_out(results: Sequence[Result]) -> dict[str, int]:
    """Elimination: the round in which each knocked-out entrant lost (or forfeited)."""
    out: dict[str, int] = {}
    for result in results:
        if result.bye:
            continue
        for entrant in result.entrants:
            if entrant != result.winner:
                out[entrant] = result.round
    return out


def elimination_standings(seeds: dict[str, int], results: Sequence[Result]) -> list[Standing]:
    out = knocked_out(results)
    wins = dict.fromkeys(seeds, 0)
    for result in results:
        if result.winner is not None:
            wins[result.winner] += 1
    alive = 1 << 30  # still in: ahead of everyone knocked out
    keys = {e: (out.get(e, alive),) for e in seeds}
    return [Standing(e, rank, wins[e], (), e in out) for e, rank in _ranked(keys, seeds)]

"""The pure parts of the tournament service, property-tested: elimination brackets, Swiss pairing,
the maximum matching behind it, standings and prize shares."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.tournament import pairing, prizes, standings
from services.tournament.pairing import SwissEntrant
from services.tournament.standings import Result

EXAMPLES = settings(max_examples=120, deadline=None)


# -- elimination ------------------------------------------------------------------------------------


def test_seed_order_is_the_standard_bracket() -> None:
    assert pairing.seed_order(8) == [1, 8, 4, 5, 2, 7, 3, 6]
    assert pairing.seed_order(2) == [1, 2]
    assert pairing.bracket_size(5) == 8 and pairing.elimination_rounds(5) == 3
    assert pairing.elimination_rounds(64) == 6 and pairing.elimination_rounds(2) == 1


def _play_out(seeded: Sequence[str], winner_of: random.Random) -> list[list[pairing.Slot]]:
    """Every round of a bracket, a random winner in each match."""
    rounds = [pairing.first_round(seeded)]
    while True:
        winners: list[str | None] = []
        for a, b in rounds[-1]:
            present = [x for x in (a, b) if x is not None]
            winners.append(winner_of.choice(present) if present else None)
        if len(winners) == 1:
            return rounds
        rounds.append(pairing.next_round(winners))


@EXAMPLES
@given(count=st.integers(2, 130), seed=st.integers(0, 10**6))
def test_brackets_with_byes_are_valid(count: int, seed: int) -> None:
    seeded = [f"s{i}" for i in range(1, count + 1)]
    size = pairing.bracket_size(count)
    assert size >= count > size // 2
    rounds = _play_out(seeded, random.Random(seed))
    assert len(rounds) == pairing.elimination_rounds(count)
    first = rounds[0]
    # Everyone plays round 1 exactly once (or has its bye); byes go to the top seeds, each once.
    placed = [x for pair in first for x in pair if x is not None]
    assert sorted(placed) == sorted(seeded)
    byes = [a or b for a, b in first if a is None or b is None]
    assert len(byes) == size - count and len(set(byes)) == len(byes)
    assert set(byes) == set(seeded[: size - count])
    assert all(a is not None or b is not None for a, b in first)
    # Seeds 1 and 2 are in opposite halves: they can meet only in the final.
    if count >= 2:
        half = len(first) // 2 or 1
        top = {x for pair in first[:half] for x in pair}
        assert ("s1" in top) != ("s2" in top) or len(first) == 1
    # Each round halves the slots; nobody appears twice in a round.
    for earlier, later in itertools.pairwise(rounds):
        assert len(later) * 2 == len(earlier)
    for round_ in rounds:
        names = [x for pair in round_ for x in pair if x is not None]
        assert len(names) == len(set(names))


def test_a_double_forfeit_gives_the_neighbour_a_bye() -> None:
    assert pairing.next_round(["a", None, "c", "d"]) == [("a", None), ("c", "d")]
    with pytest.raises(ValueError):
        pairing.next_round(["a"])


# -- maximum matching -------------------------------------------------------------------------------


def _brute_force_max(count: int, edges: set[tuple[int, int]]) -> int:
    best = 0

    def extend(free: list[int], size: int) -> None:
        nonlocal best
        best = max(best, size)
        if not free:
            return
        first, rest = free[0], free[1:]
        extend(rest, size)
        for other in rest:
            if (first, other) in edges or (other, first) in edges:
                extend([x for x in rest if x != other], size + 1)

    extend(list(range(count)), 0)
    return best


@EXAMPLES
@given(data=st.data(), count=st.integers(1, 10))
def test_maximum_matching_is_maximum(data: st.DataObject, count: int) -> None:
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    edges = set(data.draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else [])
    adjacency = [[j for j in range(count) if (i, j) in edges or (j, i) in edges] for i in range(count)]
    mate = pairing.maximum_matching(adjacency)
    matched = [(i, mate[i]) for i in range(count) if mate[i] > i]
    assert all(mate[mate[i]] == i for i in range(count) if mate[i] != -1)
    assert all((i, j) in edges for i, j in matched)
    assert len(matched) == _brute_force_max(count, edges)


# -- Swiss ------------------------------------------------------------------------------------------


@st.composite
def swiss_histories(draw: st.DrawFn) -> tuple[list[SwissEntrant], int]:
    """Entrants after some rounds of random (legal) results: points, opponents, byes."""
    count = draw(st.integers(2, 13))
    played = draw(st.integers(0, min(count + 2, 9)))
    rng = random.Random(draw(st.integers(0, 10**6)))
    ids = [f"e{i}" for i in range(count)]
    points = dict.fromkeys(ids, 0)
    met: dict[str, set[str]] = {e: set() for e in ids}
    byes = dict.fromkeys(ids, 0)
    for _ in range(played):
        entrants = [SwissEntrant(e, points[e], i + 1, frozenset(met[e]), byes[e]) for i, e in enumerate(ids)]
        round_ = pairing.swiss_round(entrants, budget=rng.choice([0, 50, 20_000]))
        for a, b in round_.pairs:
            met[a].add(b)
            met[b].add(a)
            points[rng.choice((a, b))] += 1
        if round_.bye is not None:
            byes[round_.bye] += 1
            points[round_.bye] += 1
    entrants = [SwissEntrant(e, points[e], i + 1, frozenset(met[e]), byes[e]) for i, e in enumerate(ids)]
    return entrants, rng.choice([0, 50, 20_000])


def _rematch_free_exists(entrants: Sequence[SwissEntrant], bye_candidates: Sequence[str]) -> bool:
    """Brute force: some pairing with the bye to one of the candidates and no rematch."""

    def pairs_up(free: list[SwissEntrant]) -> bool:
        if not free:
            return True
        first, rest = free[0], free[1:]
        return any(
            other.id not in first.opponents and pairs_up([x for x in rest if x.id != other.id]) for other in rest
        )

    if len(entrants) % 2 == 0:
        return pairs_up(list(entrants))
    return any(pairs_up([e for e in entrants if e.id != bye]) for bye in bye_candidates)


@EXAMPLES
@given(history=swiss_histories())
def test_swiss_pairs_everyone_once_avoids_rematches_and_spreads_byes(
    history: tuple[list[SwissEntrant], int],
) -> None:
    entrants, budget = history
    chosen = pairing.swiss_round(entrants, budget=budget)
    ids = [e.id for e in entrants]
    placed = [x for pair in chosen.pairs for x in pair] + ([chosen.bye] if chosen.bye else [])
    assert sorted(placed) == sorted(ids)  # everyone exactly once this round
    assert (chosen.bye is not None) == (len(ids) % 2 == 1)
    by_id = {e.id: e for e in entrants}
    fewest = min(e.byes for e in entrants)
    if chosen.bye is not None:
        assert by_id[chosen.bye].byes == fewest  # byes go to different entrants while possible
    rematches = sum(1 for a, b in chosen.pairs if b in by_id[a].opponents)
    assert rematches == chosen.rematches
    candidates = [e.id for e in entrants if e.byes == fewest]
    if _rematch_free_exists(entrants, candidates):
        assert rematches == 0


@EXAMPLES
@given(rounds=st.integers(1, 15), count=st.integers(16, 40), seed=st.integers(0, 10**6))
def test_a_whole_swiss_tournament_never_repeats_a_pairing_when_it_has_room(rounds: int, count: int, seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"e{i}" for i in range(count)]
    points = dict.fromkeys(ids, 0)
    met: dict[str, set[str]] = {e: set() for e in ids}
    byes = dict.fromkeys(ids, 0)
    for _ in range(min(rounds, count - 1)):
        entrants = [SwissEntrant(e, points[e], i + 1, frozenset(met[e]), byes[e]) for i, e in enumerate(ids)]
        chosen = pairing.swiss_round(entrants)
        if count > 2 * rounds:  # every pairing graph has a perfect matching here (Dirac)
            assert chosen.rematches == 0
        for a, b in chosen.pairs:
            met[a].add(b)
            met[b].add(a)
            points[rng.choice((a, b))] += 1
        if chosen.bye:
            byes[chosen.bye] += 1
            points[chosen.bye] += 1
    assert max(byes.values()) <= 1


def test_swiss_pairs_score_groups_top_half_against_bottom_half() -> None:
    entrants = [SwissEntrant(f"e{i}", 1 if i <= 4 else 0, i) for i in range(1, 9)]
    chosen = pairing.swiss_round(entrants)
    assert chosen.pairs == (("e1", "e3"), ("e2", "e4"), ("e5", "e7"), ("e6", "e8"))
    assert chosen.bye is None and chosen.rematches == 0


def test_the_swiss_bye_goes_to_the_lowest_placed_entrant_without_one() -> None:
    entrants = [SwissEntrant("a", 2, 1), SwissEntrant("b", 1, 2), SwissEntrant("c", 0, 3, byes=1)]
    assert pairing.swiss_round(entrants).bye == "b"


# -- standings --------------------------------------------------------------------------------------


def test_swiss_tie_breaks_buchholz_then_sonneborn_berger_then_points_difference() -> None:
    seeds = {"a": 1, "b": 2, "c": 3, "d": 4}
    results = [
        Result(1, ("a", "b"), "a", (600, 100)),
        Result(1, ("c", "d"), "c", (300, 200)),
        Result(2, ("a", "c"), "c", (100, 200)),
        Result(2, ("b", "d"), "b", (500, 400)),
    ]
    table = {s.entrant: s for s in standings.swiss_standings(seeds, results)}
    # Points: c 2, a 1, b 1, d 0. Buchholz a = b(1) + c(2) = 3; b = a(1) + d(0) = 1.
    assert [table[e].points for e in "abcd"] == [1, 1, 2, 0]
    assert table["a"].tie_breaks == (3, 1, 400) and table["b"].tie_breaks == (1, 0, -400)
    assert [table[e].rank for e in "cabd"] == [1, 2, 3, 4]


def test_entrants_equal_on_everything_share_a_rank() -> None:
    seeds = {"a": 1, "b": 2, "c": 3, "d": 4}
    results = [Result(1, ("a", "b"), "a", (10, 5)), Result(1, ("c", "d"), "c", (10, 5))]
    ranks = {s.entrant: s.rank for s in standings.swiss_standings(seeds, results)}
    assert ranks == {"a": 1, "c": 1, "b": 3, "d": 3}


def test_elimination_ranks_by_the_round_of_elimination() -> None:
    seeds = {f"s{i}": i for i in range(1, 6)}
    results = [
        Result(1, ("s1",), "s1", bye=True),
        Result(1, ("s4", "s5"), "s4"),
        Result(1, ("s2",), "s2", bye=True),
        Result(1, ("s3",), "s3", bye=True),
        Result(2, ("s1", "s4"), "s1"),
        Result(2, ("s2", "s3"), None, forfeit=True),  # both forfeited
        Result(3, ("s1",), "s1", bye=True),
    ]
    table = {s.entrant: (s.rank, s.points, s.eliminated) for s in standings.elimination_standings(seeds, results)}
    assert table["s1"] == (1, 3, False)
    assert table["s4"][0] == table["s2"][0] == table["s3"][0] == 2
    assert table["s5"] == (5, 0, True)


# -- prizes -----------------------------------------------------------------------------------------


@EXAMPLES
@given(
    data=st.data(),
    count=st.integers(2, 40),
    pairs=st.booleans(),
    pool=st.integers(0, 10**9),
)
def test_prize_shares_add_up_and_ties_split_evenly(data: st.DataObject, count: int, pairs: bool, pool: int) -> None:
    paid = data.draw(st.integers(1, count))
    cuts = sorted(data.draw(st.lists(st.integers(1, 9_999), min_size=paid - 1, max_size=paid - 1, unique=True)))
    bounds = [0, *cuts, 10_000]
    structure = {place: bounds[place] - bounds[place - 1] for place in range(1, paid + 1)}
    if any(share < 1 for share in structure.values()):
        return
    # Places as ranks: 1 + the number strictly ahead (random ties).
    keys = sorted(data.draw(st.lists(st.integers(0, 5), min_size=count, max_size=count)), reverse=True)
    placed = []
    for i, key in enumerate(keys):
        place = 1 + sum(1 for k in keys if k > key)
        players = (f"p{i}a", f"p{i}b") if pairs else (f"p{i}",)
        placed.append(prizes.Placed(f"e{i}", place, players))
    shares = prizes.shares(placed, structure)
    assert sum(s.share_bp for s in shares) == 10_000 and all(s.share_bp > 0 for s in shares)
    by_entrant: dict[str, int] = {}
    for s in shares:
        by_entrant[s.entrant] = by_entrant.get(s.entrant, 0) + s.share_bp
    for place in {p.place for p in placed}:
        tied = [p for p in placed if p.place == place]
        amounts = [by_entrant.get(p.entrant, 0) for p in tied]
        assert max(amounts) - min(amounts) <= 1  # split evenly, the odd points to the better seeds
        assert amounts == sorted(amounts, reverse=True)
        assert sum(amounts) == sum(structure.get(q, 0) for q in range(place, place + len(tied)))
    paid_out = prizes.chips(pool, [(s.player, s.place, s.share_bp) for s in shares])
    assert sum(paid_out.values()) + prizes.house_cut(pool) == pool  # no chip lost or invented
    assert prizes.house_cut(pool) == pool * 20 // 100


def test_prize_rounding_example() -> None:
    # 7 entrants x 333 chips = 2331; the house takes 466 (20%, rounded down); 1865 to share.
    shares = prizes.shares([prizes.Placed(f"e{i}", i, (f"p{i}",)) for i in range(1, 8)], {1: 5000, 2: 3000, 3: 2000})
    paid = prizes.chips(2331, [(s.player, s.place, s.share_bp) for s in shares])
    # 932.5 -> 932 (+1 left over, to 1st), 559.5 -> 559, 373 -> 373: 933 + 559 + 373 = 1865.
    assert paid == {"p1": 933, "p2": 559, "p3": 373}
    with pytest.raises(ValueError):
        prizes.shares([prizes.Placed("e1", 1, ("p1",))], {1: 5000, 2: 5000})

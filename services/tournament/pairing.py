"""Who plays whom: single-elimination brackets and Swiss rounds. Pure functions, no I/O.

Elimination (docs/tournaments.md, "Single elimination"): the bracket has P slots, the smallest
power of two holding the N entrants, and log2(P) rounds. Seeds are placed in the standard order
(1 and 2 can only meet in the final, 1-4 only from the semi-finals on, ...), so the P - N byes of
the first round go to seeds 1 .. P - N. Each later round pairs the winners of neighbouring slots;
a slot with no winner (both players forfeited) gives the other slot's winner a bye.

Swiss (docs/tournaments.md, "Swiss pairing"): entrants in order of points, then seed. With an odd
count one entrant gets a bye: the lowest-placed among those with the fewest byes so far. The rest
are paired top-down, each score group's top half against its bottom half, never two entrants who
have met before when that can be avoided: a depth-first search in preference order finds such a
pairing; when the search runs out of its step budget, a maximum matching (Edmonds' blossom
algorithm) on the graph of allowed pairs decides exactly whether one exists and, if not, yields a
pairing with the fewest possible rematches.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

#: How many candidate partners the Swiss search may try before it falls back to a matching.
SEARCH_BUDGET = 20_000


# -- single elimination ---------------------------------------------------------------------------


def bracket_size(entrants: int) -> int:
    """The number of first-round slots: the smallest power of two that holds every entrant."""
    if entrants < 2:
        raise ValueError(f"an elimination bracket needs at least 2 entrants, not {entrants}")
    size = 1
    while size < entrants:
        size *= 2
    return size


def elimination_rounds(entrants: int) -> int:
    """How many rounds a bracket of `entrants` takes (log2 of its size)."""
    return bracket_size(entrants).bit_length() - 1


def seed_order(size: int) -> list[int]:
    """Seeds (1-based) in bracket order for a power-of-two `size`: neighbours meet in round 1,
    and the better seed of every pair is the better one by construction (1 v size, ...)."""
    if size < 1 or size & (size - 1):
        raise ValueError(f"bracket size must be a power of two, not {size}")
    order = [1]
    while len(order) < size:
        total = 2 * len(order) + 1
        order = [seed for top in order for seed in (top, total - top)]
    return order


Slot = tuple[str | None, str | None]


def first_round(seeded: Sequence[str]) -> list[Slot]:
    """Round 1 of a bracket: `seeded[0]` is seed 1. One pair per slot, in slot order; a pair with
    one entrant is a bye (the missing seed is above the entrant count)."""
    size = bracket_size(len(seeded))
    order = seed_order(size)
    pairs: list[Slot] = []
    for i in range(0, size, 2):
        a, b = order[i], order[i + 1]
        pairs.append(
            (
                seeded[a - 1] if a <= len(seeded) else None,
                seeded[b - 1] if b <= len(seeded) else None,
            )
        )
    return pairs


def next_round(winners: Sequence[str | None]) -> list[Slot]:
    """The next round from the previous round's winners in slot order (None: no winner)."""
    if len(winners) < 2 or len(winners) % 2:
        raise ValueError(f"a round needs an even number (2+) of slots, not {len(winners)}")
    return [(winners[i], winners[i + 1]) for i in range(0, len(winners), 2)]


# -- Swiss ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SwissEntrant:
    """One entrant as the Swiss pairing sees it."""

    id: str
    points: int
    #: 1 is the strongest; breaks ties in points.
    seed: int
    #: Everyone this entrant has been paired with (played or forfeited), byes excluded.
    opponents: frozenset[str] = frozenset()
    byes: int = 0


@dataclass(frozen=True)
class SwissRound:
    """A Swiss round's pairings (better-placed entrant first) and its bye."""

    pairs: tuple[tuple[str, str], ...]
    bye: str | None
    #: Pairs of entrants who had met before (only when every pairing needs some).
    rematches: int


def swiss_order(entrants: Sequence[SwissEntrant]) -> list[SwissEntrant]:
    """The pairing order: points, then seed."""
    return sorted(entrants, key=lambda e: (-e.points, e.seed, e.id))


def swiss_round(entrants: Sequence[SwissEntrant], *, budget: int = SEARCH_BUDGET) -> SwissRound:
    """Pairs one Swiss round (see the module's docstring for the rules)."""
    if len({e.id for e in entrants}) != len(entrants):
        raise ValueError("entrant ids must be distinct")
    order = swiss_order(entrants)
    if len(order) < 2:
        raise ValueError("a Swiss round needs at least 2 entrants")
    if len(order) % 2 == 0:
        return _pair_all(order, budget, bye=None)
    fewest = min(e.byes for e in order)
    # Lowest-placed first among those with the fewest byes.
    candidates = [e for e in reversed(order) if e.byes == fewest]
    best: SwissRound | None = None
    for candidate in candidates:
        rest = [e for e in order if e.id != candidate.id]
        paired = _pair_all(rest, budget, bye=candidate.id)
        if paired.rematches == 0:
            return paired
        if best is None or paired.rematches < best.rematches:
            best = paired
    assert best is not None
    return best


def _pair_all(order: Sequence[SwissEntrant], budget: int, bye: str | None) -> SwissRound:
    count = len(order)

    def allowed(i: int, j: int) -> bool:
        return order[j].id not in order[i].opponents and order[i].id not in order[j].opponents

    found = _search(count, _preferences(order, allowed), budget)
    if found is None:
        found = _matching_pairs(order, allowed)
    rematches = sum(1 for i, j in found if not allowed(i, j))
    pairs = tuple((order[min(i, j)].id, order[max(i, j)].id) for i, j in sorted(found, key=min))
    assert sorted(i for pair in found for i in pair) == list(range(count))
    return SwissRound(pairs, bye, rematches)


def _preferences(order: Sequence[SwissEntrant], allowed: Callable[[int, int], bool]) -> Callable[[int], Iterator[int]]:
    """For each entrant, its allowed later partners, best first: its own score group before the
    groups below, and within its group the partner half a group further down (the top half meets
    the bottom half); the groups below in order."""
    count = len(order)
    group_end: list[int] = [0] * count
    group_size: list[int] = [0] * count
    start = 0
    while start < count:
        end = start
        while end < count and order[end].points == order[start].points:
            end += 1
        for i in range(start, end):
            group_end[i], group_size[i] = end, end - start
        start = end

    def same_group(i: int) -> Iterator[int]:
        """The later members of i's group, nearest to i + half first (the lower one on a tie)."""
        ideal, low, high = i + max(1, group_size[i] // 2), i + 1, group_end[i] - 1
        distance = 0
        while ideal - distance >= low or ideal + distance <= high:
            for j in (ideal - distance, ideal + distance) if distance else (ideal,):
                if low <= j <= high:
                    yield j
            distance += 1

    def candidates(i: int) -> Iterator[int]:
        for j in itertools.chain(same_group(i), range(group_end[i], count)):
            if allowed(i, j):
                yield j

    return candidates


def _search(count: int, preferences: Callable[[int], Iterator[int]], budget: int) -> list[tuple[int, int]] | None:
    """Depth-first: pair the first unpaired entrant with its most preferred free partner,
    backtracking on dead ends. None when no rematch-free pairing was found within the budget."""
    paired = [False] * count
    chosen: list[tuple[int, int]] = []
    steps = 0

    class OutOfBudget(Exception):
        pass

    def extend(start: int) -> bool:
        nonlocal steps
        first = start
        while first < count and paired[first]:
            first += 1
        if first == count:
            return True
        paired[first] = True
        for partner in preferences(first):
            if paired[partner]:
                continue
            steps += 1
            if steps > budget:
                raise OutOfBudget
            paired[partner] = True
            chosen.append((first, partner))
            if extend(first + 1):
                return True
            chosen.pop()
            paired[partner] = False
        paired[first] = False
        return False

    try:
        return chosen if extend(0) else None
    except OutOfBudget:
        return None


def _matching_pairs(order: Sequence[SwissEntrant], allowed: Callable[[int, int], bool]) -> list[tuple[int, int]]:
    """A maximum matching of allowed pairs, then the entrants it leaves out paired in order:
    the fewest rematches any pairing can have."""
    count = len(order)
    adjacency = [[j for j in range(count) if j != i and allowed(i, j)] for i in range(count)]
    start = [-1] * count
    for i in range(count):  # a greedy start in pairing order: few augmentations remain
        if start[i] == -1:
            for j in adjacency[i]:
                if j > i and start[j] == -1:
                    start[i], start[j] = j, i
                    break
    mate = maximum_matching(adjacency, start)
    pairs = [(i, mate[i]) for i in range(count) if mate[i] > i]
    left = [i for i in range(count) if mate[i] == -1]
    pairs.extend((left[k], left[k + 1]) for k in range(0, len(left), 2))
    return pairs


def maximum_matching(adjacency: Sequence[Sequence[int]], start: Sequence[int] | None = None) -> list[int]:
    """Edmonds' blossom algorithm: a maximum-cardinality matching of a general graph.
    `adjacency[v]` lists v's neighbours; `start` an optional valid matching to improve.
    Returns mate[v] (the vertex matched to v, or -1)."""
    count = len(adjacency)
    mate = list(start) if start is not None else [-1] * count
    parent = [-1] * count
    base = list(range(count))
    used = [False] * count
    blossom = [False] * count

    def common_ancestor(a: int, b: int) -> int:
        seen = [False] * count
        while True:
            a = base[a]
            seen[a] = True
            if mate[a] == -1:
                break
            a = parent[mate[a]]
        while True:
            b = base[b]
            if seen[b]:
                return b
            b = parent[mate[b]]

    def mark_path(v: int, b: int, child: int) -> None:
        while base[v] != b:
            blossom[base[v]] = blossom[base[mate[v]]] = True
            parent[v] = child
            child = mate[v]
            v = parent[mate[v]]

    def augmenting_path(root: int) -> int:
        for v in range(count):
            used[v] = False
            parent[v] = -1
            base[v] = v
        used[root] = True
        queue = deque([root])
        while queue:
            v = queue.popleft()
            for to in adjacency[v]:
                if base[v] == base[to] or mate[v] == to:
                    continue
                if to == root or (mate[to] != -1 and parent[mate[to]] != -1):
                    current = common_ancestor(v, to)
                    for i in range(count):
                        blossom[i] = False
                    mark_path(v, current, to)
                    mark_path(to, current, v)
                    for i in range(count):
                        if blossom[base[i]]:
                            base[i] = current
                            if not used[i]:
                                used[i] = True
                                queue.append(i)
                elif parent[to] == -1:
                    parent[to] = v
                    if mate[to] == -1:
                        return to
                    used[mate[to]] = True
                    queue.append(mate[to])
        return -1

    for root in range(count):
        if mate[root] != -1:
            continue
        v = augmenting_path(root)
        while v != -1:
            previous = parent[v]
            following = mate[previous]
            mate[v], mate[previous] = previous, v
            v = following
    return mate

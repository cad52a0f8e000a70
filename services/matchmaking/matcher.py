"""The quick-match matcher: pure functions, no I/O (docs/matchmaking.md, "The matcher").

One pass takes every waiting ticket, groups them by bucket (modality, seats, length, target, mode,
bet: only tickets wanting exactly the same table can meet), sorts each bucket by rating and sweeps
it once, forming tables of consecutive tickets whose ratings all lie inside every member's rating
window. The window widens with waiting time (`Windows`), so a player who waits long enough always
finds a table. A party (two players) takes one side of a 4-player table, so its members are always
partners, never opponents. Players who just played together are not put together again while
someone else could take the seat.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: What makes two tickets want the same table: (preset, seats, length, target points, mode, bet).
BucketKey = tuple[str, int, int, int, int, int]


@dataclass(frozen=True)
class Windows:
    """The rating window schedule: a ticket accepts tables whose every rating lies within
    `half_width(waited)` of its own. The half width starts at `initial`, grows by `growth` every
    `step_seconds` of waiting, stops at `maximum`, and becomes unlimited after `open_seconds`
    (0: never)."""

    initial: float = 2.0
    growth: float = 2.0
    step_seconds: float = 10.0
    maximum: float = 20.0
    open_seconds: float = 120.0

    def half_width(self, waited_seconds: float) -> float:
        if self.open_seconds > 0 and waited_seconds >= self.open_seconds:
            return math.inf
        steps = math.floor(max(waited_seconds, 0.0) / self.step_seconds)
        return min(self.initial + self.growth * steps, self.maximum)


@dataclass(frozen=True)
class Waiting:
    """One searching ticket as the matcher sees it."""

    ticket: str
    key: BucketKey
    #: The ticket's players: one, or a party's two (leader first).
    players: tuple[str, ...]
    #: The mean rating of its players (the ranking service's displayed estimate).
    rating: float
    waited_seconds: float
    #: Requeued at the front after a failed start: goes before everyone else in its bucket.
    front: bool = False
    #: Players this ticket's players met in their last match (the rematch rule).
    recent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Proposal:
    """A table the pass formed: `seats[i]` is (ticket, player) at seat i."""

    key: BucketKey
    tickets: tuple[str, ...]
    seats: tuple[tuple[str, str], ...]
    #: Highest minus lowest ticket rating at the table.
    spread: float


def seat_players(members: Sequence[Waiting], seat_count: int) -> tuple[tuple[str, str], ...]:
    """Seats a table. Two seats: in rating order. Four: a party takes a side (seats 0 and 2, or 1
    and 3, so its members are partners); single players fill the other seats, the strongest with
    the weakest when four single players balance the sides."""
    if seat_count == 2:
        return tuple((m.ticket, m.players[0]) for m in members)
    seats: list[tuple[str, str] | None] = [None] * 4
    parties = [m for m in members if len(m.players) == 2]
    singles = sorted((m for m in members if len(m.players) == 1), key=lambda m: -m.rating)
    for side, party in enumerate(parties):
        seats[side] = (party.ticket, party.players[0])
        seats[side + 2] = (party.ticket, party.players[1])
    if len(singles) == 4:
        # Strongest and weakest against the two in the middle.
        order = [singles[0], singles[1], singles[3], singles[2]]
        return tuple((m.ticket, m.players[0]) for m in order)
    free = iter(i for i in (1, 3, 0, 2) if seats[i] is None)
    for single in singles:
        seats[next(free)] = (single.ticket, single.players[0])
    assert all(s is not None for s in seats)
    return tuple(s for s in seats if s is not None)


def _fits(size: int, players: int, seat_count: int) -> bool:
    """Whether a ticket of `players` fits beside `size` players; a party never plays a 2-seat
    table (its members would face each other)."""
    return size + players <= seat_count and not (seat_count == 2 and players > 1)


def _bucket_pass(key: BucketKey, tickets: list[Waiting], windows: Windows) -> list[Proposal]:
    """One sweep over a bucket sorted by rating: each unused ticket in turn anchors a table with
    the next unused tickets above it. The anchor has the table's lowest rating, so a candidate
    fits when its rating is under every member's upper bound (rating + half width) and its own
    window reaches down to the anchor."""
    seat_count = key[1]
    # Ties in rating: requeued tickets first, then the longest wait.
    tickets.sort(key=lambda w: (w.rating, not w.front, -w.waited_seconds))
    widths = [windows.half_width(w.waited_seconds) for w in tickets]
    used = [False] * len(tickets)
    waiting_players = sum(len(w.players) for w in tickets)
    proposals: list[Proposal] = []
    n = len(tickets)
    for i in range(n):
        if used[i] or not _fits(0, len(tickets[i].players), seat_count):
            continue
        anchor = tickets[i]
        lowest = anchor.rating
        size = len(anchor.players)
        group = [i]
        upper = lowest + widths[i]
        met: set[str] = set(anchor.recent)
        names: set[str] = set(anchor.players)
        rematches: list[int] = []
        j = i + 1
        while size < seat_count and j < n:
            if used[j]:
                j += 1
                continue
            candidate = tickets[j]
            if candidate.rating > upper:
                break  # sorted: no later ticket fits either
            if candidate.rating - widths[j] > lowest or not _fits(size, len(candidate.players), seat_count):
                j += 1
                continue
            if names.intersection(candidate.recent) or met.intersection(candidate.players):
                rematches.append(j)
                j += 1
                continue
            group.append(j)
            size += len(candidate.players)
            upper = min(upper, candidate.rating + widths[j])
            met.update(candidate.recent)
            names.update(candidate.players)
            j += 1
        if size < seat_count and rematches and waiting_players <= seat_count:
            # Nobody else is waiting here: a rematch is better than no match.
            for k in rematches:
                candidate = tickets[k]
                if _fits(size, len(candidate.players), seat_count) and candidate.rating <= upper:
                    group.append(k)
                    size += len(candidate.players)
                    upper = min(upper, candidate.rating + widths[k])
        if size != seat_count:
            continue
        for k in group:
            used[k] = True
        waiting_players -= seat_count
        members = [tickets[k] for k in group]
        proposals.append(
            Proposal(
                key=key,
                tickets=tuple(m.ticket for m in members),
                seats=seat_players(members, seat_count),
                spread=max(m.rating for m in members) - lowest,
            )
        )
    return proposals


def match_pass(waiting: Iterable[Waiting], windows: Windows) -> list[Proposal]:
    """Every table one pass can form from `waiting` (each ticket in at most one)."""
    buckets: dict[BucketKey, list[Waiting]] = {}
    for ticket in waiting:
        bucket = buckets.get(ticket.key)
        if bucket is None:
            buckets[ticket.key] = [ticket]
        else:
            bucket.append(ticket)
    proposals: list[Proposal] = []
    for key, tickets in buckets.items():
        if sum(len(t.players) for t in tickets) >= key[1]:
            proposals.extend(_bucket_pass(key, tickets, windows))
    return proposals

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
from operator import attrgetter

#: What makes two tickets want the same table: (preset, seats, length, target points, mode, bet).
BucketKey = tuple[str, int, int, int, int, int]


@dataclass(frozen=True)
class Windows:
    """The rating window schedule: a ticket accepts tables whose every rating lies within
    `half_width(waited)` of its own. The half width starts at `initial`, grows by `growth` every
    `step_seconds` of waiting, stops at `maximum`, and becomes unlimited after `open_seconds`
    (0: never)."""

    initial: float = 8.0
    growth: float = 8.0
    step_seconds: float = 1.0
    maximum: float = 30.0
    open_seconds: float = 2.0

    def half_width(self, waited_seconds: float) -> float:
        if self.open_seconds > 0 and waited_seconds >= self.open_seconds:
            return math.inf
        steps = math.floor(max(waited_seconds, 0.0) / self.step_seconds)
        return min(self.initial + self.growth * steps, self.maximum)

    def half_widths(self, waited: list[float]) -> list[float]:
        """`half_width` of each (the matcher's hot path: no call per ticket)."""
        initial, growth, step, maximum = self.initial, self.growth, self.step_seconds, self.maximum
        opens = self.open_seconds if self.open_seconds > 0 else math.inf
        inf = math.inf
        return [inf if w >= opens else min(initial + growth * (w // step if w > 0 else 0.0), maximum) for w in waited]


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
    parties = [m for m in members if len(m.players) == 2]
    if not parties:
        # Four single players: the strongest and the weakest against the two in the middle.
        a, b, c, d = sorted(members, key=lambda m: -m.rating)
        return ((a.ticket, a.players[0]), (b.ticket, b.players[0]), (d.ticket, d.players[0]), (c.ticket, c.players[0]))
    first = parties[0]
    if len(parties) == 2:
        second = parties[1]
        return (
            (first.ticket, first.players[0]),
            (second.ticket, second.players[0]),
            (first.ticket, first.players[1]),
            (second.ticket, second.players[1]),
        )
    x, y = (m for m in members if len(m.players) == 1)
    return (
        (first.ticket, first.players[0]),
        (x.ticket, x.players[0]),
        (first.ticket, first.players[1]),
        (y.ticket, y.players[0]),
    )


_players = attrgetter("players")


def _bucket_pass(key: BucketKey, tickets: list[Waiting], windows: Windows) -> list[Proposal]:
    """One sweep over a bucket sorted by rating: each unused ticket in turn anchors a table with
    the next unused tickets above it. The anchor has the table's lowest rating, so a candidate
    fits when its rating is under every member's upper bound (rating + half width) and its own
    window reaches down to the anchor. (Hot path: plain lists indexed by position.)"""
    seat_count = key[1]
    # Ties in rating: requeued tickets first, then the longest wait.
    tickets.sort(key=lambda w: (w.rating, not w.front, -w.waited_seconds))
    widths = windows.half_widths([w.waited_seconds for w in tickets])
    ratings = [w.rating for w in tickets]
    # A party never plays a 2-seat table (its members would face each other): size 99 never fits.
    sizes = [len(w.players) if seat_count == 4 or len(w.players) == 1 else 99 for w in tickets]
    used = [False] * len(tickets)
    waiting_players = sum(map(len, map(_players, tickets)))
    proposals: list[Proposal] = []
    n = len(tickets)
    for i in range(n):
        size = sizes[i]
        if used[i] or size > seat_count:
            continue
        anchor = tickets[i]
        lowest = ratings[i]
        group = [i]
        upper = lowest + widths[i]
        met: frozenset[str] | set[str] = anchor.recent  # copied on the first addition
        names: tuple[str, ...] | set[str] = anchor.players
        rematches: list[int] = []
        j = i + 1
        while size < seat_count and j < n:
            rating = ratings[j]
            if rating > upper:
                break  # sorted: no later ticket fits either
            if used[j] or rating - widths[j] > lowest or size + sizes[j] > seat_count:
                j += 1
                continue
            candidate = tickets[j]
            if (candidate.recent and not candidate.recent.isdisjoint(names)) or (
                met and not met.isdisjoint(candidate.players)
            ):
                rematches.append(j)
                j += 1
                continue
            group.append(j)
            size += sizes[j]
            if rating + widths[j] < upper:
                upper = rating + widths[j]
            if size < seat_count:  # the sets only matter while the table fills
                met = met | candidate.recent
                names = {*names, *candidate.players}
            j += 1
        if size < seat_count and rematches and waiting_players <= seat_count:
            # Nobody else is waiting here: a rematch is better than no match.
            for k in rematches:
                if size + sizes[k] <= seat_count and ratings[k] <= upper:
                    group.append(k)
                    size += sizes[k]
                    upper = min(upper, ratings[k] + widths[k])
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
                spread=ratings[max(group)] - lowest,
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
        if 2 * len(tickets) >= key[1]:  # (a ticket has one or two players)
            proposals.extend(_bucket_pass(key, tickets, windows))
    return proposals

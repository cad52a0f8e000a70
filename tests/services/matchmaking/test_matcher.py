"""The pure matcher: the window schedule, buckets, parties as partners, the rematch rule, and the
invariants of a pass over a large random queue."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from services.matchmaking.matcher import BucketKey, Proposal, Waiting, Windows, match_pass

TWO: BucketKey = ("aberto", 2, 1, 0, 2, 0)
FOUR: BucketKey = ("aberto", 4, 1, 0, 2, 0)
WINDOWS = Windows(initial=2, growth=2, step_seconds=10, maximum=20, open_seconds=120)


def single(ticket: str, rating: float, waited: float = 0.0, key: BucketKey = TWO, **fields: object) -> Waiting:
    return Waiting(ticket, key, (ticket,), rating, waited, **fields)  # type: ignore[arg-type]


def test_the_window_schedule() -> None:
    assert [WINDOWS.half_width(s) for s in (0, 9.9, 10, 25, 80, 90, 119.9)] == [2, 2, 4, 6, 18, 20, 20]
    assert WINDOWS.half_width(120) == math.inf
    assert replace(WINDOWS, open_seconds=0).half_width(10**6) == 20


def test_the_default_window_schedule_opens_after_two_seconds() -> None:
    assert [Windows().half_width(s) for s in (0, 0.9, 1, 1.9)] == [8, 8, 16, 16]
    assert Windows().half_width(2) == math.inf


def test_ratings_match_only_inside_every_members_window() -> None:
    assert match_pass([single("a", 10), single("b", 13)], WINDOWS) == []
    # Both must accept: a long wait on one side is not enough.
    assert match_pass([single("a", 10, waited=60), single("b", 13)], WINDOWS) == []
    (table,) = match_pass([single("a", 10, waited=10), single("b", 13, waited=10)], WINDOWS)
    assert set(table.tickets) == {"a", "b"} and table.spread == 3
    # After the window opens, anyone.
    assert len(match_pass([single("a", 0, waited=120), single("b", 50, waited=120)], WINDOWS)) == 1


def test_only_identical_preferences_meet() -> None:
    other: BucketKey = ("aberto", 2, 1, 0, 1, 100)
    assert match_pass([single("a", 0), single("b", 0, key=other)], WINDOWS) == []


def test_the_closest_ratings_are_put_together() -> None:
    tables = match_pass([single(t, r) for t, r in (("a", 0), ("b", 5), ("c", 1), ("d", 6))], WINDOWS)
    assert sorted(sorted(t.tickets) for t in tables) == [["a", "c"], ["b", "d"]]


def test_parties_sit_as_partners_and_never_at_two_seat_tables() -> None:
    party = Waiting("p", FOUR, ("p1", "p2"), 5, 0)
    others = [single(t, 5, key=FOUR) for t in ("x", "y")]
    (table,) = match_pass([party, *others], WINDOWS)
    seats = [player for _, player in table.seats]
    assert abs(seats.index("p1") - seats.index("p2")) == 2  # same side: 0 and 2, or 1 and 3
    two_parties = match_pass([party, Waiting("q", FOUR, ("q1", "q2"), 5, 0)], WINDOWS)
    seats = [player for _, player in two_parties[0].seats]
    assert seats.index("p1") % 2 == seats.index("p2") % 2 and seats.index("q1") % 2 == seats.index("q2") % 2
    assert match_pass([Waiting("p", TWO, ("p1", "p2"), 5, 0)], WINDOWS) == []


def test_four_single_players_balance_the_sides() -> None:
    (table,) = match_pass([single(t, r, key=FOUR) for t, r in (("a", 1), ("b", 1.5), ("c", 2), ("d", 2.5))], WINDOWS)
    seats = [player for _, player in table.seats]
    assert {seats[0], seats[2]} == {"d", "a"} and {seats[1], seats[3]} == {"c", "b"}


def test_no_rematch_while_someone_else_can_take_the_seat() -> None:
    a = single("a", 5, recent=frozenset({"b"}))
    b = single("b", 5, recent=frozenset({"a"}))
    c = single("c", 6)
    (table,) = match_pass([a, b, c], WINDOWS)
    assert set(table.tickets) != {"a", "b"}
    # Alone in the queue, they play again rather than wait forever.
    (table,) = match_pass([a, b], WINDOWS)
    assert set(table.tickets) == {"a", "b"}


def test_requeued_tickets_go_first_among_equals() -> None:
    tables = match_pass([single("late", 5), single("front", 5, front=True), single("x", 5)], WINDOWS)
    assert "front" in tables[0].tickets


def _check(proposals: list[Proposal], waiting: list[Waiting]) -> None:
    by_id = {w.ticket: w for w in waiting}
    used: set[str] = set()
    for table in proposals:
        assert not used & set(table.tickets)
        used |= set(table.tickets)
        members = [by_id[t] for t in table.tickets]
        assert {m.key for m in members} == {table.key}
        assert len(table.seats) == table.key[1] == sum(len(m.players) for m in members)
        ratings = [m.rating for m in members]
        for m in members:
            width = WINDOWS.half_width(m.waited_seconds)
            assert max(ratings) - m.rating <= width and m.rating - min(ratings) <= width
        seats = [player for _, player in table.seats]
        for m in members:
            if len(m.players) == 2:
                assert seats.index(m.players[0]) % 2 == seats.index(m.players[1]) % 2


def test_a_pass_over_a_random_queue_keeps_every_rule() -> None:
    rng = random.Random(7)
    presets = ["aberto", "fechado", "classico_104"]
    waiting = []
    for i in range(5000):
        seats = rng.choice((2, 4))
        key: BucketKey = (rng.choice(presets), seats, 1, 0, rng.choice((1, 2)), 0)
        players = (f"p{i}a", f"p{i}b") if seats == 4 and rng.random() < 0.2 else (f"p{i}",)
        waiting.append(Waiting(f"t{i}", key, players, rng.gauss(20, 8), rng.uniform(0, 150)))
    proposals = match_pass(waiting, WINDOWS)
    assert len(proposals) > 1000
    _check(proposals, waiting)

"""Whole tournaments through the tournament service's gRPC API, with the services it calls
(`platform`: the real wallet service, fakes of ranking and game sessions), on SQLite and
PostgreSQL: registration with buy-ins, seeding, rounds whose tables are created and played, byes,
no-show forfeits, Swiss pairing, payouts, cancellations with refunds; the wallet's audit after each."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from collections.abc import Callable

import grpc
import pytest

from buraco.v1 import tournament_pb2
from services.tournament import prizes
from tests.services.tournament.fakes import Plan, quick_result
from tests.services.tournament.support import (
    Platform,
    TournamentService,
    Watched,
    finished,
    players,
)

T = tournament_pb2.Tournament
SWISS = T.FORMAT_SWISS


def entrant_id(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def expected_payouts(
    final: list[tournament_pb2.Standing], structure: dict[int, int], pool: int, seeds: dict[str, int]
) -> dict[str, int]:
    """Each player's prize by the documented rules, computed here from the final standings."""
    by_rank: dict[int, list[tournament_pb2.Standing]] = {}
    for standing in final:
        by_rank.setdefault(standing.rank, []).append(standing)
    shares: list[tuple[str, int, int]] = []
    for rank in sorted(by_rank):
        tied = sorted(by_rank[rank], key=lambda s: seeds[entrant_id(s.entrant)])
        pooled = sum(structure.get(place, 0) for place in range(rank, rank + len(tied)))
        for i, standing in enumerate(tied):
            entry_bp = pooled // len(tied) + (1 if i < pooled % len(tied) else 0)
            names = [p.removeprefix("players/") for p in standing.players]
            for j, player in enumerate(names):
                bp = entry_bp // len(names) + (1 if j < entry_bp % len(names) else 0)
                if bp:
                    shares.append((player, rank, bp))
    assert sum(bp for _, _, bp in shares) == 10_000
    return prizes.chips(pool, shares)


async def check_payouts(
    service: TournamentService,
    platform: Platform,
    tournament: str,
    everyone: list[str],
    funded: int,
    buy_in: int,
    structure: dict[int, int],
    per_entry: int = 1,
) -> dict[str, int]:
    """After the end: every balance is what it was, less the buy-in, plus the prize the documented
    rules give; the house has its cut; the ledger audits."""
    final = await service.standings(tournament)
    entrants = await service.entrants(tournament)
    seeds = {entrant_id(e.name): e.seed for e in entrants if e.complete}
    pool = buy_in * len(seeds) * per_entry
    expected = expected_payouts(final, structure, pool, seeds)
    for player in everyone:
        assert (await platform.balance(player)) == funded - buy_in + expected.get(player, 0), player
    assert (await platform.house()) == pool * 20 // 100
    t = await service.stub.GetTournament(
        tournament_pb2.GetTournamentRequest(name=f"tournaments/{tournament}"), metadata=service.as_admin()
    )
    assert (t.pool_chips, t.house_cut_chips, t.prize_pool_chips) == (pool, pool // 5, pool - pool // 5)
    won = {entrant_id(s.entrant): s.prize_chips for s in final}
    for s in final:
        assert won[entrant_id(s.entrant)] == sum(expected.get(p.removeprefix("players/"), 0) for p in s.players)
    await platform.audit()
    return expected


async def test_a_small_single_elimination_runs_to_the_end(service: TournamentService, platform: Platform) -> None:
    everyone = players("p", 5)
    await platform.fund(everyone, 1000)
    for rating, player in enumerate(everyone):
        platform.ranking.ratings[player] = float(rating)  # p005 is the strongest
    await service.create("small", min_entrants=3)
    await service.register_all("small", everyone)
    await service.start("small")
    done = await service.until("small", finished)
    assert done.tournament.state == T.STATE_FINISHED and done.tournament.total_rounds == 3
    seeds = {e.players[0]: e.seed for e in await service.entrants("small")}
    assert seeds == {f"players/{p}": 5 - i for i, p in enumerate(everyone)}
    first = done.pairings(1)
    assert sorted(p.bye for p in first) == [False, True, True, True]
    await check_payouts(service, platform, "small", everyone, 1000, 100, {1: 6000, 2: 4000})


# -- the two big ones ---------------------------------------------------------------------------------

ELIMINATION_PRIZES = {1: 4000, 2: 2500, 3: 1500, 4: 1000, 5: 500, 6: 300, 7: 200}


async def test_64_entrants_single_elimination_to_the_end(service: TournamentService, platform: Platform) -> None:
    everyone = players("se", 64)
    await platform.fund(everyone, 1000)
    platform.plan_tables(lambda match, seated: Plan(result=quick_result(match)))
    # distinct ratings in no particular order, the same every run; the seeds must follow them
    drawn = random.Random("se64").sample(range(10_000), len(everyone))
    for player, rating in zip(everyone, drawn, strict=True):
        platform.ranking.ratings[player] = rating / 7
    await service.create("se64", min_entrants=8, prizes=ELIMINATION_PRIZES, buy_in_chips=75)
    await service.register_all("se64", everyone)
    for player in everyone:
        assert (await platform.balance(player)) == 925  # the buy-in is held
    await service.start("se64")
    done = await service.until("se64", finished)

    # Seeds by rating, strongest first.
    entrants = await service.entrants("se64")
    by_seed = sorted(entrants, key=lambda e: e.seed)
    ratings = [platform.ranking.ratings[e.players[0].removeprefix("players/")] for e in by_seed]
    assert ratings == sorted(ratings, reverse=True) and [e.seed for e in by_seed] == list(range(1, 65))
    # Six rounds of 32, 16, 8, 4, 2, 1 matches; each round's entrants are the previous winners.
    rounds = done.bracket.rounds
    assert [len(r.pairings) for r in rounds] == [32, 16, 8, 4, 2, 1]
    assert all(r.finished for r in rounds) and done.tournament.current_round == 6
    alive = {e.name for e in entrants}
    for r in rounds:
        names = [name for p in r.pairings for name in p.entrants]
        assert sorted(names) == sorted(alive) and all(not p.bye for p in r.pairings)
        assert all(p.winner in p.entrants and p.state == tournament_pb2.Pairing.STATE_DECIDED for p in r.pairings)
        assert all(
            len(p.scores) == 2 and p.scores[list(p.entrants).index(p.winner)] >= min(p.scores) for p in r.pairings
        )
        alive = {p.winner for p in r.pairings}
    # Round 1 is seed 1 v 64, 32 v 33, ...: every pair's seeds add up to 65.
    seed_of = {e.name: e.seed for e in entrants}
    assert all(sum(seed_of[n] for n in p.entrants) == 65 for p in rounds[0].pairings)
    # Final standings: the champion, the finalist, then ties by round of elimination.
    final = await service.standings("se64")
    assert done.standings.final and [s.rank for s in final].count(1) == 1
    assert Counter(s.rank for s in final) == {1: 1, 2: 1, 3: 2, 5: 4, 9: 8, 17: 16, 33: 32}
    assert final[0].entrant in alive and final[0].points == 6 and not final[0].eliminated
    expected = await check_payouts(service, platform, "se64", everyone, 1000, 75, ELIMINATION_PRIZES)
    # 4800 in the pool, 960 to the house, 3840 shared: the 3rd places split 1500 + 1000 basis points.
    assert sorted(expected.values(), reverse=True)[:4] == [1536, 960, 480, 480]


async def test_32_entrants_swiss_of_5_rounds_to_the_end(service: TournamentService, platform: Platform) -> None:
    everyone = players("sw", 32)
    await platform.fund(everyone, 500)
    platform.plan_tables(lambda match, seated: Plan(result=quick_result(match)))
    structure = {1: 5000, 2: 3000, 3: 2000}
    await service.create("swiss32", format=SWISS, swiss_rounds=5, prizes=structure, buy_in_chips=33, min_entrants=4)
    await service.register_all("swiss32", everyone)
    await service.start("swiss32")
    done = await service.until("swiss32", finished)
    rounds = done.bracket.rounds
    assert [len(r.pairings) for r in rounds] == [16] * 5 and done.tournament.total_rounds == 5
    met: set[frozenset[str]] = set()
    wins: Counter[str] = Counter()
    for r in rounds:
        names = [n for p in r.pairings for n in p.entrants]
        assert len(names) == len(set(names)) == 32  # everyone plays once a round
        for p in r.pairings:
            pair = frozenset(p.entrants)
            assert pair not in met  # never the same opponents twice
            met.add(pair)
            wins[p.winner] += 1
    # The standings and their tie-breaks, recomputed here from the bracket.
    final = await service.standings("swiss32")
    assert list(done.standings.tie_break_names) == ["buchholz", "sonneborn_berger", "points_difference"]
    for s in final:
        opponents = [
            (next(n for n in p.entrants if n != s.entrant), p)
            for r in rounds
            for p in r.pairings
            if s.entrant in p.entrants
        ]
        buchholz = sum(wins[o] for o, _ in opponents)
        sonneborn = sum(wins[o] for o, p in opponents if p.winner == s.entrant)
        difference = sum(
            p.scores[list(p.entrants).index(s.entrant)] - p.scores[list(p.entrants).index(o)] for o, p in opponents
        )
        assert s.points == wins[s.entrant]
        assert list(s.tie_breaks) == [buchholz, sonneborn, difference]
    keys = [(s.points, *s.tie_breaks) for s in final]
    assert keys == sorted(keys, reverse=True)
    for (a, b), (ka, kb) in zip(itertools.pairwise(final), itertools.pairwise(keys), strict=True):
        assert (b.rank == a.rank) == (ka == kb)
    await check_payouts(service, platform, "swiss32", everyone, 500, 33, structure)


# -- byes, no-shows, lost reports -------------------------------------------------------------------


def decided(round_number: int, count: int) -> Callable[[Watched], bool]:
    def check(w: Watched) -> bool:
        pairings = w.pairings(round_number)
        return len(pairings) == count and all(p.state == tournament_pb2.Pairing.STATE_DECIDED for p in pairings)

    return check


def tables_made(round_number: int) -> Callable[[Watched], bool]:
    def check(w: Watched) -> bool:
        pairings = [p for p in w.pairings(round_number) if not p.bye]
        return bool(pairings) and all(p.state != tournament_pb2.Pairing.STATE_CREATING_TABLE for p in pairings)

    return check


async def test_byes_and_no_show_forfeits(service: TournamentService, platform: Platform) -> None:
    everyone = players("ns", 6)
    await platform.fund(everyone, 300)
    for i, player in enumerate(everyone):
        platform.ranking.ratings[player] = 100.0 - i  # ns001 is seed 1, ... ns006 seed 6
    # Round 1 (8 slots): 1 bye, 4 v 5, 2 bye, 3 v 6. Seed 5 never shows; seeds 3 and 6 neither.
    absent = {"ns005", "ns003", "ns006"}
    platform.plan_tables(lambda match, seated: Plan(absent=frozenset(absent & set(seated))))
    structure = {1: 5000, 2: 3000, 3: 1000, 4: 1000}
    await service.create("ns", min_entrants=4, prizes=structure, no_show_seconds=60)
    await service.register_all("ns", everyone)
    await service.start("ns")
    seen = await service.until("ns", tables_made(1))
    byes = [p for p in seen.pairings(1) if p.bye]
    seeds = {e.name: e.seed for e in await service.entrants("ns")}
    assert sorted(seeds[p.entrants[0]] for p in byes) == [1, 2]
    assert all(p.winner == p.entrants[0] for p in byes)
    started = seen.tournament.actual_start_time.ToSeconds()
    assert all(p.no_show_deadline.ToSeconds() == started + 60 for p in seen.pairings(1) if not p.bye)
    service.advance(61)  # past the deadline: the absent forfeit
    seen = await service.until("ns", decided(1, 4))
    by_seeds = {tuple(sorted(seeds[n] for n in p.entrants)): p for p in seen.pairings(1)}
    single, double = by_seeds[(4, 5)], by_seeds[(3, 6)]
    assert single.forfeit and seeds[single.winner] == 4 and list(single.no_shows) == ["players/ns005"]
    assert double.forfeit and double.winner == "" and sorted(double.no_shows) == ["players/ns003", "players/ns006"]
    await platform.tables.until_cancelled({single.match_id, double.match_id})
    # Round 2: seed 1 v seed 4, and seed 2 alone (its opponents both forfeited): a bye.
    done = await service.until("ns", finished)
    second = done.pairings(2)
    assert sorted(tuple(sorted(seeds[n] for n in p.entrants)) for p in second) == [(1, 4), (2,)]
    final = {seeds[s.entrant]: s.rank for s in await service.standings("ns")}
    assert final[3] == final[5] == final[6] == 4 and sorted(final.values()) == [1, 2, 3, 4, 4, 4]
    await check_payouts(service, platform, "ns", everyone, 300, 100, structure)


async def test_swiss_with_an_odd_count_gives_each_bye_to_a_different_entrant(
    service: TournamentService, platform: Platform
) -> None:
    everyone = players("odd", 7)
    await platform.fund(everyone, 100)
    await service.create("odd", format=SWISS, swiss_rounds=4, buy_in_chips=10, prizes={1: 10_000}, min_entrants=3)
    await service.register_all("odd", everyone)
    await service.start("odd")
    done = await service.until("odd", finished)
    byes = [p.entrants[0] for r in done.bracket.rounds for p in r.pairings if p.bye]
    assert len(byes) == 4 and len(set(byes)) == 4
    for r in done.bracket.rounds:
        assert sorted(n for p in r.pairings for n in p.entrants) == sorted({n for p in r.pairings for n in p.entrants})
        assert len([n for p in r.pairings for n in p.entrants]) == 7
    points = {s.entrant: s.points for s in await service.standings("odd")}
    wins = Counter(p.winner for r in done.bracket.rounds for p in r.pairings)
    assert points == {e: wins.get(e, 0) for e in points}  # a bye is worth a win
    await check_payouts(service, platform, "odd", everyone, 100, 10, {1: 10_000})


async def test_a_lost_report_is_read_from_the_table(service: TournamentService, platform: Platform) -> None:
    everyone = players("lr", 2)
    await platform.fund(everyone, 100)
    platform.plan_tables(lambda match, seated: Plan(result=(1, (300, 500)), report=False))
    await service.create("lr")
    await service.register_all("lr", everyone)
    await service.start("lr")
    await service.until("lr", tables_made(1))
    service.advance(2)  # the table is read: finished, no report yet
    await service.settle()
    assert (await service.bracket("lr")).rounds[0].pairings[0].state == tournament_pb2.Pairing.STATE_PLAYING
    service.advance(11)  # the grace is over: the table's scores decide
    done = await service.until("lr", finished)
    (match,) = done.pairings(1)
    assert list(match.scores) == [300, 500] and match.winner == match.entrants[1] and not match.forfeit
    assert not platform.tables.delivered
    await check_payouts(service, platform, "lr", everyone, 100, 100, {1: 6000, 2: 4000})


# -- cancellations ----------------------------------------------------------------------------------


async def test_too_few_entrants_cancel_the_tournament_and_refund_every_buy_in(
    service: TournamentService, platform: Platform
) -> None:
    everyone = players("few", 3)
    await platform.fund(everyone, 250)
    await service.create("few", min_entrants=4)
    await service.register_all("few", everyone)
    assert all([await platform.balance(p) == 150 for p in everyone])
    await service.start("few")
    done = await service.until("few", finished)
    assert done.tournament.state == T.STATE_CANCELLED
    assert done.tournament.cancel_reason == "too few entrants: 3 of the 4 needed"
    assert all([await platform.balance(p) == 250 for p in everyone]) and (await platform.house()) == 0
    assert not platform.tables.tables
    await platform.audit()


async def test_an_admin_cancels_mid_round_and_every_buy_in_is_refunded(
    service: TournamentService, platform: Platform
) -> None:
    everyone = players("mid", 6)
    await platform.fund(everyone, 400)
    # ns006's table waits for a player who never comes; the others are under way, held.
    platform.plan_tables(lambda match, seated: Plan(wait=True, absent=frozenset({"mid006"} & set(seated))))
    await service.create("mid", min_entrants=2, buy_in_chips=120)
    await service.register_all("mid", everyone)
    await service.start("mid")
    await service.until("mid", tables_made(1))
    cancelled = await service.stub.CancelTournament(
        tournament_pb2.CancelTournamentRequest(name="tournaments/mid", request_id="stop", reason="power cut"),
        metadata=service.as_admin(),
    )
    assert cancelled.state == T.STATE_CANCELLED and cancelled.cancel_reason == "power cut"
    done = await service.until(
        "mid", lambda w: finished(w) and all(p.state == tournament_pb2.Pairing.STATE_DECIDED for p in w.pairings())
    )
    assert all([await platform.balance(p) == 400 for p in everyone]) and (await platform.house()) == 0
    waiting = [m for m, t in platform.tables.by_match.items() if "mid006" in platform.tables.tables[t].players]
    await platform.tables.until_cancelled(set(waiting))
    assert not any(p.winner for p in done.pairings(1) if not p.bye)
    # The tables under way end later: their reports are accepted and change nothing.
    platform.tables.release(*[m for m in platform.tables.by_match if m not in waiting])
    again = await service.stub.CancelTournament(
        tournament_pb2.CancelTournamentRequest(name="tournaments/mid", request_id="stop", reason="power cut"),
        metadata=service.as_admin(),
    )
    assert again == cancelled  # a retry gets the first answer
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await service.stub.CancelTournament(
            tournament_pb2.CancelTournamentRequest(name="tournaments/mid", request_id="stop-2", reason="again"),
            metadata=service.as_admin(),
        )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    for match in platform.tables.by_match:
        if match not in waiting:
            await wait_delivered(platform, match)
    assert all([await platform.balance(p) == 400 for p in everyone])
    await platform.audit()


async def wait_delivered(platform: Platform, match: str) -> None:
    """Waits until the game-session fake has delivered (or given up on) a table's report."""
    async with asyncio.timeout(30):
        while match not in platform.tables.delivered and match not in platform.tables.refused:
            await asyncio.sleep(0.02)  # polling a fake's delivery record, nothing to subscribe to

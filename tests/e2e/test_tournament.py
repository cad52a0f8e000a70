"""A tournament played through the real services: buy-ins held by the wallet, each round's tables
created in the game-session service and played there by every entrant's bot client over gRPC, the
results read back by the tournament, prizes paid by the wallet (less the house cut), every match
recorded by ranking. Both databases; `BURACO_E2E_ENTRANTS` makes it larger (the CI size is 8)."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from buraco.v1 import common_pb2, tournament_pb2
from engine.bots.base import make_bot
from services.client.connection import TableConnection, play_seat
from services.game_session.table import ruleset_for
from tests.conftest import DatabaseTarget
from tests.e2e.suite import SERVICES, Suite, suite

ENTRANTS = int(os.environ.get("BURACO_E2E_ENTRANTS", "8"))
BUY_IN = 100
START = 1000
T = tournament_pb2.Tournament
PAIRING = tournament_pb2.Pairing


def definition(starts: datetime, entrants: int, tournament_format: int, rounds: int) -> tournament_pb2.Tournament:
    options = common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset="aberto"),
        players=2,
        length=common_pb2.MATCH_LENGTH_EXPRESS,
        mode=common_pb2.TABLE_MODE_COMPETITIVE,
    )
    out = T(
        display_name="Copa e2e",
        table_options=options,
        format=tournament_format,  # type: ignore[arg-type]
        swiss_rounds=rounds,
        buy_in_chips=BUY_IN,
        prizes=[T.PrizeShare(place=1, share_bp=6000), T.PrizeShare(place=2, share_bp=4000)],
        min_entrants=2,
        max_entrants=entrants,
    )
    out.no_show_timeout.FromSeconds(120)
    out.registration_open_time.FromDatetime(starts - timedelta(hours=1))
    out.registration_close_time.FromDatetime(starts)
    out.start_time.FromDatetime(starts)
    return out


class Players:
    """Every entrant's client: when a pairing of theirs gets a table, they join it and play it out."""

    def __init__(self, running: Suite, entrants: dict[str, list[str]]) -> None:
        self.running = running
        self.entrants = entrants  # entrant name -> players
        self.playing: set[str] = set()  # tables joined
        self.tasks: list[asyncio.Task[int]] = []
        self.matches: dict[str, int] = {}  # player -> tables played

    def see(self, pairing: tournament_pb2.Pairing) -> None:
        if pairing.bye or not pairing.table or pairing.table in self.playing:
            return
        if pairing.state != PAIRING.STATE_PLAYING:
            return
        self.playing.add(pairing.table)
        for entrant in pairing.entrants:
            for player in self.entrants[entrant]:
                self.matches[player] = self.matches.get(player, 0) + 1
                self.tasks.append(asyncio.ensure_future(self.play(pairing.table, player)))

    async def play(self, table: str, player: str) -> int:
        running = self.running
        connection = TableConnection(running.address("game_session"), running.token(player), table)
        await connection.start()
        try:
            assert connection.model.table is not None
            rules = ruleset_for(connection.model.table.options)
            return await play_seat(connection, make_bot("heuristic", seed=player), rules)
        finally:
            await connection.close()


async def run_tournament(running: Suite, name: str, tournament_format: int, rounds: int) -> tournament_pb2.Bracket:
    admin = running.admin()
    players = [f"{name}{i:03d}" for i in range(ENTRANTS)]
    for player in players:
        await running.fund(player, START)
    # Registration must be over by the start, and this machine may be slow: a generous margin.
    starts = datetime.now(UTC) + timedelta(seconds=8 + ENTRANTS * 0.25)
    await running.tournaments.CreateTournament(
        tournament_pb2.CreateTournamentRequest(
            request_id=f"create-{name}",
            tournament_id=name,
            tournament=definition(starts, ENTRANTS, tournament_format, rounds),
        ),
        metadata=admin,
    )
    gate = asyncio.Semaphore(16)

    async def register(player: str) -> tournament_pb2.Entrant:
        async with gate:
            entrant: tournament_pb2.Entrant = await running.tournaments.Register(
                tournament_pb2.RegisterRequest(tournament=f"tournaments/{name}", request_id=f"reg-{player}"),
                metadata=running.player(player),
            )
            return entrant

    registered = await asyncio.gather(*(register(p) for p in players))
    entrants = {e.name: [p.removeprefix("players/") for p in e.players] for e in registered}
    clients = Players(running, entrants)
    async with asyncio.timeout(120 + ENTRANTS * 15):
        async for update in running.tournaments.WatchTournament(
            tournament_pb2.WatchTournamentRequest(name=f"tournaments/{name}"), metadata=admin
        ):
            if update.WhichOneof("update") == "bracket":
                for round_ in update.bracket.rounds:
                    for pairing in round_.pairings:
                        clients.see(pairing)
            elif update.WhichOneof("update") == "tournament" and update.tournament.state in (
                T.STATE_FINISHED,
                T.STATE_CANCELLED,
            ):
                assert update.tournament.state == T.STATE_FINISHED, update.tournament
                break
        await asyncio.gather(*clients.tasks)
    bracket: tournament_pb2.Bracket = await running.tournaments.GetBracket(
        tournament_pb2.GetBracketRequest(tournament=f"tournaments/{name}"), metadata=admin
    )
    # No pairing was decided by forfeit: every table was played to its end by its players.
    assert not any(p.forfeit for r in bracket.rounds for p in r.pairings)
    for player, matches in clients.matches.items():
        profile = await running.until_recorded(player, matches)
        assert profile.stats.matches == matches
    return bracket


async def check_prizes(running: Suite, names: list[str]) -> None:
    """Each tournament paid its first two places 60% and 40% of its pool less the house's 20%; every
    other entrant is down the buy-in; no chip was lost or invented; the ledger audits clean."""
    pool = ENTRANTS * BUY_IN
    cut = pool * 20 // 100
    total = 0
    for name in names:
        players = [f"{name}{i:03d}" for i in range(ENTRANTS)]
        balances = await running.until_settled(players)
        total += sum(balances.values())
        paid = sorted((b - (START - BUY_IN) for b in balances.values() if b != START - BUY_IN), reverse=True)
        assert paid == [(pool - cut) * 6000 // 10000, (pool - cut) * 4000 // 10000], name
    house = (await running.account("accounts/house")).balance_chips
    assert house == cut * len(names)
    assert total + house == len(names) * ENTRANTS * START
    await running.audit()


async def test_elimination_and_swiss_through_real_tables(db_target: DatabaseTarget, tmp_path: Path) -> None:
    """Both formats at once on one suite (it also shows two tournaments sharing the services)."""
    async with suite(db_target, tmp_path, (*SERVICES, "tournament")) as running:
        knockout, swiss = await asyncio.gather(
            run_tournament(running, "ko", T.FORMAT_SINGLE_ELIMINATION, 0),
            run_tournament(running, "sw", T.FORMAT_SWISS, 3),
        )
        assert len(knockout.rounds[0].pairings) == ENTRANTS // 2
        assert [len(r.pairings) for r in knockout.rounds][-1] == 1 and knockout.rounds[-1].pairings[0].winner
        assert len(swiss.rounds) == 3
        assert all(len(r.pairings) == ENTRANTS // 2 for r in swiss.rounds)
        await check_prizes(running, ["ko", "sw"])

"""The player's journey across the whole suite, as real processes on each database: queue, get
matched, stake, play to the end over the game-session API, get paid less the house cut, gain XP
and appear on the leaderboard; a practice table with bots costs and earns nothing; an annulled
match gives every chip back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from buraco.v1 import common_pb2, game_session_pb2, matchmaking_pb2
from engine.bots.base import make_bot
from services.client.connection import TableConnection, play_seat
from tests.conftest import DatabaseTarget
from tests.e2e.suite import WAIT_SECONDS, Suite, suite

BET = 100
START = 1000


def preferences(mode: int, bet: int) -> matchmaking_pb2.MatchPreferences:
    return matchmaking_pb2.MatchPreferences(
        preset="aberto",
        players=2,
        length=common_pb2.MATCH_LENGTH_EXPRESS,
        mode=mode,  # type: ignore[arg-type]
        bet_chips=bet,
    )


async def queue_pair(running: Suite, players: list[str], mode: int, bet: int) -> list[matchmaking_pb2.MatchAssignment]:
    tickets = [
        await running.matchmaking.CreateTicket(
            matchmaking_pb2.CreateTicketRequest(
                request_id=f"queue-{player}", ticket=matchmaking_pb2.Ticket(preferences=preferences(mode, bet))
            ),
            metadata=running.player(player),
        )
        for player in players
    ]
    return list(await asyncio.gather(*(running.until_matched(t, p) for t, p in zip(tickets, players, strict=True))))


async def connect(running: Suite, assignment: matchmaking_pb2.MatchAssignment, player: str) -> TableConnection:
    connection = TableConnection(assignment.game_session_address, running.token(player), assignment.table)
    connection.keep_received = True
    await connection.start()
    return connection


async def play_match(
    running: Suite, assignments: list[matchmaking_pb2.MatchAssignment], players: list[str]
) -> list[TableConnection]:
    connections = [await connect(running, a, p) for a, p in zip(assignments, players, strict=True)]
    rules = await running.rules_of(assignments[0].table, players[0])
    async with asyncio.timeout(WAIT_SECONDS * 2):
        await asyncio.gather(*(play_seat(c, make_bot("heuristic", seed=i), rules) for i, c in enumerate(connections)))
    return connections


def match_ended(connection: TableConnection) -> game_session_pb2.MatchEnded:
    ended = [e.match_ended for e in connection.received if e.WhichOneof("event") == "match_ended"]
    assert len(ended) == 1
    return ended[0]


async def test_competitive_journey_pays_the_winner_less_the_house_cut(
    db_target: DatabaseTarget, tmp_path: Path
) -> None:
    players = ["ana", "bia"]
    async with suite(db_target, tmp_path) as running:
        for player in players:
            await running.fund(player, START)
        assignments = await queue_pair(running, players, common_pb2.TABLE_MODE_COMPETITIVE, BET)
        assert len({a.table for a in assignments}) == 1 and {a.seat for a in assignments} == {0, 1}
        # Both stakes are held (still in the balance, not spendable) while the match runs.
        assert [await running.balance(p) for p in players] == [(START, BET)] * 2  # balance, of which held

        connections = await play_match(running, assignments, players)
        ended = match_ended(connections[0])
        assert ended == match_ended(connections[1]) and not ended.annulled
        outcome = {o.player.removeprefix("players/"): o.outcome for o in ended.outcomes}
        winner = next(p for p, o in outcome.items() if o == common_pb2.OUTCOME_WON)
        loser = next(p for p, o in outcome.items() if o == common_pb2.OUTCOME_LOST)

        balances = await running.until_settled(players)
        pot = 2 * BET
        cut = pot * 20 // 100
        assert balances == {winner: START - BET + pot - cut, loser: START - BET}
        house = await running.account("accounts/house")
        assert house.balance_chips == cut
        await running.audit()

        won = await running.until_recorded(winner, 1)
        lost = await running.until_recorded(loser, 1)
        assert (won.stats.wins, lost.stats.losses) == (1, 1)
        assert won.xp > lost.xp > 0
        board = await running.xp_leaderboard()
        assert [e.player for e in board[:2]] == [f"players/{winner}", f"players/{loser}"]


async def test_a_practice_table_with_bots_moves_no_chip_and_no_xp(db_target: DatabaseTarget, tmp_path: Path) -> None:
    async with suite(db_target, tmp_path) as running:
        await running.fund("caio", START)
        chief = running.player("caio")
        options = common_pb2.TableOptions(
            ruleset=common_pb2.RulesetRef(preset="aberto"),
            players=2,
            length=common_pb2.MATCH_LENGTH_EXPRESS,
            mode=common_pb2.TABLE_MODE_PRACTICE,
        )
        lobby = await running.matchmaking.CreateLobbyTable(
            matchmaking_pb2.CreateLobbyTableRequest(
                request_id="lobby", lobby_table=matchmaking_pb2.LobbyTable(options=options)
            ),
            metadata=chief,
        )
        await running.matchmaking.FillWithBots(
            matchmaking_pb2.FillWithBotsRequest(name=lobby.name, request_id="bots"), metadata=chief
        )
        await running.matchmaking.SetReady(
            matchmaking_pb2.SetReadyRequest(name=lobby.name, request_id="ready", ready=True), metadata=chief
        )
        await running.matchmaking.StartMatch(
            matchmaking_pb2.StartMatchRequest(name=lobby.name, request_id="start"), metadata=chief
        )
        async with asyncio.timeout(WAIT_SECONDS):
            async for update in running.matchmaking.WatchLobbyTable(
                matchmaking_pb2.WatchLobbyTableRequest(name=lobby.name), metadata=chief
            ):
                if update.game_table.table:
                    assignment = update.game_table
                    break
        [connection] = await play_match(running, [assignment], ["caio"])
        ended = match_ended(connection)
        assert [o.player for o in ended.outcomes] == ["players/caio"]
        assert await running.balance("caio") == (START, 0)
        assert (await running.profile("caio")).xp == 0
        await running.audit()


async def test_an_annulled_match_gives_every_stake_back(db_target: DatabaseTarget, tmp_path: Path) -> None:
    players = ["davi", "edu"]
    async with suite(db_target, tmp_path) as running:
        for player in players:
            await running.fund(player, START)
        assignments = await queue_pair(running, players, common_pb2.TABLE_MODE_COMPETITIVE, BET)
        connections = [await connect(running, a, p) for a, p in zip(assignments, players, strict=True)]
        table = assignments[0].table
        proposal = await running.tables.ProposeAnnulment(
            game_session_pb2.ProposeAnnulmentRequest(table=table, request_id="annul"), metadata=running.player("davi")
        )
        await running.tables.VoteAnnulment(
            game_session_pb2.VoteAnnulmentRequest(
                table=table, request_id="yes", proposal_id=proposal.proposal_id, approve=True
            ),
            metadata=running.player("edu"),
        )
        for connection in connections:
            await connection.wait_until(lambda model: model.finished, timeout=WAIT_SECONDS)
        assert await running.until_settled(players) == {p: START for p in players}
        house = await running.account("accounts/house")
        assert house.balance_chips == 0
        await running.audit()
        for connection in connections:
            await connection.close()

"""The whole suite as real processes (`python -m services.<name>`), wired to each other by address,
on one database target, and the clients a player or an operator would use against it.

Processes start in dependency order (wallet and ranking, then game sessions, then matchmaking), each
on a free port; every later one is given the addresses of those before it. Tokens are minted with
the dev key pair every process trusts in local mode.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from buraco.v1 import (
    game_session_pb2,
    game_session_pb2_grpc,
    matchmaking_pb2,
    matchmaking_pb2_grpc,
    ranking_pb2,
    ranking_pb2_grpc,
    tournament_pb2_grpc,
    wallet_pb2,
    wallet_pb2_grpc,
)
from services.common.auth import Kind, Minter
from services.common.config import normalise_database_url
from services.common.db import Database
from services.game_session.table import ruleset_for
from services.wallet.service import run_audit
from tests.conftest import DatabaseTarget
from tests.services.harness import ServiceProcess, bearer, dev_minter, free_port, service_process

Metadata = tuple[tuple[str, str], ...]
WAIT_SECONDS = 60.0

#: Settings that make the suite quick to drive from a test: bots play at once, the matching loop
#: ticks often, deals are reproducible.
FAST_ENV = {
    "BURACO_GAME_SESSION_BOT_DELAY_MS": "0",
    "BURACO_GAME_SESSION_DEAL_SEED": "e2e",
    "BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS": "0.1",
    "BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS": "0.5",
    "BURACO_MATCHMAKING_TICK_SECONDS": "0.05",
    "BURACO_MATCHMAKING_WATCH_POLL_SECONDS": "0.1",
    "BURACO_MATCHMAKING_RETRY_SECONDS": "0.05",
    "BURACO_WALLET_STARTING_GRANT_CHIPS": "0",
    "BURACO_TOURNAMENT_TICK_SECONDS": "0.1",
    "BURACO_TOURNAMENT_POLL_SECONDS": "0.2",
    "BURACO_TOURNAMENT_RECONCILE_SECONDS": "0.5",
    "BURACO_TOURNAMENT_WATCH_POLL_SECONDS": "0.1",
    "BURACO_TOURNAMENT_RETRY_SECONDS": "0.1",
    "BURACO_TOURNAMENT_SEEDING_WAIT_SECONDS": "5",
    # Results come from the game sessions' reports (their outbox): the tournament's own reading of a
    # finished table, the fallback for a lost report, waits longer than any of these tests.
    "BURACO_TOURNAMENT_RESULT_GRACE_SECONDS": "600",
}
SERVICES = ("wallet", "ranking", "game_session", "matchmaking")


@dataclass
class Suite:
    processes: dict[str, ServiceProcess]
    minter: Minter
    db_target: DatabaseTarget
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    def address(self, name: str) -> str:
        return self.processes[name].address

    def _channel(self, name: str) -> grpc.aio.Channel:
        channel = grpc.aio.insecure_channel(self.address(name))
        self.channels.append(channel)
        return channel

    def __post_init__(self) -> None:
        self.wallet = wallet_pb2_grpc.WalletServiceStub(self._channel("wallet"))
        self.ranking = ranking_pb2_grpc.RankingServiceStub(self._channel("ranking"))
        self.tables = game_session_pb2_grpc.GameSessionServiceStub(self._channel("game_session"))
        self.matchmaking = matchmaking_pb2_grpc.MatchmakingServiceStub(self._channel("matchmaking"))
        if "tournament" in self.processes:
            self.tournaments = tournament_pb2_grpc.TournamentServiceStub(self._channel("tournament"))

    # identities
    def player(self, name: str) -> Metadata:
        return bearer(self.minter.mint(Kind.PLAYER, name))

    def token(self, name: str) -> str:
        return self.minter.mint(Kind.PLAYER, name)

    def admin(self) -> Metadata:
        return bearer(self.minter.mint(Kind.ADMIN, "operator"))

    # the wallet
    async def fund(self, player: str, chips: int) -> None:
        await self.wallet.CreateAccount(
            wallet_pb2.CreateAccountRequest(request_id=f"open-{player}", player=f"players/{player}"),
            metadata=self.admin(),
        )
        await self.wallet.Grant(
            wallet_pb2.GrantRequest(
                request_id=f"grant-{player}",
                player=f"players/{player}",
                amount_chips=chips,
                kind=wallet_pb2.GrantRequest.KIND_STARTING,
            ),
            metadata=self.admin(),
        )

    async def account(self, name: str) -> wallet_pb2.Account:
        reply: wallet_pb2.Account = await self.wallet.GetAccount(
            wallet_pb2.GetAccountRequest(name=name), metadata=self.admin()
        )
        return reply

    async def balance(self, player: str) -> tuple[int, int]:
        """(balance, held) of a player's account."""
        account = await self.account(f"accounts/player-{player}")
        return account.balance_chips, account.held_chips

    async def until_settled(self, players: list[str], timeout: float = WAIT_SECONDS) -> dict[str, int]:
        """Waits until no chips of `players` are held any more (the match's outbox reached the
        wallet), then returns their balances. The wallet has no stream to follow: this polls."""
        async with asyncio.timeout(timeout):
            while True:
                accounts = {p: await self.balance(p) for p in players}
                if all(held == 0 for _, held in accounts.values()):
                    return {p: balance for p, (balance, _) in accounts.items()}
                await asyncio.sleep(0.05)

    async def audit(self) -> None:
        """The wallet's ledger audit on its database: every transfer's two legs balance, every
        account's balance is the sum of its entries, no pot is left open."""
        env = self.processes["wallet"].env
        database = Database(
            normalise_database_url(env["BURACO_DATABASE_URL"]), schema=env.get("BURACO_DATABASE_SCHEMA")
        )
        try:
            report = await run_audit(database)
        finally:
            await database.dispose()
        assert report.ok, report.problems

    # ranking
    async def profile(self, player: str) -> ranking_pb2.PlayerProfile:
        reply: ranking_pb2.PlayerProfile = await self.ranking.GetPlayer(
            ranking_pb2.GetPlayerRequest(name=f"players/{player}"), metadata=self.player(player)
        )
        return reply

    async def until_recorded(
        self, player: str, matches: int, timeout: float = WAIT_SECONDS
    ) -> ranking_pb2.PlayerProfile:
        async with asyncio.timeout(timeout):
            while True:
                profile = await self.profile(player)
                if profile.stats.matches >= matches:
                    return profile
                await asyncio.sleep(0.05)

    async def xp_leaderboard(self) -> list[ranking_pb2.LeaderboardEntry]:
        board = ranking_pb2.Leaderboard(
            scope=ranking_pb2.Leaderboard.SCOPE_GLOBAL,
            period=ranking_pb2.Leaderboard.PERIOD_ALL_TIME,
            metric=ranking_pb2.Leaderboard.METRIC_XP,
        )
        reply = await self.ranking.ListLeaderboardEntries(
            ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=board), metadata=self.admin()
        )
        return list(reply.entries)

    # matchmaking
    async def until_matched(self, ticket: matchmaking_pb2.Ticket, player: str) -> matchmaking_pb2.MatchAssignment:
        """Follows the ticket's stream, confirming the proposed match, until the player is seated."""
        metadata = self.player(player)
        confirmed = False
        async with asyncio.timeout(WAIT_SECONDS):
            async for update in self.matchmaking.WatchTicket(
                matchmaking_pb2.WatchTicketRequest(name=ticket.name), metadata=metadata
            ):
                if update.state == matchmaking_pb2.Ticket.STATE_PROPOSED and not confirmed:
                    await self.matchmaking.ConfirmTicket(
                        matchmaking_pb2.ConfirmTicketRequest(name=ticket.name, request_id=f"confirm-{ticket.name}"),
                        metadata=metadata,
                    )
                    confirmed = True
                elif update.state == matchmaking_pb2.Ticket.STATE_MATCHED:
                    return update.assignment
                elif update.state in (matchmaking_pb2.Ticket.STATE_FAILED, matchmaking_pb2.Ticket.STATE_CANCELLED):
                    raise AssertionError(f"{ticket.name}: {update.failure_reason or 'cancelled'}")
        raise AssertionError(f"{ticket.name}: the stream ended before the match")

    # game sessions
    async def rules_of(self, table: str, player: str) -> Any:
        reply = await self.tables.GetTable(game_session_pb2.GetTableRequest(name=table), metadata=self.player(player))
        return ruleset_for(reply.options)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close(None)


def _database_env(db_target: DatabaseTarget, tmp_path: Path, name: str) -> dict[str, str]:
    if db_target.kind == "sqlite":  # one file per service: SQLite has one writer at a time
        return {"BURACO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / name}.db"}
    return db_target.environment()



@contextlib.contextmanager
def _processes(
    db_target: DatabaseTarget, tmp_path: Path, names: tuple[str, ...], extra: dict[str, str]
) -> Iterator[dict[str, ServiceProcess]]:
    """Every process at once, on ports chosen beforehand so each knows the others' addresses."""
    ports = {name: free_port() for name in names}
    addresses = {f"BURACO_{name.upper()}_ADDRESS": f"127.0.0.1:{port}" for name, port in ports.items()}
    contexts = {
        name: service_process(
            name,
            tmp_path,
            env={
                **FAST_ENV,
                **extra,
                **addresses,
                **_database_env(db_target, tmp_path, name),
                "BURACO_PORT": str(ports[name]),
                "BURACO_HEALTH_PORT": "0",
            },
        )
        for name in names
    }
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(len(names)) as pool:
            futures = {name: pool.submit(contexts[name].__enter__) for name in names}
        for name, future in futures.items():
            if future.exception() is None:
                stack.push(contexts[name].__exit__)  # stopped at the end, even when another failed
        yield {name: future.result() for name, future in futures.items()}


@contextlib.asynccontextmanager
async def suite(
    db_target: DatabaseTarget, tmp_path: Path, names: tuple[str, ...] = SERVICES, **extra: str
) -> AsyncIterator[Suite]:
    with _processes(db_target, tmp_path, names, dict(extra)) as processes:
        running = Suite(processes, dev_minter(tmp_path / "dev-keys"), db_target)
        try:
            yield running
        finally:
            await running.close()

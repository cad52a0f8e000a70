"""The ledger under concurrency on PostgreSQL: hundreds of simultaneous holds, settlements and
voids on the same few accounts from many connections, duplicates of the same request racing each
other, a settlement racing an annulment; a real deadlock, which is retried; and a load-test run
erased (twice at once) amid other players' traffic."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import grpc
import pytest
from sqlalchemy import func, select

from buraco.v1 import common_pb2, wallet_pb2
from services.common.db import Database
from services.common.errors import ServiceError
from services.wallet import models, records
from services.wallet.pg_store import PgStore
from services.wallet.settings import WalletSettings
from services.wallet.store import Batch, Claimed, ClaimRequest, Store
from services.wallet.transactions import Transactions
from tests.services.wallet.conftest import GAME, SERVICE, Ledger, fresh_schema, make_ledger, migrated
from tests.services.wallet.test_erasure import KINDS, erase

PLAYERS = 12
START = 1000
MATCHES = 300
CONNECTIONS = 40


@pytest.fixture
async def pg(postgres_url: str) -> AsyncIterator[Database]:
    async with fresh_schema(postgres_url, pool_size=CONNECTIONS, max_overflow=10) as db:
        yield db


@dataclass
class Played:
    stakes: list[tuple[str, int]]
    end: str  # settled, voided, refused
    side: int = 0
    first_seat: int = 0
    penalised: str | None = None


def expected_balances(played: list[Played]) -> tuple[dict[str, int], int]:
    """What every player and the house must hold, from the calls that succeeded."""
    balances = {f"p{i}": START for i in range(PLAYERS)}
    house = 0
    for match in played:
        if match.end == "settled":
            pot = sum(a for _, a in match.stakes)
            cut = pot * 20 // 100
            winners = sorted(
                [(n, seat) for seat, (n, _) in enumerate(match.stakes) if seat % 2 == match.side],
                key=lambda w: (w[1] - match.first_seat) % 4,
            )
            share, odd = divmod(pot - cut, len(winners))
            for name, amount in match.stakes:
                balances[name] -= amount
            for i, (name, _) in enumerate(winners):
                balances[name] += share + (1 if i < odd else 0)
            house += cut
        elif match.end == "voided" and match.penalised is not None:
            penalty = dict(match.stakes)[match.penalised]
            balances[match.penalised] -= penalty
            others = [n for n, _ in match.stakes if n != match.penalised]
            share, odd = divmod(penalty, len(others))
            for i, name in enumerate(others):
                balances[name] += share + (1 if i < odd else 0)
    return balances, house


async def play(ledger: Ledger, i: int, rng: random.Random) -> Played:
    names = rng.sample([f"p{k}" for k in range(PLAYERS)], 4)
    stakes = [(n, rng.randint(1, 60)) for n in names]
    hold = wallet_pb2.HoldBetsRequest(
        request_id=f"hold-{i}",
        match_id=f"m{i}",
        stakes=[wallet_pb2.Stake(player=f"players/{n}", amount_chips=a) for n, a in stakes],
    )
    duplicates = 2 if i % 5 == 0 else 1  # the same request twice at once: applied once, same answer
    replies = await asyncio.gather(*(ledger.call("HoldBets", hold) for _ in range(duplicates)), return_exceptions=True)
    for reply in replies:
        if isinstance(reply, ServiceError):
            assert reply.code == grpc.StatusCode.FAILED_PRECONDITION, reply.message
            assert "cannot cover" in reply.message
        elif isinstance(reply, BaseException):
            raise reply
    # An error is not remembered: a duplicate that ran after a refusal may have found the chips.
    held = [r for r in replies if not isinstance(r, BaseException)]
    if not held:
        return Played(stakes, "refused")
    assert all(r == held[0] for r in held)
    await asyncio.sleep(0)  # let the others interleave
    side, first_seat = rng.randint(0, 1), rng.randint(0, 3)
    settle = wallet_pb2.SettleRequest(
        request_id=f"settle-{i}",
        match_id=f"m{i}",
        first_seat=first_seat,
        outcomes=[
            common_pb2.PlayerOutcome(
                player=f"players/{n}",
                seat=seat,
                outcome=common_pb2.OUTCOME_WON if seat % 2 == side else common_pb2.OUTCOME_LOST,
            )
            for seat, (n, _) in enumerate(stakes)
        ],
    )
    penalised = names[1] if i % 7 == 0 else None
    void = wallet_pb2.VoidRequest(
        request_id=f"void-{i}", match_id=f"m{i}", penalised_players=[f"players/{penalised}"] if penalised else []
    )
    roll = rng.random()
    if roll < 0.6:
        await ledger.call("Settle", settle, GAME)
        return Played(stakes, "settled", side, first_seat)
    if roll < 0.8:
        await ledger.call("Void", void, SERVICE)
        return Played(stakes, "voided", penalised=penalised)
    # The game ends as matchmaking gives up on it: exactly one of the two wins.
    settled: object
    voided: object
    settled, voided = await asyncio.gather(
        ledger.call("Settle", settle, GAME), ledger.call("Void", void, SERVICE), return_exceptions=True
    )
    losers = [r for r in (settled, voided) if isinstance(r, BaseException)]
    assert len(losers) == 1, (settled, voided)
    assert isinstance(losers[0], ServiceError) and losers[0].code == grpc.StatusCode.FAILED_PRECONDITION
    assert "already" in losers[0].message
    if isinstance(voided, BaseException):
        return Played(stakes, "settled", side, first_seat)
    return Played(stakes, "voided", penalised=penalised)


async def test_hundreds_of_simultaneous_holds_and_settlements_on_the_same_accounts(pg: Database) -> None:
    ledger = make_ledger(pg, settings=WalletSettings(starting_grant_chips=START))
    await ledger.open(*(f"p{k}" for k in range(PLAYERS)))
    rng = random.Random(5)
    try:
        played = await asyncio.gather(*(play(ledger, i, rng) for i in range(MATCHES)))
    finally:
        await ledger.close()

    report = await ledger.audit()
    assert report.ok, report.problems
    assert report.minted == PLAYERS * START  # nothing minted but the grants
    balances, house = expected_balances(played)
    for name, balance in balances.items():
        account = await ledger.account(f"player-{name}")
        assert (account.balance_chips, account.held_chips) == (balance, 0), name
    assert await ledger.balance("house") == house
    succeeded = [p for p in played if p.end != "refused"]
    refused = len(played) - len(succeeded)
    assert succeeded and refused, "the test should see both covered and uncovered holds"
    async with pg.engine.connect() as conn:
        transfers = models.transfers
        holds = (await conn.execute(select(func.count()).where(transfers.c.phase == "pending"))).scalar_one()
        resolutions = (
            await conn.execute(select(func.count()).where(transfers.c.phase.in_(("post", "void", "expire"))))
        ).scalar_one()
        live = (await conn.execute(select(func.count()).select_from(models.live_holds))).scalar_one()
    assert (holds, resolutions, live) == (4 * len(succeeded), 4 * len(succeeded), 0)


async def test_a_deadlock_between_two_transactions_is_retried(pg: Database) -> None:
    """Two writers lock the same two rows in opposite orders: PostgreSQL aborts one (40P01) and
    `Transactions.write` runs it again, so both complete."""
    tx = Transactions(pg, retention=WalletSettings().idempotency_retention)
    both_locked_first = asyncio.Barrier(2)
    attempts = {"a": 0, "b": 0}

    def writer(name: str, first: str, second: str) -> Callable[[Store], Awaitable[str]]:
        async def work(store: Store) -> str:
            assert isinstance(store, PgStore)
            attempts[name] += 1
            await store.conn.execute("SET LOCAL deadlock_timeout = '100ms'")
            lock = "SELECT id FROM wallet_accounts WHERE id = $1 FOR UPDATE"
            await store.conn.execute(lock, first)
            if attempts[name] == 1:
                await both_locked_first.wait()
            await store.conn.execute(lock, second)
            return name

        return work

    results = await asyncio.gather(
        tx.write(writer("a", "house", "treasury")), tx.write(writer("b", "treasury", "house"))
    )
    await tx.close()
    assert sorted(results) == ["a", "b"]
    # at least the deadlock's victim ran again (on a loaded machine a retry can meet the other
    # writer once more and be retried again); every attempt beyond the first was a retry
    assert tx.retries >= 1 and max(attempts.values()) >= 2 and tx.retries == sum(attempts.values()) - 2


async def test_a_settlement_that_waited_for_the_pot_sees_the_holds_made_meanwhile(pg: Database) -> None:
    """The settlement's statement reads the pot's holds from a snapshot taken before it got the
    escrow's lock; a buy-in committed while it waited must still be paid out (read again)."""
    ledger = make_ledger(pg)
    await ledger.open("x", "y", "z")
    await ledger.call(
        "HoldBets",
        wallet_pb2.HoldBetsRequest(
            request_id="b1",
            tournament="tournaments/t",
            stakes=[wallet_pb2.Stake(player=f"players/{p}", amount_chips=100) for p in ("x", "y")],
        ),
    )
    dsn = pg.url.replace("postgresql+asyncpg://", "postgresql://", 1)
    late = await asyncpg.connect(dsn, server_settings={"search_path": pg.schema or "public"})
    before = PgStore.stale_reads
    try:
        buying = late.transaction()
        await buying.start()
        store = PgStore(late)
        wallet = ledger.api.wallet
        _, batch = await wallet.hold_bets(
            store, records.Caller("services/tournament"), "b2", records.Pot("tournament", "t"), [("z", 100)], None
        )
        await store.write(batch)  # z's buy-in is written, not committed: the escrow stays locked
        prizes = [wallet_pb2.Prize(player="players/x", place=1, share_bp=10_000)]
        settling = asyncio.ensure_future(
            ledger.call("Settle", wallet_pb2.SettleRequest(request_id="s", tournament="tournaments/t", prizes=prizes))
        )
        # Wait until the settlement is queued behind the buy-in's lock.
        while not await late.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'buraco-wallet' AND wait_event_type = 'Lock'"
        ):
            assert not settling.done(), settling
            await asyncio.sleep(0.005)
        await buying.commit()
        reply = await settling
    finally:
        await late.close()
        await ledger.close()
    assert reply.pot_chips == 300 and reply.house_cut_chips == 60
    assert PgStore.stale_reads == before + 1
    report = await ledger.audit()
    assert report.ok, report.problems
    assert report.live_holds == 0


async def test_a_claim_that_waited_for_the_same_request_id_gets_the_first_answer(pg: Database) -> None:
    """Two transactions claim one request id: the second waits on the first's uncommitted row; once
    the first commits its answer, the second gets that answer (its statement's snapshot predates the
    row, so the claim is asked again rather than read as an empty answer)."""
    await migrated(pg)
    dsn = pg.url.replace("postgresql+asyncpg://", "postgresql://", 1)
    settings = {"search_path": pg.schema or "public", "application_name": "claim-race"}
    first = await asyncpg.connect(dsn, server_settings=settings)
    second = await asyncpg.connect(dsn, server_settings=settings)
    now = datetime.now(UTC)
    request = ClaimRequest("services/game", "r-1", "Settle", "digest")
    try:
        writing = first.transaction()
        await writing.start()
        (mine,) = await PgStore(first).claim_many([request], now, now + timedelta(hours=1))
        assert mine.stored is None
        await PgStore(first).write(Batch(answers=[("services/game", "r-1", b"first answer")], now=now))

        async def claim_again() -> Claimed:
            async with second.transaction():
                (claimed,) = await PgStore(second).claim_many([request], now, now + timedelta(hours=1))
                return claimed

        waiting = asyncio.ensure_future(claim_again())
        while not await first.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'claim-race' AND wait_event_type = 'Lock'"
        ):
            assert not waiting.done(), waiting
            await asyncio.sleep(0.005)
        await writing.commit()
        theirs = await waiting
    finally:
        await first.close()
        await second.close()
    assert theirs.stored is not None and theirs.stored[2] == b"first answer"


RUN_PLAYERS = 40


async def cycle(ledger: Ledger, pair: tuple[str, str], n: int) -> tuple[str, str]:
    """A 2-player match of 10 chips each (the pair's players win in turn; the house cuts 4) and a
    promotion of 5 chips to its loser. Returns (winner, loser)."""
    winner, loser = pair if n % 2 == 0 else pair[::-1]
    match = f"{pair[0]}-{n}"
    await ledger.hold(f"h-{match}", match, {winner: 10, loser: 10})
    await ledger.settle(f"s-{match}", match, [(winner, 0, "won"), (loser, 1, "lost")])
    promotion = wallet_pb2.GrantRequest.KIND_PROMOTION
    await ledger.call(
        "Grant",
        wallet_pb2.GrantRequest(request_id=f"g-{match}", player=f"players/{loser}", amount_chips=5, kind=promotion),
    )
    return winner, loser


async def test_a_run_erased_amid_other_players_traffic(pg: Database) -> None:
    """Run lt1's 40 players (20 settled matches) are erased twice at once while 12 other players
    keep holding, settling and receiving grants, all of them sharing the house and the treasury
    with the erasures: every call succeeds, one erasure takes the whole run and the other finds
    nothing left, and the ledger adds up."""
    ledger = make_ledger(pg, settings=WalletSettings(starting_grant_chips=START))
    run = [f"lt1-{n}" for n in range(RUN_PLAYERS)]
    pairs = [(f"p{2 * n}", f"p{2 * n + 1}") for n in range(PLAYERS // 2)]
    balances = {f"p{n}": START for n in range(PLAYERS)}
    house = 0
    done = [0] * len(pairs)
    started = asyncio.Barrier(len(pairs) + 1)
    erased = asyncio.Event()

    async def traffic(index: int) -> None:
        nonlocal house
        while True:
            winner, loser = await cycle(ledger, pairs[index], done[index])
            done[index] += 1
            balances[winner] += 6
            balances[loser] -= 5
            house += 4
            if done[index] == 1:
                await started.wait()
            # Two cycles at least while the erasures run (or after, should they be quicker).
            elif erased.is_set() and done[index] >= 3:
                return

    async def erasing() -> list[dict[str, int]]:
        await started.wait()
        try:
            return list(await asyncio.gather(erase(ledger, "lt1", "e-1"), erase(ledger, "lt1", "e-2")))
        finally:
            erased.set()

    try:
        await ledger.open(*run, *balances)
        matches = range(RUN_PLAYERS // 2)
        await asyncio.gather(*(ledger.hold(f"h-r{n}", f"r{n}", {run[2 * n]: 10, run[2 * n + 1]: 10}) for n in matches))
        await asyncio.gather(
            *(ledger.settle(f"s-r{n}", f"r{n}", [(run[2 * n], 0, "won"), (run[2 * n + 1], 1, "lost")]) for n in matches)
        )
        results, _ = await asyncio.gather(erasing(), asyncio.gather(*(traffic(i) for i in range(len(pairs)))))
    finally:
        await ledger.close()
    # 40 starting grants; per match 2 holds, 2 postings, the payout, the house's cut.
    whole = {"accounts": RUN_PLAYERS, "escrows": RUN_PLAYERS // 2, "transfers": 40 + 20 * 6, "grant_claims": 40}
    assert sorted(results, key=lambda counts: counts["accounts"]) == [dict.fromkeys(KINDS, 0), whole]
    report = await ledger.audit()
    assert report.ok, report.problems
    assert report.minted == PLAYERS * START + 5 * sum(done)
    assert report.accounts == 2 + PLAYERS + sum(done)  # the house, the treasury, the players, their pots
    for name, balance in balances.items():
        assert await ledger.balance(f"player-{name}") == balance, name
    assert await ledger.balance("house") == house

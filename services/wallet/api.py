"""The wallet service's gRPC API: a thin servicer (read the caller, check the input,
call core inside an (idempotent) transaction, build the reply; errors are mapped by the server
pipeline).

Who may call what: players read their own account and statement and open their own account;
services and admins read any account; chips move only at the request of the services that move
them in this codebase (`CALLERS`, docs/contracts.md "Who may call what"); only admins grant
(Grant), correct (AdminCorrection) and erase a load-test run (EraseLoadTestRun). Every mutating
call is idempotent by (caller, request id).
"""

from __future__ import annotations

import calendar
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeAlias, TypeVar

import grpc
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy.ext.asyncio import AsyncConnection

from buraco.v1 import common_pb2, wallet_pb2, wallet_pb2_grpc
from services.common import loadtest_runs
from services.common import validation as check
from services.common.auth import ANY_SERVICE, Callers, Identity, Kind, allow, current_identity
from services.common.errors import InvalidArgumentError, PermissionDeniedError
from services.common.server import Deps
from services.wallet import core, records
from services.wallet.settings import MAX_CHIPS, WalletSettings
from services.wallet.store import Batch, Store
from services.wallet.transactions import Clock, Transactions, utc_now

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
R = TypeVar("R", bound=Message)
log = logging.getLogger("buraco.wallet")

MAX_MATCH_STAKES = core.MAX_MATCH_STAKES
MAX_TOURNAMENT_STAKES = 1024
MAX_NOTE = 500
STATEMENT_PAGE = 50
STATEMENT_PAGE_MAX = 500

_STATE = {
    "single": wallet_pb2.Transfer.STATE_POSTED,
    "pending": wallet_pb2.Transfer.STATE_PENDING,
    "post": wallet_pb2.Transfer.STATE_POSTED,
    "void": wallet_pb2.Transfer.STATE_VOIDED,
    "expire": wallet_pb2.Transfer.STATE_EXPIRED,
}
_REASON = {
    "grant": wallet_pb2.REASON_CODE_GRANT,
    "bet": wallet_pb2.REASON_CODE_BET,
    "settle": wallet_pb2.REASON_CODE_SETTLE,
    "house_cut": wallet_pb2.REASON_CODE_HOUSE_CUT,
    "refund": wallet_pb2.REASON_CODE_REFUND,
    "penalty": wallet_pb2.REASON_CODE_PENALTY,
    "correction": wallet_pb2.REASON_CODE_CORRECTION,
}
_KIND = {
    "player": wallet_pb2.Account.KIND_PLAYER,
    "house": wallet_pb2.Account.KIND_HOUSE,
    "treasury": wallet_pb2.Account.KIND_TREASURY,
    "escrow": wallet_pb2.Account.KIND_ESCROW,
}
_POT_STATE = {
    "open": wallet_pb2.Account.POT_STATE_OPEN,
    "settled": wallet_pb2.Account.POT_STATE_SETTLED,
    "voided": wallet_pb2.Account.POT_STATE_VOIDED,
}
_OUTCOME: dict[int, records.Outcome] = {
    common_pb2.OUTCOME_WON: "won",
    common_pb2.OUTCOME_LOST: "lost",
    common_pb2.OUTCOME_ABANDONED: "abandoned",
}
_GRANT_KIND: dict[int, records.GrantKind] = {
    wallet_pb2.GrantRequest.KIND_STARTING: "starting",
    wallet_pb2.GrantRequest.KIND_DAILY_BONUS: "daily_bonus",
    wallet_pb2.GrantRequest.KIND_PROMOTION: "promotion",
}


# -- replies ----------------------------------------------------------------------------------


def _timestamp(moment: datetime) -> Timestamp:
    """An aware datetime as a Timestamp (directly: Timestamp.FromDatetime is slow)."""
    seconds = calendar.timegm(moment.utctimetuple())
    return Timestamp(seconds=seconds, nanos=moment.microsecond * 1000)


def account_pb(record: records.AccountRecord) -> wallet_pb2.Account:
    return wallet_pb2.Account(
        name=f"accounts/{record.id}",
        kind=_KIND[record.kind],
        balance_chips=record.balance,
        held_chips=record.held,
        incoming_chips=record.incoming,
        player=f"players/{record.player}" if record.player else "",
        create_time=_timestamp(record.created_at),
        update_time=_timestamp(record.updated_at),
        pot_state=_POT_STATE[record.pot_state] if record.pot_state else wallet_pb2.Account.POT_STATE_UNSPECIFIED,
    )


def transfer_pb(record: records.TransferRecord) -> wallet_pb2.Transfer:
    return wallet_pb2.Transfer(
        name=f"transfers/{record.id}",
        debit_account=f"accounts/{record.debit_account}",
        credit_account=f"accounts/{record.credit_account}",
        amount_chips=record.amount,
        reason=_REASON[record.reason],
        state=_STATE[record.phase],
        match_id=record.match_id or "",
        tournament=f"tournaments/{record.tournament}" if record.tournament else "",
        requested_by=record.requested_by,
        on_behalf_of=f"players/{record.on_behalf_of}" if record.on_behalf_of else "",
        note=record.note,
        create_time=_timestamp(record.created_at),
        balance_after_chips=record.balance_after or 0,
        pending_transfer=f"transfers/{record.pending_id}" if record.pending_id is not None else "",
        resolved_by=f"transfers/{record.resolved_by}" if record.resolved_by is not None else "",
        request_id=record.request_id,
    )


# -- checks -----------------------------------------------------------------------------------


def _account_id(name: str, field: str) -> str:
    """`accounts/{account}` with a well-formed account id (docs/contracts.md)."""
    check.require(name != "", field, "required")
    check.require(name.startswith("accounts/"), field, "must be a resource name `accounts/{account}`")
    account_id = name.removeprefix("accounts/")
    try:
        _, ref = records.parse_account_id(account_id)
    except ValueError:
        raise InvalidArgumentError(
            field, "the account id must be `player-{player}`, `house`, `treasury`, `match-{match}` or `tournament-{id}`"
        ) from None
    if ref is not None:
        check.identifier(ref, field)
    return account_id


def _pot(request: wallet_pb2.HoldBetsRequest | wallet_pb2.SettleRequest | wallet_pb2.VoidRequest) -> records.Pot:
    which = request.WhichOneof("pot")
    if which == "match_id":
        return records.Pot("match", check.identifier(request.match_id, "match_id"))
    if which == "tournament":
        return records.Pot("tournament", check.resource_id(request.tournament, "tournament", "tournaments"))
    raise InvalidArgumentError("match_id", "required: a match_id, or a tournament")


def _amount(value: int, field: str) -> int:
    check.require(value > 0, field, "must be positive")
    check.require(value <= MAX_CHIPS, field, f"at most {MAX_CHIPS}")
    return value


def _players(names: Any, field: str, maximum: int) -> list[str]:
    check.require(len(names) <= maximum, field, f"at most {maximum} players")
    players: list[str] = []
    for i, name in enumerate(names):
        player = check.player(name, f"{field}[{i}]")
        check.require(player not in players, f"{field}[{i}]", f"players/{player} appears twice")
        players.append(player)
    return players


def _ttl(request: wallet_pb2.HoldBetsRequest, maximum: timedelta) -> timedelta | None:
    if not request.HasField("hold_ttl"):
        return None
    seconds, nanos = request.hold_ttl.seconds, request.hold_ttl.nanos
    check.require(abs(nanos) < 1_000_000_000, "hold_ttl", "nanos must be below one second")
    check.require(seconds >= 0 and nanos >= 0 and seconds + nanos > 0, "hold_ttl", "must be positive")
    check.require(seconds <= maximum.total_seconds(), "hold_ttl", f"at most {maximum.total_seconds():.0f} seconds")
    ttl = timedelta(seconds=seconds, microseconds=nanos // 1000)
    check.require(ttl <= maximum, "hold_ttl", f"at most {maximum.total_seconds():.0f} seconds")
    check.require(ttl > timedelta(0), "hold_ttl", "must be at least a microsecond")
    return ttl


def _outcomes(request: wallet_pb2.SettleRequest) -> tuple[list[records.MatchOutcome], int]:
    count = len(request.outcomes)
    check.require(count in (2, 4), "outcomes", f"a match has 2 or 4 players, not {count}")
    check.require(len(request.prizes) == 0, "prizes", "only for a tournament")
    outcomes: list[records.MatchOutcome] = []
    seen: set[str] = set()
    for i, item in enumerate(request.outcomes):
        player = check.player(item.player, f"outcomes[{i}].player")
        check.require(player not in seen, f"outcomes[{i}].player", f"players/{player} appears twice")
        seen.add(player)
        check.require(0 <= item.seat < count, f"outcomes[{i}].seat", f"must be between 0 and {count - 1}")
        check.enum(item.outcome, f"outcomes[{i}].outcome", common_pb2.Outcome.DESCRIPTOR)
        if item.outcome == common_pb2.OUTCOME_VOID:
            raise InvalidArgumentError(f"outcomes[{i}].outcome", "a void match is annulled with Void, not settled")
        outcomes.append(records.MatchOutcome(player, item.seat, _OUTCOME[item.outcome]))
    seats = sorted(o.seat for o in outcomes)
    check.require(seats == list(range(count)), "outcomes", f"the seats must be 0 to {count - 1}, each once")
    winners = [o for o in outcomes if o.outcome == "won"]
    check.require(bool(winners), "outcomes", "no winner: settle needs one, or annul the match with Void")
    check.require(len({o.seat % 2 for o in winners}) == 1, "outcomes", "the winners must be on one side")
    check.require(request.HasField("first_seat"), "first_seat", "required for a match")
    first = check.int_range(request.first_seat, "first_seat", 0, count - 1)
    return outcomes, first


def _prizes(request: wallet_pb2.SettleRequest) -> list[records.PrizeShare]:
    check.require(len(request.outcomes) == 0, "outcomes", "only for a match")
    check.require(not request.HasField("first_seat"), "first_seat", "only for a match")
    check.require(1 <= len(request.prizes) <= MAX_TOURNAMENT_STAKES, "prizes", f"1 to {MAX_TOURNAMENT_STAKES}")
    prizes: list[records.PrizeShare] = []
    seen: set[str] = set()
    for i, item in enumerate(request.prizes):
        player = check.player(item.player, f"prizes[{i}].player")
        check.require(player not in seen, f"prizes[{i}].player", f"players/{player} appears twice")
        seen.add(player)
        check.int_range(item.place, f"prizes[{i}].place", 1, MAX_TOURNAMENT_STAKES)
        check.int_range(item.share_bp, f"prizes[{i}].share_bp", 1, 10_000)
        prizes.append(records.PrizeShare(player, item.place, item.share_bp))
    total = sum(p.share_bp for p in prizes)
    check.require(total == 10_000, "prizes", f"the shares must add up to 10000 basis points, not {total}")
    return prizes


# -- identity ---------------------------------------------------------------------------------

#: Who may call each method that moves chips: the services that call it (matchmaking holds and
#: voids a match's stakes; the game-session outbox settles and voids matches; tournaments hold,
#: void and pay buy-ins), and admins, who may move chips by hand. ExpireHolds only brings the
#: sweeper's work forward, so any service may. A player opens their own account (CreateAccount,
#: checked in the handler: the gateway calls it at sign-up with the player's token) and is never in
#: this table; no service opens accounts, since an account comes with the starting grant from the
#: treasury: a service that could open one for any name could mint chips.
CALLERS = Callers("WalletService", {
    "CreateAccount": allow(admins=True),
    "HoldBets": allow("matchmaking", "tournament", admins=True),
    "Settle": allow("game-session", "tournament", admins=True),
    "Void": allow("game-session", "matchmaking", "tournament", admins=True),
    "ExpireHolds": allow(ANY_SERVICE, admins=True),
    "Grant": allow(admins=True),
    "BatchGetAccounts": allow("matchmaking", admins=True),
})

#: Accounts per BatchGetAccounts call.
MAX_BATCH_ACCOUNTS = 1000


def _mover(method: str) -> tuple[Identity, records.Caller]:
    """The caller, if `CALLERS` lets it call `method`."""
    identity = CALLERS.require(method)
    return identity, records.Caller(identity.principal, identity.acting_for)


def _admin(method: str) -> tuple[Identity, records.Caller]:
    """Only admins correct balances and erase load-test runs (``method``: ``AdminCorrection``...)."""
    identity = current_identity()
    identity.require_kind(Kind.ADMIN, method=f"WalletService.{method}")
    return identity, records.Caller(identity.principal, identity.acting_for)


def _may_read(identity: Identity, account_id: str) -> None:
    if identity.kind is Kind.PLAYER and account_id != records.player_account(identity.name):
        raise PermissionDeniedError(f"{identity.principal} may read only accounts/{records.player_account(identity.name)}")


# -- the servicer -----------------------------------------------------------------------------


class WalletApi(wallet_pb2_grpc.WalletServiceServicer):
    def __init__(
        self, deps: Deps, settings: WalletSettings, *, clock: Clock = utc_now, transactions: Transactions | None = None
    ) -> None:
        self.deps = deps
        self.settings = settings
        self.tx = transactions or Transactions(deps.db, retention=settings.idempotency_retention, clock=clock,
                                                   pool_size=settings.asyncpg_pool_size)
        self.wallet = core.Wallet(settings, self.tx.clock)

    async def _once(
        self,
        identity: Identity,
        method: str,
        request: Message,
        response_type: type[R],
        plan: Callable[[Store], Awaitable[tuple[R, Batch]]],
        *,
        reserve: int = 0,
        escrow: str | None = None,
        batch_pots: list[str] | None = None,
        batch_players: Sequence[str] = (),
    ) -> R:
        """Runs `plan` idempotently; `reserve` (transfer ids) and `escrow` let the claim's own
        statement prepare them (one round trip fewer each); `batch_pots` (the pots it changes)
        lets the call share a transaction with concurrent ones (services.wallet.transactions),
        never one running beside another on the same `batch_players`."""
        return await self.tx.idempotent(
            scope=identity.principal,
            method=method,
            request=request,
            response_type=response_type,
            plan=plan,
            reserve=reserve,
            escrow=escrow,
            batch_pots=batch_pots,
            batch_accounts=[records.player_account(p) for p in batch_players],
        )

    async def GetAccount(self, request: wallet_pb2.GetAccountRequest, context: Context) -> wallet_pb2.Account:
        identity = current_identity()
        account_id = _account_id(request.name, "name")
        _may_read(identity, account_id)

        async def read(conn: AsyncConnection) -> wallet_pb2.Account:
            return account_pb(await self.wallet.get_account(conn, account_id))

        return await self.tx.read(read)

    async def BatchGetAccounts(
        self, request: wallet_pb2.BatchGetAccountsRequest, context: Context
    ) -> wallet_pb2.BatchGetAccountsResponse:
        CALLERS.require("BatchGetAccounts")
        ids = check.batch(request.names, "names", noun="account", maximum=MAX_BATCH_ACCOUNTS, parse=_account_id)

        async def read(conn: AsyncConnection) -> wallet_pb2.BatchGetAccountsResponse:
            found = await self.wallet.get_accounts(conn, ids)
            return wallet_pb2.BatchGetAccountsResponse(
                accounts=[account_pb(found[i]) for i in ids if i in found],
                missing=[f"accounts/{i}" for i in ids if i not in found],
            )

        return await self.tx.read(read)

    async def ListTransfers(
        self, request: wallet_pb2.ListTransfersRequest, context: Context
    ) -> wallet_pb2.ListTransfersResponse:
        identity = current_identity()
        account_id = _account_id(request.parent, "parent")
        _may_read(identity, account_id)
        size = check.page_size(request.page_size, default=STATEMENT_PAGE, maximum=STATEMENT_PAGE_MAX)
        token = check.page_token(request.page_token)
        before = token.get("before")
        if before is not None:
            check.require(
                type(before) is int and 0 < before < 2**63 and token.get("account") == account_id,
                "page_token",
                "not a page token of this statement",
            )

        async def read(conn: AsyncConnection) -> wallet_pb2.ListTransfersResponse:
            page = await self.wallet.statement(conn, account_id, size, before)
            next_token = (
                check.encode_page_token({"account": account_id, "before": page.next_before})
                if page.next_before is not None
                else ""
            )
            return wallet_pb2.ListTransfersResponse(
                transfers=[transfer_pb(t) for t in page.transfers], next_page_token=next_token
            )

        return await self.tx.read(read)

    async def CreateAccount(self, request: wallet_pb2.CreateAccountRequest, context: Context) -> wallet_pb2.Account:
        identity = current_identity()
        # a player opens their own account (the gateway does, at sign-up, with the player's token:
        # its key signs player tokens only), checked once the request names the account; anyone
        # else is checked before the request is read, as in every method
        if identity.kind is Kind.PLAYER:
            caller = records.Caller(identity.principal, None)
        else:
            identity, caller = _mover("CreateAccount")
        request_id = check.request_id(request.request_id)
        player = check.player(request.player, "player")
        if identity.kind is Kind.PLAYER and identity.name != player:
            raise PermissionDeniedError(f"{identity.principal} may open only players/{identity.name}'s account")

        async def plan(store: Store) -> tuple[wallet_pb2.Account, Batch]:
            account, batch = await self.wallet.open_account(store, caller, request_id, player)
            return account_pb(account), batch

        return await self._once(identity, "CreateAccount", request, wallet_pb2.Account, plan, reserve=1)

    async def HoldBets(self, request: wallet_pb2.HoldBetsRequest, context: Context) -> wallet_pb2.HoldBetsResponse:
        identity, caller = _mover("HoldBets")
        request_id = check.request_id(request.request_id)
        pot = _pot(request)
        maximum = MAX_MATCH_STAKES if pot.kind == "match" else MAX_TOURNAMENT_STAKES
        check.require(1 <= len(request.stakes) <= maximum, "stakes", f"1 to {maximum} stakes for a {pot.kind}")
        stakes: list[tuple[str, int]] = []
        seen: set[str] = set()
        for i, stake in enumerate(request.stakes):
            player = check.player(stake.player, f"stakes[{i}].player")
            check.require(player not in seen, f"stakes[{i}].player", f"players/{player} appears twice")
            seen.add(player)
            stakes.append((player, _amount(stake.amount_chips, f"stakes[{i}].amount_chips")))
        ttl = _ttl(request, self.settings.max_hold_ttl)

        async def plan(store: Store) -> tuple[wallet_pb2.HoldBetsResponse, Batch]:
            result, batch = await self.wallet.hold_bets(store, caller, request_id, pot, stakes, ttl)
            holds = [transfer_pb(t) for t in result.holds]
            return wallet_pb2.HoldBetsResponse(holds=holds, expire_time=_timestamp(result.expire_time)), batch

        # A match's holds (the hot path) may share a transaction; a tournament's buy-ins run alone.
        batch_pots = [pot.account] if pot.kind == "match" else None
        return await self._once(
            identity,
            "HoldBets",
            request,
            wallet_pb2.HoldBetsResponse,
            plan,
            reserve=len(stakes),
            escrow=pot.account,
            batch_pots=batch_pots,
            batch_players=[player for player, _ in stakes],
        )

    async def Settle(self, request: wallet_pb2.SettleRequest, context: Context) -> wallet_pb2.SettleResponse:
        identity, caller = _mover("Settle")
        request_id = check.request_id(request.request_id)
        pot = _pot(request)
        work: Callable[[Store], Awaitable[tuple[records.SettleResult, Batch]]]
        if pot.kind == "match":
            outcomes, first_seat = _outcomes(request)

            def work(store: Store) -> Awaitable[tuple[records.SettleResult, Batch]]:
                return self.wallet.settle_match(store, caller, request_id, pot.ref, outcomes, first_seat)

        else:
            prizes = _prizes(request)

            def work(store: Store) -> Awaitable[tuple[records.SettleResult, Batch]]:
                return self.wallet.settle_tournament(store, caller, request_id, pot.ref, prizes)

        async def plan(store: Store) -> tuple[wallet_pb2.SettleResponse, Batch]:
            result, batch = await work(store)
            reply = wallet_pb2.SettleResponse(
                transfers=[transfer_pb(t) for t in result.transfers],
                pot_chips=result.pot,
                house_cut_chips=result.house_cut,
            )
            return reply, batch

        if pot.kind == "match":  # the hot path: may share a transaction
            return await self._once(
                identity,
                "Settle",
                request,
                wallet_pb2.SettleResponse,
                plan,
                reserve=core.MATCH_ROWS,
                batch_pots=[pot.account],
                batch_players=[o.player for o in outcomes],
            )
        return await self._once(identity, "Settle", request, wallet_pb2.SettleResponse, plan)

    async def Void(self, request: wallet_pb2.VoidRequest, context: Context) -> wallet_pb2.VoidResponse:
        identity, caller = _mover("Void")
        request_id = check.request_id(request.request_id)
        pot = _pot(request)
        penalised = _players(request.penalised_players, "penalised_players", MAX_TOURNAMENT_STAKES)
        only = _players(request.players, "players", MAX_TOURNAMENT_STAKES)
        check.require(
            not (penalised and only), "penalised_players", "not with `players`: a penalty needs the whole pot voided"
        )
        reason = check.text(request.reason, "reason", max_length=MAX_NOTE, required=False)

        async def plan(store: Store) -> tuple[wallet_pb2.VoidResponse, Batch]:
            done, batch = await self.wallet.void(store, caller, request_id, pot, penalised, only, reason)
            return wallet_pb2.VoidResponse(transfers=[transfer_pb(t) for t in done]), batch

        reserve = core.MATCH_ROWS if pot.kind == "match" else 0
        return await self._once(identity, "Void", request, wallet_pb2.VoidResponse, plan, reserve=reserve)

    async def ExpireHolds(
        self, request: wallet_pb2.ExpireHoldsRequest, context: Context
    ) -> wallet_pb2.ExpireHoldsResponse:
        identity, caller = _mover("ExpireHolds")
        request_id = check.request_id(request.request_id)
        check.require(not (request.match_id and request.tournament), "tournament", "not together with match_id")
        pot: records.Pot | None = None
        if request.match_id:
            pot = records.Pot("match", check.identifier(request.match_id, "match_id"))
        elif request.tournament:
            pot = records.Pot("tournament", check.resource_id(request.tournament, "tournament", "tournaments"))

        async def plan(store: Store) -> tuple[wallet_pb2.ExpireHoldsResponse, Batch]:
            result, batch = await self.wallet.expire_holds(store, caller, request_id, pot)
            reply = wallet_pb2.ExpireHoldsResponse(expired=[transfer_pb(t) for t in result.expired], more=result.more)
            return reply, batch

        return await self._once(identity, "ExpireHolds", request, wallet_pb2.ExpireHoldsResponse, plan)

    async def Grant(self, request: wallet_pb2.GrantRequest, context: Context) -> wallet_pb2.Transfer:
        identity, caller = _mover("Grant")
        request_id = check.request_id(request.request_id)
        player = check.player(request.player, "player")
        check.enum(request.kind, "kind", wallet_pb2.GrantRequest.Kind.DESCRIPTOR)
        kind = _GRANT_KIND[request.kind]
        if kind == "daily_bonus" and request.amount_chips == 0:
            amount = 0  # the configured bonus
        else:
            amount = _amount(request.amount_chips, "amount_chips")
        note = check.text(request.note, "note", max_length=MAX_NOTE, required=False)

        async def plan(store: Store) -> tuple[wallet_pb2.Transfer, Batch]:
            transfer, batch = await self.wallet.grant(store, caller, request_id, player, amount, kind, note)
            return transfer_pb(transfer), batch

        return await self._once(identity, "Grant", request, wallet_pb2.Transfer, plan, reserve=1)

    async def AdminCorrection(
        self, request: wallet_pb2.AdminCorrectionRequest, context: Context
    ) -> wallet_pb2.Transfer:
        identity, caller = _admin("AdminCorrection")
        request_id = check.request_id(request.request_id)
        account_id = _account_id(request.account, "account")
        check.require(account_id != records.TREASURY, "account", "the treasury is the other side of every correction")
        check.require(request.amount_chips != 0, "amount_chips", "must not be zero")
        _amount(abs(request.amount_chips), "amount_chips")
        note = check.text(request.note, "note", max_length=MAX_NOTE)
        amount = request.amount_chips

        async def plan(store: Store) -> tuple[wallet_pb2.Transfer, Batch]:
            transfer, batch = await self.wallet.correct(store, caller, request_id, account_id, amount, note)
            return transfer_pb(transfer), batch

        return await self._once(identity, "AdminCorrection", request, wallet_pb2.Transfer, plan, reserve=1)

    async def EraseLoadTestRun(
        self, request: common_pb2.EraseLoadTestRunRequest, context: Context
    ) -> common_pb2.EraseLoadTestRunResponse:
        identity, caller = _admin("EraseLoadTestRun")
        request_id = check.request_id(request.request_id)
        run = loadtest_runs.run_id(request.run_id)
        dry_run = request.dry_run
        done: list[records.ErasureResult] = []

        async def plan(store: Store) -> tuple[common_pb2.EraseLoadTestRunResponse, Batch]:
            result, batch = await self.wallet.erase_run(store, caller, request_id, run, dry_run)
            done[:] = [result]  # the last attempt's is the one committed
            return loadtest_runs.response(run, dry_run, result.counts()), batch

        if dry_run:  # decides as the erasure would, under the same locks; writes nothing

            async def count(store: Store) -> common_pb2.EraseLoadTestRunResponse:
                reply, _ = await plan(store)
                return reply

            return await self.tx.write(count)
        reply = await self._once(identity, "EraseLoadTestRun", request, common_pb2.EraseLoadTestRunResponse, plan)
        if done:  # erased now, not a stored answer replayed
            result = done[0]
            log.info(
                "load-test run erased",
                extra={
                    "fields": {
                        "run_id": run,
                        "requested_by": identity.principal,
                        "request_id": request_id,
                        **dict(result.counts()),
                        "house_chips": result.house_chips,
                        "treasury_chips": result.treasury_chips,
                    }
                },
            )
        return reply

"""The wallet service's domain logic: the double-entry ledger's operations and their rules (who
may hold, settle, void, grant or correct what), with no grpc here. What they take and return is
in `records.py`; the rows a decision writes, and their effect on the balances, in `planning.py`.

Each mutating operation runs inside a transaction that `services.wallet.transactions` opened (and,
for the calls, made idempotent) and goes in three steps: read and lock what it needs through the
`store.Store`, decide (or raise one of the errors of `errors.py`, and the transaction rolls back
whole, so nothing is half-applied), and return its result with the `store.Batch` of every row it
writes (`planning.TransferPlan`); the caller writes the batch (with the stored answer) in one go.

The model (docs/wallet.md):
- An account's stored `balance` is the sum of its posted transfers (credits minus debits), `held`
  the sum of its live holds out, `incoming` the sum of its live holds in. They change in the same
  transaction as the transfer rows; the database refuses a balance below what is held on every
  account but the treasury (which goes negative: it mints the chips in circulation).
- A transfer is `single` (posted at once) or `pending` (a hold), later resolved exactly once by a
  `post`, `void` or `expire` row; rows are only ever inserted (and deleted only by the erasure of a
  load-test run, which removes a run as if it had never been: `erase_run`).
- Locks: the rows of the escrows and players a transaction changes are locked (FOR NO KEY UPDATE)
  in one global order, escrows then players, by id; the house and the treasury, the hot rows, are
  changed by the batch's last statement, so a transaction holds their lock only until its commit
  and never waits for anything while holding it. One order for everyone means no deadlock between
  wallet transactions (`transactions` retries anything else).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, func, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from services.common.loadtest_runs import is_run_player, like_prefix
from services.wallet import models, money
from services.wallet.errors import (
    AccountExistsError,
    AccountNotFoundError,
    BadRequestError,
    ErasureRefusedError,
    GrantRefusedError,
    HoldStateError,
    InsufficientChipsError,
    PotClosedError,
    TooMuchContentionError,
    WrongAccountKindError,
)
from services.wallet.planning import TransferPlan
from services.wallet.records import (
    HOUSE,
    POSTED_PHASES,
    TREASURY,
    AccountRecord,
    Caller,
    ErasureResult,
    ExpireResult,
    GrantKind,
    HoldResult,
    MatchOutcome,
    Pot,
    PrizeShare,
    SettleResult,
    Statement,
    TransferRecord,
    parse_account_id,
    player_account,
)
from services.wallet.settings import WalletSettings
from services.wallet.store import TRANSFER_COLUMNS, Batch, Erasure, Hold, Locked, Store, aware
from services.wallet.transactions import Clock, utc_now

MAX_MATCH_STAKES = 4
#: Transfer rows a match's settlement or void can write at most: 4 postings or releases, up to 4
#: payouts, the house's share. The claim reserves that many ids in its own statement.
MATCH_ROWS = 9
#: Holds expired per transaction (the ExpireHolds answer says when there are more).
EXPIRY_BATCH = 500
#: Who the background expiry sweep acts as.
SWEEPER = "services/wallet"
#: Times an erasure looks for its run's accounts again under the locks before giving up (ABORTED):
#: each pass locks what the one before found new.
ERASURE_PASSES = 4
#: Accounts a refusal's message names at most.
NAMED = 5

accounts = models.accounts
transfers = models.transfers


def _closed(pot: Pot, state: str | None) -> PotClosedError:
    return PotClosedError(f"{pot.describe()} was already {state}")


def _player_of(account_id: str) -> str:
    return account_id.removeprefix("player-")


def _record(row: Row[Any], **extra: Any) -> TransferRecord:
    values = {name: getattr(row, name) for name in TRANSFER_COLUMNS}
    values["created_at"] = aware(values["created_at"])
    if values["expires_at"] is not None:
        values["expires_at"] = aware(values["expires_at"])
    values.update(extra)
    return TransferRecord(**values)


def _account_record(row: Row[Any]) -> AccountRecord:
    return AccountRecord(
        id=row.id,
        kind=row.kind,
        player=row.player,
        balance=row.balance,
        held=row.held,
        incoming=row.incoming,
        pot_state=row.pot_state,
        created_at=aware(row.created_at),
        updated_at=aware(row.updated_at),
    )


# -- the wallet -------------------------------------------------------------------------------


class Wallet:
    """The ledger's operations."""

    def __init__(self, settings: WalletSettings, clock: Clock = utc_now) -> None:
        self.settings = settings
        self.clock = clock

    # -- reads (one snapshot, SQLAlchemy) ----------------------------------------------------------

    async def get_account(self, conn: AsyncConnection, account_id: str) -> AccountRecord:
        row = (await conn.execute(select(accounts).where(accounts.c.id == account_id))).first()
        if row is None:
            raise AccountNotFoundError(f"accounts/{account_id} does not exist")
        return _account_record(row)

    async def get_accounts(self, conn: AsyncConnection, account_ids: Sequence[str]) -> dict[str, AccountRecord]:
        """The accounts among `account_ids` that exist, by id (one statement)."""
        rows = await conn.execute(select(accounts).where(accounts.c.id.in_(list(account_ids))))
        return {row.id: _account_record(row) for row in rows}

    async def statement(self, conn: AsyncConnection, account_id: str, page_size: int, before: int | None) -> Statement:
        """A page of the account's transfers, newest first, with its balance after each
        (computed back from the stored balance, in the same snapshot)."""
        account = await self.get_account(conn, account_id)
        limit = page_size + 1
        legs = []
        for side in (transfers.c.debit_account, transfers.c.credit_account):
            leg = select(*transfers.c).where(side == account_id)
            if before is not None:
                leg = leg.where(transfers.c.id < before)
            legs.append(leg.order_by(transfers.c.id.desc()).limit(limit).subquery().select())
        both = union_all(*legs).subquery()
        rows = (await conn.execute(select(both).order_by(both.c.id.desc()).limit(limit))).all()
        more = len(rows) > page_size
        rows = rows[:page_size]
        # Posted balance after the newest row of the page: now, less what newer rows did.
        balance = account.balance - await self._posted_effect_since(conn, account_id, before)
        pending_ids = [row.id for row in rows if row.phase == "pending"]
        resolutions: dict[int, int] = {}
        if pending_ids:
            resolved = await conn.execute(
                select(transfers.c.pending_id, transfers.c.id).where(transfers.c.pending_id.in_(pending_ids))
            )
            resolutions = {row.pending_id: row.id for row in resolved}
        page: list[TransferRecord] = []
        for row in rows:
            page.append(_record(row, resolved_by=resolutions.get(row.id), balance_after=balance))
            if row.phase in POSTED_PHASES:
                balance -= row.amount if row.credit_account == account_id else -row.amount
        return Statement(page, rows[-1].id if more and rows else None)

    async def _posted_effect_since(self, conn: AsyncConnection, account_id: str, before: int | None) -> int:
        """What the posted transfers with id >= `before` did to the account's balance."""
        if before is None:
            return 0
        total = 0
        for side, sign in ((transfers.c.credit_account, 1), (transfers.c.debit_account, -1)):
            amount = (
                await conn.execute(
                    select(func.coalesce(func.sum(transfers.c.amount), 0)).where(
                        side == account_id, transfers.c.id >= before, transfers.c.phase.in_(POSTED_PHASES)
                    )
                )
            ).scalar_one()
            total += sign * int(amount)
        return total

    # -- accounts, grants and corrections ---------------------------------------------------------

    async def open_account(
        self, store: Store, caller: Caller, request_id: str, player: str
    ) -> tuple[AccountRecord, Batch]:
        """Opens `player`'s account with the configured starting grant (once)."""
        now = self.clock()
        account_id = player_account(player)
        if not await store.open_player(account_id, player, now):
            raise AccountExistsError(f"accounts/{account_id} is open already")
        account = Locked(account_id, "player", 0, 0, 0, None)
        plan = TransferPlan(caller, request_id, now, {account_id: account}, note="starting grant")
        grant = self.settings.starting_grant_chips
        if grant > 0:
            plan.add("single", TREASURY, account_id, grant, "grant", {})
        rows, batch = await plan.finish(store)
        if rows:
            batch.grant_claims.append((player, "starting", "", rows[0].id))
        return AccountRecord(account_id, "player", player, grant, 0, 0, None, now, now), batch

    async def grant(
        self,
        store: Store,
        caller: Caller,
        request_id: str,
        player: str,
        amount: int,
        kind: GrantKind,
        note: str,
    ) -> tuple[TransferRecord, Batch]:
        """Credits a player from the treasury. A starting grant once per player, a daily bonus once
        per player and UTC day (amount 0: the configured bonus)."""
        now = self.clock()
        account_id = player_account(player)
        period = ""
        if kind == "daily_bonus":
            bonus = self.settings.daily_bonus_chips
            if bonus == 0:
                raise GrantRefusedError("no daily bonus is configured (BURACO_WALLET_DAILY_BONUS_CHIPS=0)")
            if amount not in (0, bonus):
                raise BadRequestError("amount_chips", f"the daily bonus is {bonus} chips (or 0 for that)")
            amount = bonus
            period = now.date().isoformat()
        locked = await store.lock([account_id])
        if account_id not in locked:
            raise AccountNotFoundError(f"accounts/{account_id} does not exist (CreateAccount opens it)")
        # Under the account's lock, no concurrent grant of this player can slip in between.
        if kind != "promotion" and await store.has_grant_claim(player, kind, period):
            what = "the starting grant" if kind == "starting" else f"the daily bonus of {period} (UTC)"
            raise GrantRefusedError(f"players/{player} has already received {what}")
        plan = TransferPlan(caller, request_id, now, locked, note=note or kind.replace("_", " "))
        plan.add("single", TREASURY, account_id, amount, "grant", {})
        (transfer,), batch = await plan.finish(store)
        if kind != "promotion":
            batch.grant_claims.append((player, kind, period, transfer.id))
        return transfer, batch

    async def correct(
        self, store: Store, caller: Caller, request_id: str, account_id: str, amount: int, note: str
    ) -> tuple[TransferRecord, Batch]:
        """An admin's correction between an account and the treasury (positive credits it)."""
        now = self.clock()
        kind, _ = parse_account_id(account_id)
        if kind == "escrow":
            raise WrongAccountKindError(
                f"accounts/{account_id}: an escrow changes only through HoldBets, Settle, Void and expiry"
            )
        # Locking the house here is still the global order: only the treasury comes after it.
        locked = await store.lock([account_id])
        if account_id not in locked:
            raise AccountNotFoundError(f"accounts/{account_id} does not exist")
        available = locked[account_id].available
        if amount < 0 and available < -amount:
            raise InsufficientChipsError(
                f"accounts/{account_id} has {available} chips available, fewer than the {-amount} to debit"
            )
        plan = TransferPlan(caller, request_id, now, locked, note=note)
        if amount > 0:
            plan.add("single", TREASURY, account_id, amount, "correction", {})
        else:
            plan.add("single", account_id, TREASURY, -amount, "correction", {})
        (transfer,), batch = await plan.finish(store)
        return transfer, batch

    # -- holds ----------------------------------------------------------------------------------

    async def hold_bets(
        self,
        store: Store,
        caller: Caller,
        request_id: str,
        pot: Pot,
        stakes: Sequence[tuple[str, int]],
        ttl: timedelta | None,
    ) -> tuple[HoldResult, Batch]:
        """One pending transfer per (player, amount) into the pot's escrow: all or none."""
        now = self.clock()
        expires_at = now + (ttl or self.settings.hold_ttl)
        escrow = pot.account
        created = await store.open_escrow(escrow, now)
        players = [player_account(player) for player, _ in stakes]
        existing: list[Hold] = []
        if created:  # a new pot: nothing else can see it yet, it has no holds
            locked = await store.lock([escrow, *players])
        else:
            locked, existing = await store.lock_pot(escrow, players)
        if locked[escrow].pot_state != "open":
            raise _closed(pot, locked[escrow].pot_state)
        for i, (player, amount) in enumerate(stakes):
            account = locked.get(player_account(player))
            if account is None:
                raise InsufficientChipsError(f"stakes[{i}].player: players/{player} has no account")
            if account.available < amount:
                raise InsufficientChipsError(
                    f"stakes[{i}].player: players/{player} cannot cover the stake of {amount} chips"
                    f" ({account.available} available)"
                )
        if not created:
            holding = {hold.account for hold in existing}
            for i, (player, _) in enumerate(stakes):
                if player_account(player) in holding:
                    raise HoldStateError(
                        f"stakes[{i}].player: players/{player} already has a live hold in {pot.describe()}"
                    )
            if pot.kind == "match" and len(holding) + len(stakes) > MAX_MATCH_STAKES:
                raise HoldStateError(
                    f"{pot.describe()} has {len(holding)} live stakes;"
                    f" {len(stakes)} more would exceed {MAX_MATCH_STAKES}"
                )
        plan = TransferPlan(caller, request_id, now, locked)
        for player, amount in stakes:
            plan.add("pending", player_account(player), escrow, amount, "bet", pot.tags(), expires_at=expires_at)
        holds, batch = await plan.finish(store)
        batch.add_holds = [Hold(h.id, escrow, h.debit_account, h.amount, expires_at) for h in holds]
        return HoldResult(holds, expires_at), batch

    async def _open_pot(self, store: Store, pot: Pot, players: Iterable[str]) -> tuple[dict[str, Locked], list[Hold]]:
        """Locks the pot's escrow (and the given players' accounts, which come after it in the
        lock order); returns them and the pot's live holds, read after the lock (so current).
        NOT_FOUND without a pot; FAILED_PRECONDITION when it is closed."""
        locked, holds = await store.lock_pot(pot.account, [player_account(p) for p in players])
        escrow = locked.get(pot.account)
        if escrow is None:
            raise AccountNotFoundError(f"{pot.describe()} has no pot (no stake was ever held for it)")
        if escrow.pot_state != "open":
            raise _closed(pot, escrow.pot_state)
        return locked, holds

    async def _lock_holders(self, store: Store, locked: dict[str, Locked], holds: Iterable[Hold]) -> None:
        """Locks the holds' player accounts not locked yet: they all come after the escrow in the
        lock order, and none was locked before, so the order holds."""
        missing = {hold.account for hold in holds} - locked.keys()
        if missing:
            locked.update(await store.lock(sorted(missing)))

    # -- settlement -------------------------------------------------------------------------------

    async def settle_match(
        self,
        store: Store,
        caller: Caller,
        request_id: str,
        match_id: str,
        outcomes: Sequence[MatchOutcome],
        first_seat: int,
    ) -> tuple[SettleResult, Batch]:
        """Posts every stake of the match into its escrow and pays it out: the house cut (rounded
        down), the rest split evenly among the winners (odd chips to the first in play order)."""
        now = self.clock()
        pot = Pot("match", match_id)
        locked, holds = await self._open_pot(store, pot, [o.player for o in outcomes])
        if not holds:
            raise HoldStateError(f"{pot.describe()} has no live stakes (expired or released)")
        held = {hold.account for hold in holds}
        named = {player_account(o.player) for o in outcomes}
        for i, o in enumerate(outcomes):
            if player_account(o.player) not in held:
                raise HoldStateError(f"outcomes[{i}].player: players/{o.player} has no live stake in {pot.describe()}")
        for hold in holds:
            if hold.account not in named:
                raise HoldStateError(
                    f"outcomes: players/{_player_of(hold.account)} has a stake in {pot.describe()} but no outcome"
                )
        total = sum(hold.amount for hold in holds)
        winners = [(player_account(o.player), o.seat) for o in outcomes if o.outcome == "won"]
        cut, payouts = money.match_payouts(total, self.settings.house_cut_percent, winners, first_seat, len(outcomes))
        return await self._pay_out(store, caller, request_id, now, locked, holds, pot, payouts, cut)

    async def settle_tournament(
        self, store: Store, caller: Caller, request_id: str, tournament: str, prizes: Sequence[PrizeShare]
    ) -> tuple[SettleResult, Batch]:
        """Posts every buy-in into the tournament's escrow and pays the prizes from the pool less
        the house cut (rounding: money.prize_payouts)."""
        now = self.clock()
        pot = Pot("tournament", tournament)
        locked, holds = await self._open_pot(store, pot, [])
        if not holds:
            raise HoldStateError(f"{pot.describe()} has no live buy-ins (expired or released)")
        held = {hold.account for hold in holds}
        for i, prize in enumerate(prizes):
            if player_account(prize.player) not in held:
                raise HoldStateError(
                    f"prizes[{i}].player: players/{prize.player} has no live buy-in in {pot.describe()}"
                )
        await self._lock_holders(store, locked, holds)
        total = sum(hold.amount for hold in holds)
        cut = money.house_cut(total, self.settings.house_cut_percent)
        payouts = money.prize_payouts(total - cut, [(player_account(p.player), p.place, p.share_bp) for p in prizes])
        return await self._pay_out(store, caller, request_id, now, locked, holds, pot, payouts, cut)

    async def _pay_out(
        self,
        store: Store,
        caller: Caller,
        request_id: str,
        now: datetime,
        locked: dict[str, Locked],
        holds: Sequence[Hold],
        pot: Pot,
        payouts: Sequence[tuple[str, int]],
        cut: int,
    ) -> tuple[SettleResult, Batch]:
        """Posts the holds into the escrow, pays `payouts` and `cut` out of it, closes the pot."""
        plan = TransferPlan(caller, request_id, now, locked)
        tags = pot.tags()
        for hold in holds:
            plan.add("post", hold.account, pot.account, hold.amount, "bet", tags, pending_id=hold.transfer_id)
        for account_id, amount in payouts:
            if amount:
                plan.add("single", pot.account, account_id, amount, "settle", tags)
        if cut:
            plan.add("single", pot.account, HOUSE, cut, "house_cut", tags)
        rows, batch = await self._close(store, plan, holds, pot, "settled")
        return SettleResult(rows, sum(hold.amount for hold in holds), cut), batch

    async def _close(
        self, store: Store, plan: TransferPlan, holds: Sequence[Hold], pot: Pot, state: str | None
    ) -> tuple[list[TransferRecord], Batch]:
        escrow = plan.locked[pot.account]
        if escrow.balance + escrow.d_balance != 0:  # every chip posted into the escrow leaves it
            raise AssertionError(f"{pot.account} would keep {escrow.balance + escrow.d_balance} chips")
        escrow.new_pot_state = state
        rows, batch = await plan.finish(store)
        batch.drop_holds = [hold.transfer_id for hold in holds]
        return rows, batch

    # -- annulment --------------------------------------------------------------------------------

    async def void(
        self,
        store: Store,
        caller: Caller,
        request_id: str,
        pot: Pot,
        penalised: Sequence[str],
        only: Sequence[str],
        reason: str,
    ) -> tuple[list[TransferRecord], Batch]:
        """Releases the stakes. With `only`, just those players' holds (the pot stays open);
        otherwise every hold, and the pot is closed. A penalised player's stake is posted and
        split evenly among the players whose stakes are returned (odd chips to the earliest held);
        with no one else, it goes to the house. No house cut on a void."""
        now = self.clock()
        locked, holds = await self._open_pot(store, pot, [])
        by_account = {hold.account: hold for hold in holds}
        for field_name, names in (("players", only), ("penalised_players", penalised)):
            for i, player in enumerate(names):
                if player_account(player) not in by_account:
                    raise HoldStateError(f"{field_name}[{i}]: players/{player} has no live stake in {pot.describe()}")
        affected = [by_account[player_account(p)] for p in only] if only else holds
        await self._lock_holders(store, locked, affected)
        plan = TransferPlan(caller, request_id, now, locked, note=reason)
        tags = pot.tags()
        penalised_accounts = {player_account(p) for p in penalised}
        returned = [hold for hold in affected if hold.account not in penalised_accounts]
        kept = [hold for hold in affected if hold.account in penalised_accounts]
        for hold in returned:
            plan.add("void", hold.account, pot.account, hold.amount, "refund", tags, pending_id=hold.transfer_id)
        for hold in kept:
            plan.add("post", hold.account, pot.account, hold.amount, "penalty", tags, pending_id=hold.transfer_id)
        penalty = sum(hold.amount for hold in kept)
        if penalty and returned:
            for account_id, amount in money.split_evenly(penalty, [hold.account for hold in returned]):
                if amount:
                    plan.add("single", pot.account, account_id, amount, "penalty", tags)
        elif penalty:
            plan.add("single", pot.account, HOUSE, penalty, "penalty", tags)
        return await self._close(store, plan, affected, pot, None if only else "voided")

    # -- expiry -----------------------------------------------------------------------------------

    async def expire_holds(
        self, store: Store, caller: Caller, request_id: str, pot: Pot | None
    ) -> tuple[ExpireResult, Batch]:
        """Expires up to EXPIRY_BATCH holds past their time (of one pot, or any)."""
        now = self.clock()
        if pot is not None and not await store.account_exists(pot.account):
            raise AccountNotFoundError(f"{pot.describe()} has no pot (no stake was ever held for it)")
        found = await store.due_holds(now, pot.account if pot is not None else None, EXPIRY_BATCH + 1)
        more = len(found) > EXPIRY_BATCH
        found = found[:EXPIRY_BATCH]
        locked = await store.lock([h.pot for h in found] + [h.account for h in found])
        # Under the locks the set is stable; another transaction may have resolved some meanwhile.
        current = await store.holds_by_id([h.transfer_id for h in found], now) if found else []
        plan = TransferPlan(caller, request_id, now, locked)
        for hold in current:
            tags = {"match_id": hold.match_id, "tournament": hold.tournament}
            plan.add("expire", hold.account, hold.pot, hold.amount, "refund", tags, pending_id=hold.transfer_id)
        rows, batch = await plan.finish(store)
        batch.drop_holds = [hold.transfer_id for hold in current]
        return ExpireResult(rows, more), batch

    # -- erasure of a load-test run ---------------------------------------------------------------

    async def erase_run(
        self, store: Store, caller: Caller, request_id: str, run: str, dry_run: bool
    ) -> tuple[ErasureResult, Batch]:
        """Erases a load-test run (docs/wallet.md, "Erasing a load-test run"): its players'
        accounts P, the escrows E their transfers touch, every transfer with a leg on P or E, the
        players' grant claims; the house's and the treasury's balances lose what those transfers
        had moved into them. Refused (ErasureRefusedError, nothing changed) when a transfer of the
        run has a leg on any other account but the house and the treasury, when a hold is live or
        a pot still open, or when the house would be left below zero. A dry run decides the same
        and writes nothing."""
        now = self.clock()
        players, pots, locked = await self._lock_run(store, run)
        player_accounts = [player_account(p) for p in players]
        erased = player_accounts + pots
        scope = await store.erasure_scope(erased, players)
        house, treasury = scope.system[HOUSE], scope.system[TREASURY]
        blockers: list[str] = []
        if scope.live_holds:
            blockers.append(f"{scope.live_holds} live hold(s) (stakes not settled, voided or expired yet)")
        still_open = [pot for pot in pots if locked[pot].pot_state == "open"]
        if still_open:
            blockers.append(f"{len(still_open)} pot(s) still open ({_named(still_open)}: settle or void them)")
        if scope.outside:
            blockers.append(
                f"{len(scope.outside)} account(s) outside the run share its pots or transfers"
                f" ({_named(scope.outside)})"
            )
        # The house's balance is read without its lock (it is changed last, as in every write):
        # should a correction lower it meanwhile, the database's no_overdraft check refuses the
        # write and nothing is erased.
        if scope.system_balances[HOUSE] < house:
            blockers.append(
                f"the house has {scope.system_balances[HOUSE]} chips, fewer than the {house} the run's pots paid it"
            )
        if blockers:
            raise ErasureRefusedError(f"run {run} cannot be erased: " + "; ".join(blockers))
        # Double entry: the chips the erased accounts hold are exactly what the house and the
        # treasury lose (only their balances: holds go from players to escrows, never from or to
        # them), so the ledger still sums to zero. Otherwise the ledger was inconsistent
        # before (the audit says where): erase nothing.
        kept = sum(locked[account].balance for account in erased)
        if kept + house + treasury != 0:
            raise AssertionError(
                f"run {run}: its accounts hold {kept} chips, but its transfers moved {house} into the house"
                f" and {treasury} into the treasury"
            )
        result = ErasureResult(len(players), len(pots), scope.transfers, scope.grant_claims, house, treasury)
        batch = Batch(now=now)
        if not dry_run:
            batch.erasure = Erasure(
                run=run,
                requested_by=caller.principal,
                request_id=request_id,
                at=now,
                players=players,
                accounts=player_accounts,
                escrows=pots,
                transfers=scope.transfers,
                grant_claims=scope.grant_claims,
                house_chips=house,
                treasury_chips=treasury,
                last_transfer=scope.last_transfer,
            )
            batch.system = {HOUSE: -house, TREASURY: -treasury}
        return result, batch

    async def _lock_run(self, store: Store, run: str) -> tuple[list[str], list[str], dict[str, Locked]]:
        """The run's players (those with an account: exactly `{run}-{n}`) and the escrows their
        transfers touch, locked to be deleted. They are found first and locked in the global order
        (escrows, then players), then found again under the locks: a transaction that committed
        in between may have opened a run player's account or held a stake into a new pot. What
        turns up new is locked in turn (after the others: should that meet a deadlock, PostgreSQL
        breaks it and the transaction runs again), until a pass finds nothing new. Once locked,
        no transfer of these accounts can be added: every write locks the accounts it changes."""
        locked: dict[str, Locked] = {}
        for _ in range(ERASURE_PASSES):
            players = [p for p in await store.run_players(like_prefix(run)) if is_run_player(run, p)]
            accounts = [player_account(p) for p in players]
            pots = await store.pots_of(accounts) if accounts else []
            new = [account for account in pots + accounts if account not in locked]
            if not new:
                return players, pots, locked
            locked.update(await store.lock_for_erasure(new))
        raise TooMuchContentionError(f"run {run} kept changing while it was being erased (is it still running?); retry")


def _named(accounts: Sequence[str]) -> str:
    """The first few of `accounts`, and how many more."""
    shown = ", ".join(f"accounts/{account}" for account in accounts[:NAMED])
    return shown + (f" and {len(accounts) - NAMED} more" if len(accounts) > NAMED else "")

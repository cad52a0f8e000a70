"""The start saga: from a proposed match (or a lobby table's start) to a game table with every
player told where it is, or, when any step fails, back to where everyone was
(docs/matchmaking.md, "The start saga").

States, each one durable in `matchmaking_sagas` before its effects are asked for:

    confirming ──► holding ──► creating ──► notifying ──► started
        │             │            │
        └─────────────┴────────────┴──────► compensating ──► failed

- confirming (quick match only): every player confirms before the deadline.
- holding: the wallet holds every player's bet in the match's escrow, all or none, with a TTL,
  request id `mm-hold-{saga}`: a retry (after a crash or a lost answer) never holds twice, and a
  hold nobody settles or voids expires on its own.
- creating: the game-session service creates table `tables/mm-{saga}` with the match id = the saga
  id, request id `mm-table-{saga}`.
- notifying: one transaction marks the tickets MATCHED (or the lobby table IN_MATCH) with the
  table's name and owner address, and the streams wake.
- compensating: cancel the table (following the owner redirect) if one was asked for, void the
  match's pot if a hold was asked for (`mm-cancel-{saga}`, `mm-void-{saga}`), then, in one
  transaction, fail the tickets of the players at fault and requeue the others at the front (the
  lobby table reopens).

A step that fails transiently is retried with backoff (same request ids) until the saga's deadline
(BURACO_MATCHMAKING_START_SECONDS), then compensated. Compensation retries until it is done.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from sqlalchemy import String, bindparam, delete, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2
from services.common.db import DriverStatement
from services.matchmaking import models
from services.matchmaking.core import Core, Executor, Preferences, aware, new_id
from services.matchmaking.matcher import Proposal
from services.matchmaking.metrics import MatchmakingMetrics
from services.matchmaking.ports import Refused, SeatSpec, Unreachable

log = logging.getLogger("buraco.matchmaking")

ACTIVE = ("confirming", "holding", "creating", "notifying", "compensating")
_STAKE = re.compile(r"stakes\[(\d+)\]")


#: A quick match's start made known in one statement (PostgreSQL), the whole of it only if the saga
#: was still in the state read (`expected`): the saga started with its table, its tickets MATCHED
#: with the table's name and address, their queue memberships ended, and each player's recent
#: opponents replaced (the rematch rule; `others` one JSON list per player). Returns 1 when it
#: started the saga, 0 when someone else had.
_NOTIFY_AT_ONCE = DriverStatement(text("""
    WITH s AS (
        UPDATE matchmaking_sagas
           SET state = 'started', game_table = :game_table, game_address = :game_address, update_time = :now
         WHERE id = :saga AND state = :expected
     RETURNING id
    ), t AS (
        UPDATE matchmaking_tickets
           SET state = 'matched', game_table = :game_table, game_address = :game_address,
               version = version + 1, update_time = :now
         WHERE id = ANY(CAST(:tickets AS text[])) AND EXISTS (SELECT 1 FROM s)
     RETURNING id
    ), q AS (
        DELETE FROM matchmaking_queue_members
         WHERE ticket_id = ANY(CAST(:tickets AS text[])) AND EXISTS (SELECT 1 FROM s)
     RETURNING player
    ), r AS (
        INSERT INTO matchmaking_recent (player, others, update_time)
        SELECT x.player, CAST(x.others AS json), :now
          FROM unnest(CAST(:players AS text[]), CAST(:others AS text[])) AS x(player, others)
         WHERE EXISTS (SELECT 1 FROM s)
        ON CONFLICT (player) DO UPDATE SET others = excluded.others, update_time = excluded.update_time
     RETURNING player
    )
    SELECT count(*) AS started FROM s
"""))  # PostgreSQL runs every data-modifying statement of a WITH to its end, read by the query or not


def _due(active: Any) -> Any:
    """The sagas due now (`now`) whose state is `active`, the most overdue first, `limit` of them."""
    s = models.sagas
    return select(s).where(active, s.c.next_attempt_at <= bindparam("now")).order_by(s.c.next_attempt_at).limit(
        bindparam("limit"))


_DUE_STATEMENT = _due(models.sagas.c.state.in_(ACTIVE))
#: the same for the driver, which takes no IN list: `= ANY` of an array
_DUE = DriverStatement(_due(models.sagas.c.state == func.any(bindparam("active", value=list(ACTIVE),
                                                                          type_=ARRAY(String)))))


@lru_cache(maxsize=64)
def _state_move(columns: frozenset[str]) -> DriverStatement:
    """A saga moved on from state `expected` (`saga_id`), writing `columns` (`v_<column>`), as one
    conditional statement (PostgreSQL); one row back when it moved it. One per set of columns
    written (a few: each step writes its own)."""
    s = models.sagas
    return DriverStatement(
        update(s)
        .where(s.c.id == bindparam("saga_id"), s.c.state == bindparam("expected"))
        .values({name: bindparam(f"v_{name}", type_=s.c[name].type) for name in sorted(columns)})
        .returning(s.c.id)
    )


def table_id_of(saga_id: str) -> str:
    return f"mm-{saga_id}"


def moved(saga: Any, values: dict[str, Any]) -> Any:
    """The saga's row as it is after a conditional write of `values` succeeded: the next step
    runs on it without reading the row again (the write was conditional on the state we held)."""
    fields = saga._asdict() if hasattr(saga, "_asdict") else vars(saga)
    return SimpleNamespace(**{**fields, **values})


def confirmed_values(saga: Any, start_seconds: float, now: datetime) -> dict[str, Any]:
    """What a quick match's saga becomes once every player has confirmed: it holds the bets (or,
    at a practice table, asks for the table), due now, with the start's own deadline. The table
    is asked for in the same step as the hold, with no write between: from here on a table may
    exist (`table_requested`)."""
    needs_hold = saga.bet_chips > 0
    return {
        "state": "holding" if needs_hold else "creating",
        "held": needs_hold,
        "table_requested": True,
        "deadline": now + timedelta(seconds=start_seconds),
        "next_attempt_at": now,
        "attempts": 0,
        "update_time": now,
    }


class Sagas:
    def __init__(self, core: Core, metrics: MatchmakingMetrics | None = None) -> None:
        self.core = core
        self.metrics = metrics if metrics is not None else MatchmakingMetrics()
        self.db = core.db
        self.platform = core.platform
        self.settings = core.settings
        self.clock = core.clock
        #: Tests: called with the step's name before each step's effect (fault injection).
        self.before_step: Callable[[str, str], None] = lambda step, saga: None

    # -- starting ---------------------------------------------------------------------------------

    async def propose(self, proposal: Proposal, waited: dict[str, float]) -> str | None:
        """Turns a matcher proposal into a saga in `confirming`; None when a ticket changed since
        the pass read it (cancelled, or taken by another replica's pass)."""
        return (await self.propose_many([proposal], waited))[0]

    async def propose_many(self, proposals: Sequence[Proposal], waited: dict[str, float]) -> list[str | None]:
        """`propose` for many, in one transaction of three statements whatever their number: the
        proposals' tickets read and locked (FOR UPDATE on PostgreSQL; SQLite has one writer), then
        the tickets of every proposal whose tickets are all still searching updated in one
        executemany, and their sagas inserted in another. A proposal with a ticket that changed
        since the pass read it (cancelled, or taken by another replica's pass) is dropped alone."""
        now = self.clock()
        deadline = now + timedelta(seconds=self.settings.confirm_seconds)
        t = models.tickets
        made: list[str | None] = []
        ticket_rows: list[dict[str, Any]] = []
        saga_rows: list[dict[str, Any]] = []
        async with self.db.write_connection() as session:
            wanted = [ticket for proposal in proposals for ticket in proposal.tickets]
            rows = {
                row.id: row
                for row in await session.execute(
                    select(t.c.id, t.c.state, t.c.version)
                    .where(t.c.id.in_(wanted))
                    .with_for_update()
                )
            }
            for proposal in proposals:
                current = [rows.get(ticket) for ticket in proposal.tickets]
                if any(row is None or row.state != "searching" for row in current):
                    made.append(None)
                    continue
                saga_id = new_id()
                made.append(saga_id)
                seat_of: dict[str, dict[str, int]] = {}
                for seat, (ticket, player) in enumerate(proposal.seats):
                    seat_of.setdefault(ticket, {})[player] = seat
                for row in current:
                    assert row is not None
                    ticket_rows.append(
                        {
                            "b_id": row.id,
                            "b_version": row.version,
                            "b_saga_id": saga_id,
                            "b_seat_of": seat_of[row.id],
                            "b_game_table": f"tables/{table_id_of(saga_id)}",
                            "b_wait_seconds": waited.get(row.id, 0.0),
                        }
                    )
                saga_rows.append(self._quick_saga(saga_id, proposal, now, deadline))
            if ticket_rows:
                await session.execute(
                    update(t)
                    .where(
                        t.c.id == bindparam("b_id", type_=t.c.id.type),
                        t.c.state == "searching",
                        t.c.version == bindparam("b_version", type_=t.c.version.type),
                    )
                    .values(
                        state="proposed",
                        saga_id=bindparam("b_saga_id", type_=t.c.saga_id.type),
                        confirmed=[],
                        seat_of=bindparam("b_seat_of", type_=t.c.seat_of.type),
                        confirm_deadline=deadline,
                        game_table=bindparam("b_game_table", type_=t.c.game_table.type),
                        game_address="",
                        wait_seconds=bindparam("b_wait_seconds", type_=t.c.wait_seconds.type),
                        version=t.c.version + 1,
                        update_time=now,
                    ),
                    ticket_rows,
                )
                await session.execute(insert(models.sagas), saga_rows)
        for proposal, made_id in zip(proposals, made, strict=True):
            if made_id is not None:
                self.core.notifier.changed(*(f"ticket:{ticket}" for ticket in proposal.tickets))
        return made

    def _quick_saga(self, saga_id: str, proposal: Proposal, now: datetime, deadline: datetime) -> dict[str, Any]:
        """The saga row of a proposed quick match: confirming until `deadline`."""
        preferences = Preferences(*proposal.key)
        return {
            "id": saga_id,
            "kind": "quick",
            "lobby_table": None,
            "state": "confirming",
            "seats": [{"player": p, "bot": 0, "ticket": tk} for tk, p in proposal.seats],
            "tickets": list(proposal.tickets),
            "options": preferences.table_options().SerializeToString(),
            "bet_chips": preferences.bet_chips if preferences.competitive else 0,
            "confirm_deadline": deadline,
            "deadline": deadline + timedelta(seconds=self.settings.start_seconds),
            "next_attempt_at": deadline,
            "attempts": 0,
            "held": False,
            "table_requested": False,
            "game_table": "",
            "game_address": "",
            "culprits": [],
            "failure_reason": "",
            "create_time": now,
            "update_time": now,
        }

    async def start_lobby(
        self, session: AsyncSession, lobby_id: str, seats: Sequence[SeatSpec], options: common_pb2.TableOptions
    ) -> str:
        """Begins a lobby table's match in `session` (the caller's transaction): confirmation is
        the players' readiness, so the saga starts at `holding`."""
        saga_id = new_id()
        now = self.clock()
        competitive = options.mode == common_pb2.TABLE_MODE_COMPETITIVE
        await session.execute(
            insert(models.sagas).values(
                id=saga_id,
                kind="lobby",
                lobby_table=lobby_id,
                state="holding" if competitive and options.bet_chips > 0 else "creating",
                seats=[{"player": s.player, "bot": s.bot, "ticket": None} for s in seats],
                tickets=[],
                options=options.SerializeToString(),
                bet_chips=options.bet_chips if competitive else 0,
                confirm_deadline=None,
                deadline=now + timedelta(seconds=self.settings.start_seconds),
                next_attempt_at=now,
                attempts=0,
                held=competitive and options.bet_chips > 0,
                table_requested=True,  # asked for in the hold's step (confirmed_values)
                game_table="",
                game_address="",
                culprits=[],
                failure_reason="",
                create_time=now,
                update_time=now,
            )
        )
        return saga_id

    # -- advancing --------------------------------------------------------------------------------

    async def due(self, limit: int = 100) -> list[str]:
        return [row.id for row in await self.due_rows(limit)]

    async def due_rows(self, limit: int = 100) -> list[Any]:
        """The rows of the sagas due now, the most overdue first (one query for a pass)."""
        if self.db.dialect == "postgresql":
            async with self.db.driver_connection() as driver:
                return await _DUE.fetch(driver, {"now": self.clock(), "limit": limit})
        async with self.db.read_each() as session:
            rows = await session.execute(_DUE_STATEMENT, {"now": self.clock(), "limit": limit})
            return list(rows)

    async def _load(self, saga_id: str) -> Any:
        async with self.db.read_each() as session:
            return (await session.execute(select(models.sagas).where(models.sagas.c.id == saga_id))).one()

    async def _set(self, saga: Any, expected: str, **values: Any) -> Any | None:
        """Moves the saga on from `expected` (a conditional write: nobody else moved it); returns
        its row as written, or None when someone else moved it first."""
        s = models.sagas
        values.setdefault("update_time", self.clock())
        if self.db.dialect == "postgresql":
            async with self.db.driver_connection() as driver:  # one conditional statement: atomic alone
                written = await _state_move(frozenset(values)).fetch(
                    driver, {"saga_id": saga.id, "expected": expected, **{f"v_{k}": v for k, v in values.items()}})
            return moved(saga, values) if len(written) == 1 else None
        async with self.db.write_each() as session:
            result = await session.execute(update(s).where(s.c.id == saga.id, s.c.state == expected).values(**values))
        return moved(saga, values) if getattr(result, "rowcount", 0) == 1 else None

    async def _retry_or_give_up(self, saga: Any, reason: str) -> Any | None:
        now = self.clock()
        if now >= aware(saga.deadline):
            return await self._set(saga, saga.state, state="compensating", failure_reason=reason, next_attempt_at=now)
        delay = min(self.settings.retry_seconds * 2**saga.attempts, self.settings.max_retry_seconds)
        return await self._set(
            saga, saga.state, attempts=saga.attempts + 1, next_attempt_at=now + timedelta(seconds=delay)
        )

    async def advance(self, saga_id: str) -> str:
        """Runs the saga's next step; returns the state it is in afterwards."""
        return await self.advance_row(await self._load(saga_id))

    async def advance_row(self, saga: Any) -> str:
        """`advance` from the saga's row as read (by `due_rows`). Each step returns the row as it
        wrote it, so the saga steps on without reading it again; a step that wrote nothing (the
        saga was moved elsewhere) is followed by a fresh read."""
        for _ in range(len(ACTIVE) + 1):  # step on while the next step is due now
            if saga.state not in ACTIVE or aware(saga.next_attempt_at) > self.clock():
                break
            after = await getattr(self, f"_{saga.state}")(saga)
            saga = after if after is not None else await self._load(saga.id)
        return str(saga.state)

    async def _confirming(self, saga: Any) -> Any | None:
        # One transaction with the saga row locked: a confirmation that lands meanwhile (it locks
        # the row too) is either seen here or comes after and makes the saga due again.
        now = self.clock()
        s = models.sagas
        async with self.db.write_connection() as session:
            current = (await session.execute(select(s).where(s.c.id == saga.id).with_for_update())).one()
            if current.state != "confirming":
                return None
            rows = (
                await session.execute(
                    select(models.tickets.c.players, models.tickets.c.confirmed).where(
                        models.tickets.c.id.in_(saga.tickets)
                    )
                )
            ).all()
            missing = sorted({p for players, confirmed in rows for p in players if p not in confirmed})
            values: dict[str, Any]
            if not missing:
                values = confirmed_values(current, self.settings.start_seconds, now)
            elif saga.confirm_deadline is not None and now >= aware(saga.confirm_deadline):
                values = {
                    "state": "compensating",
                    "culprits": missing,
                    "failure_reason": "not confirmed",
                    "next_attempt_at": now,
                }
            else:
                values = {"next_attempt_at": aware(saga.confirm_deadline)}
            values.setdefault("update_time", now)
            await session.execute(update(s).where(s.c.id == saga.id).values(**values))
        return moved(current, values)

    async def _holding(self, saga: Any) -> Any | None:
        stakes = [(seat["player"], int(saga.bet_chips)) for seat in saga.seats if seat["player"]]
        try:
            self.before_step("hold", saga.id)
            await self.platform.hold_bets(f"mm-hold-{saga.id}", saga.id, stakes, self.settings.hold_ttl_seconds)
        except Unreachable as error:
            log.warning("hold failed; retrying", extra={"fields": {"saga": saga.id, "error": str(error)}})
            return await self._retry_or_give_up(saga, "the wallet is unavailable")
        except Refused as refused:
            culprits: list[str] = []
            reason = f"the wallet refused the bets ({refused.code})"
            if refused.code == "FAILED_PRECONDITION":
                found = _STAKE.search(refused.message)
                if found is not None and int(found.group(1)) < len(stakes):
                    culprits = [stakes[int(found.group(1))][0]]
                reason = "insufficient chips"
            return await self._set(
                saga,
                "holding",
                state="compensating",
                culprits=culprits,
                failure_reason=reason,
                next_attempt_at=self.clock(),
            )
        # The table next, in this step: the row stays `holding` (a retry holds again, with the
        # same request id, which the wallet answers as the first time).
        return await self._creating(saga)

    async def _creating(self, saga: Any) -> Any | None:
        """Asks for the table, then notifies, from the saga's state (`holding` after the hold, or
        `creating`): a failure leaves that state to retry from, and both calls are answered as
        the first time on a retry (same request ids), so the row is written only once, at the end."""
        seats = [SeatSpec(seat["player"], int(seat["bot"])) for seat in saga.seats]
        try:
            self.before_step("table", saga.id)
            table = await self.platform.create_table(
                f"mm-table-{saga.id}", table_id_of(saga.id), saga.id, saga.options, seats, saga.lobby_table
            )
        except Unreachable as error:
            log.warning("table creation failed; retrying", extra={"fields": {"saga": saga.id, "error": str(error)}})
            return await self._retry_or_give_up(saga, "the game-session service is unavailable")
        except Refused as refused:
            return await self._set(
                saga,
                saga.state,
                state="compensating",
                failure_reason=f"the game-session service refused the table ({refused.code})",
                next_attempt_at=self.clock(),
            )
        return await self._notifying(moved(saga, {"game_table": table.name, "game_address": table.owner_address}))

    async def _notifying(self, saga: Any) -> Any | None:
        """The match started: the saga `started` with its table (from the state it is in), the
        tickets MATCHED (or the lobby table IN_MATCH), the players' last opponents remembered; one
        transaction (one statement for a quick match on PostgreSQL). `notifying` rows were written
        by earlier versions between the table and this step."""
        self.before_step("notify", saga.id)
        now = self.clock()
        t = models.tickets
        players = [seat["player"] for seat in saga.seats if seat["player"]]
        if self.db.dialect == "postgresql" and not saga.lobby_table:
            async with self.db.driver_connection() as driver:
                made = await _NOTIFY_AT_ONCE.fetchrow(driver, {
                    "saga": saga.id, "expected": saga.state, "now": now, "tickets": list(saga.tickets),
                    "game_table": saga.game_table, "game_address": saga.game_address, "players": players,
                    "others": [json.dumps([o for o in players if o != p]) for p in players],
                })
            if made is None or made.started != 1:
                return None
            self.metrics.started.inc()
            self._changed(saga)
            return moved(saga, {"state": "started", "update_time": now})
        async with self.db.write_connection() as session:
            started = await session.execute(
                update(models.sagas)
                .where(models.sagas.c.id == saga.id, models.sagas.c.state == saga.state)
                .values(state="started", game_table=saga.game_table, game_address=saga.game_address,
                        update_time=now)
            )
            if getattr(started, "rowcount", 0) != 1:
                return None
            if saga.tickets:
                await session.execute(
                    update(t)
                    .where(t.c.id.in_(saga.tickets))
                    .values(
                        state="matched",
                        game_table=saga.game_table,
                        game_address=saga.game_address,
                        version=t.c.version + 1,
                        update_time=now,
                    )
                )
                await session.execute(
                    delete(models.queue_members).where(models.queue_members.c.ticket_id.in_(saga.tickets))
                )
            await self._remember_opponents(session, players, now)
            if saga.lobby_table:
                lt = models.lobby_tables
                row = (await session.execute(select(lt.c.version, lt.c.seats).where(lt.c.id == saga.lobby_table))).one()
                seats = [{**seat, "ready": False, "rematch": False} for seat in row.seats]
                await session.execute(
                    update(lt)
                    .where(lt.c.id == saga.lobby_table)
                    .values(
                        state="in_match",
                        seats=seats,
                        game_table=saga.game_table,
                        game_address=saga.game_address,
                        match_id=saga.id,
                        version=row.version + 1,
                        update_time=now,
                    )
                )
        self.metrics.started.inc()
        self._changed(saga)
        return moved(saga, {"state": "started", "update_time": now})

    async def _remember_opponents(self, session: Executor, players: Sequence[str], now: datetime) -> None:
        r = models.recent
        await session.execute(delete(r).where(r.c.player.in_(players)))
        if players:
            await session.execute(
                insert(r),
                [{"player": p, "others": [o for o in players if o != p], "update_time": now} for p in players],
            )

    async def _compensating(self, saga: Any) -> Any | None:
        reason = saga.failure_reason or "the match could not start"
        try:
            self.before_step("compensate", saga.id)
            if saga.table_requested:
                try:
                    await self.platform.cancel_table(
                        f"mm-cancel-{saga.id}", f"tables/{table_id_of(saga.id)}", reason, saga.game_address
                    )
                except Refused as refused:
                    # A definitive no (the match started after all?): retrying cannot change it.
                    log.error(
                        "the table could not be cancelled", extra={"fields": {"saga": saga.id, "error": str(refused)}}
                    )
            if saga.held:
                try:
                    await self.platform.void_pot(f"mm-void-{saga.id}", saga.id, reason)
                except Refused as refused:
                    # The pot was settled or is unknown to the wallet: nothing of ours is held.
                    log.error(
                        "the holds could not be voided", extra={"fields": {"saga": saga.id, "error": str(refused)}}
                    )
        except Unreachable as error:
            # Keep trying: the holds expire on their own meanwhile, and a table nobody joins ends.
            log.warning("compensation failed; retrying", extra={"fields": {"saga": saga.id, "error": str(error)}})
            delay = min(self.settings.retry_seconds * 2**saga.attempts, self.settings.max_retry_seconds)
            return await self._set(
                saga,
                "compensating",
                attempts=saga.attempts + 1,
                next_attempt_at=self.clock() + timedelta(seconds=delay),
            )
        return await self._undo(saga, reason)

    async def _undo(self, saga: Any, reason: str) -> Any | None:
        """Fails the culprits' tickets, requeues the others at the front, reopens the lobby table."""
        now = self.clock()
        t = models.tickets
        culprits = set(saga.culprits)
        async with self.db.write_connection() as session:
            failed = await session.execute(
                update(models.sagas)
                .where(models.sagas.c.id == saga.id, models.sagas.c.state == "compensating")
                .values(state="failed", update_time=now)
            )
            if getattr(failed, "rowcount", 0) != 1:
                return None
            for ticket in saga.tickets:
                row = (await session.execute(select(t).where(t.c.id == ticket))).one()
                if row.state != "proposed" or row.saga_id != saga.id:
                    continue  # cancelled meanwhile
                common = {"saga_id": None, "confirm_deadline": None, "version": row.version + 1, "update_time": now}
                if culprits & set(row.players):
                    await session.execute(
                        update(t).where(t.c.id == ticket).values(state="failed", failure_reason=reason, **common)
                    )
                    await session.execute(
                        delete(models.queue_members).where(models.queue_members.c.ticket_id == ticket)
                    )
                else:
                    await session.execute(
                        update(t)
                        .where(t.c.id == ticket)
                        .values(
                            state="searching",
                            front=True,
                            confirmed=[],
                            seat_of={},
                            game_table="",
                            game_address="",
                            wait_seconds=None,
                            **common,
                        )
                    )
            if saga.lobby_table:
                lt = models.lobby_tables
                row = (
                    await session.execute(
                        select(lt.c.version, lt.c.seats, lt.c.onlookers).where(lt.c.id == saga.lobby_table)
                    )
                ).one()
                # The players at fault (who could not cover the bet) stand up; everyone is unready.
                seats = [
                    {"player": None, "bot": 0, "ready": False, "rematch": False}
                    if seat.get("player") in culprits
                    else {**seat, "ready": bool(seat.get("bot")), "rematch": False}
                    for seat in row.seats
                ]
                free = sum(1 for seat in seats if not seat.get("player") and not seat.get("bot"))
                onlookers = [*row.onlookers, *(p for p in saga.culprits if p not in row.onlookers)]
                await session.execute(
                    update(lt)
                    .where(lt.c.id == saga.lobby_table, lt.c.saga_id == saga.id)
                    .values(
                        state="open",
                        seats=seats,
                        free_seats=free,
                        onlookers=onlookers,
                        saga_id=None,
                        version=row.version + 1,
                        update_time=now,
                    )
                )
        log.info("match start compensated", extra={"fields": {"saga": saga.id, "reason": reason}})
        self.metrics.failed.inc()
        self._changed(saga)
        self.core.wake()
        return moved(saga, {"state": "failed", "update_time": now})

    def _changed(self, saga: Any) -> None:
        keys = [f"ticket:{ticket}" for ticket in saga.tickets]
        if saga.lobby_table:
            keys += [f"lobby:{saga.lobby_table}", "lobby"]
        self.core.notifier.changed(*keys)

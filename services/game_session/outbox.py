"""Delivering what match ends owe the wallet and ranking: the outbox.

A match end writes its calls (wallet Settle or Void, ranking RecordMatch, tournament
ReportMatchResult for a tournament's table) to
`game_session_outbox` in the transaction that ends the match. The deliverer (every replica runs
one) claims due rows, makes the calls with the match id as idempotency key, and marks them
delivered; a transient failure is retried with exponential backoff; a permanent refusal (bad
request, failed precondition, ...) marks the row failed for a person to look at
(`buraco_outbox_failed`). A crash between the call and the mark only means the call is made again,
and the target answers a repeated request id with its first answer: delivered exactly once.

Ranking's rows go together: the RecordMatch rows due in a round are delivered in calls of
RecordMatches (up to `RECORDS_PER_CALL` rows each, in row order), and each row is marked by its own
record's result exactly as its own RecordMatch call would have marked it (the request ids are the
rows' own, so a batch repeated after a crash is answered record by record). A ranking that does not
serve RecordMatches yet (UNIMPLEMENTED: it is older than this replica) gets the rows one by one.

A claim holds a row for `CLAIM_MS` and names its replica (`claimed_by`): a row claimed by a
replica that is gone (its heartbeat ran out, or another process now serves its address, as after
a restart) is taken at once rather than when the claim runs out, so a crash right after a match
ends does not hold up its settlement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, Gauge, Histogram
from sqlalchemy import and_, func, or_, select, update

from buraco.v1 import common_pb2, ranking_pb2, tournament_pb2, wallet_pb2
from services.client.channels import Clients
from services.common.db import Database
from services.game_session import models
from services.game_session.clock import Clock
from services.game_session.events import timestamp
from services.game_session.settings import GameSessionSettings

if TYPE_CHECKING:
    from services.game_session.log import Entry
    from services.game_session.table import LiveTable

log = logging.getLogger("buraco.game_session.outbox")

#: Calls a row may hold, and how each is made.
Call = Callable[[bytes], Awaitable[None]]


@dataclass(frozen=True)
class Refusal:
    """A call's (or one record's) failure status."""

    code: grpc.StatusCode
    details: str


#: Targets whose rows can go several in one call: the rows' requests -> each one's refusal (None:
#: delivered), in order; an exception fails the whole call (every row alike).
BatchCall = Callable[[Sequence[bytes]], Awaitable[list[Refusal | None]]]
#: Rows per batched call (the ranking's RecordMatches takes up to 100 records).
RECORDS_PER_CALL = 50
#: buckets of the delivery delay, in seconds (the settlement SLO reads the 30 s one)
DELAY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
TARGETS = ("wallet.Settle", "wallet.Void", "ranking.RecordMatch", "tournament.ReportMatchResult")
#: Codes that will not change on a retry: the row needs a person.
PERMANENT = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNIMPLEMENTED,
})
#: How long a claimed row is left to its deliverer before another may try it.
CLAIM_MS = 30_000


def outbox_requests(table: LiveTable, out: list[Entry], now_ms: int) -> list[tuple[str, bytes]]:
    """What a match end owes the other services: the tournament's ReportMatchResult for a
    tournament's table; wallet Settle (or Void) for a competitive match with stakes, ranking
    RecordMatch for a competitive match; nothing else for a practice table. The match id is every
    call's idempotency key. Bots are never reported: a seat's result belongs to its player."""
    ended = next((e for e in out if e.type == "match_ended"), None)
    if ended is None:
        return []
    x = ended.data.get("x", {})
    annulled = bool(x.get("annulled", False))
    outcomes = x["outcomes"]
    match_id = table.description.match_id
    owed: list[tuple[str, bytes]] = []
    player_outcomes = [
        common_pb2.PlayerOutcome(player=f"players/{o['player']}", seat=o["seat"], outcome=_OUTCOME[o["outcome"]])
        for o in outcomes
    ]
    if table.description.tournament:
        report = tournament_pb2.ReportMatchResultRequest(
            request_id=match_id, tournament=table.description.tournament, match_id=match_id,
            outcomes=player_outcomes, match_scores=table.match.totals,
        )
        owed.append(("tournament.ReportMatchResult", report.SerializeToString()))
    if not table.competitive:
        return owed
    won = any(o["outcome"] == "won" for o in outcomes)
    if table.options.bet_chips > 0 and outcomes:
        if annulled or not won:
            # annulled, or every player of the winning side abandoned (a bot won for them): the
            # stakes go back, except those of the players who abandoned, which go to the others
            # (to the house when everyone abandoned): the wallet's Void with penalties
            reason = (
                "match annulled by its players"
                if annulled
                else "no winner left at the table: every player of the winning side abandoned"
            )
            void = wallet_pb2.VoidRequest(
                request_id=match_id, match_id=match_id, reason=reason,
                penalised_players=[f"players/{o['player']}" for o in outcomes if o["player"] in _abandoned(table)],
            )
            owed.append(("wallet.Void", void.SerializeToString()))
        else:
            settle = wallet_pb2.SettleRequest(
                request_id=match_id, match_id=match_id, outcomes=player_outcomes,
                first_seat=(table.match.first_dealer + 1) % table.players,
            )
            owed.append(("wallet.Settle", settle.SerializeToString()))
    if outcomes:
        totals = table.match.totals
        record = ranking_pb2.RecordMatchRequest(
            request_id=match_id, match_id=match_id, options=table.options, annulled=annulled,
            end_time=timestamp(now_ms),
            participants=[
                ranking_pb2.RecordMatchRequest.Participant(
                    player=f"players/{o['player']}", seat=o["seat"], outcome=_OUTCOME[o["outcome"]],
                    score=totals[o["seat"] & 1],
                )
                for o in outcomes
            ],
        )
        owed.append(("ranking.RecordMatch", record.SerializeToString()))
    return owed


def _abandoned(table: LiveTable) -> set[str]:
    return {
        s.player for s in table.seats
        if s.player is not None and (s.abandoned or (s.bot_controlled and s.takeover_reason == "disconnected"))
    }


_OUTCOME = {
    "won": common_pb2.OUTCOME_WON,
    "lost": common_pb2.OUTCOME_LOST,
    "abandoned": common_pb2.OUTCOME_ABANDONED,
    "void": common_pb2.OUTCOME_VOID,
}


def grpc_calls(clients: Clients, timeout: float = 10.0) -> dict[str, Call]:
    async def settle(data: bytes) -> None:
        await clients.wallet.Settle(wallet_pb2.SettleRequest.FromString(data), timeout=timeout)

    async def void(data: bytes) -> None:
        await clients.wallet.Void(wallet_pb2.VoidRequest.FromString(data), timeout=timeout)

    async def record(data: bytes) -> None:
        await clients.ranking.RecordMatch(ranking_pb2.RecordMatchRequest.FromString(data), timeout=timeout)

    async def report(data: bytes) -> None:
        request = tournament_pb2.ReportMatchResultRequest.FromString(data)
        await clients.tournament.ReportMatchResult(request, timeout=timeout)

    return {"wallet.Settle": settle, "wallet.Void": void, "ranking.RecordMatch": record,
            "tournament.ReportMatchResult": report}


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def grpc_batch_calls(clients: Clients, timeout: float = 10.0) -> dict[str, BatchCall]:
    async def record_many(requests: Sequence[bytes]) -> list[Refusal | None]:
        batch = ranking_pb2.RecordMatchesRequest()
        for data in requests:
            batch.records.add().MergeFromString(data)
        reply = await clients.ranking.RecordMatches(batch, timeout=timeout)
        if len(reply.results) != len(requests):
            raise RuntimeError(f"RecordMatches answered {len(reply.results)} results for {len(requests)} records")
        return [
            None if result.HasField("recorded")
            else Refusal(_CODES.get(result.error.code, grpc.StatusCode.UNKNOWN), result.error.message)
            for result in reply.results
        ]

    return {"ranking.RecordMatch": record_many}


class Deliverer:
    def __init__(
        self,
        db: Database,
        calls: Mapping[str, Call],
        settings: GameSessionSettings,
        clock: Clock,
        registry: CollectorRegistry,
        *,
        owner_id: str = "",
        address: Callable[[], str] = lambda: "",
        batches: Mapping[str, BatchCall] | None = None,
    ) -> None:
        self.db = db
        self.calls = calls
        self.batches: Mapping[str, BatchCall] = batches or {}
        #: this replica (its claims), and its address (a claimant at it before it is gone)
        self.owner_id = owner_id
        self._address = address
        self.settings = settings
        self.clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.pending = Gauge("buraco_outbox_pending", "Outbox rows not yet delivered, by destination call.",
                             ["service", "target"], registry=registry)
        self.failed = Gauge("buraco_outbox_failed",
                            "Outbox rows the destination refused for good (a permanent error): they need a person.",
                            ["service", "target"], registry=registry)
        self.oldest = Gauge("buraco_outbox_oldest_pending_seconds",
                            "Age of the oldest undelivered outbox row (0 when none).", ["service"], registry=registry)
        # the settlement SLO's indicator (deploy/k8s/base/monitoring.yaml): from the row's creation,
        # in the transaction that ended the match, to its delivery
        self.delay = Histogram("buraco_outbox_delivery_delay_seconds",
                               "Time from an outbox row's creation (the match's end) to its delivery.",
                               ["service", "target"], buckets=DELAY_BUCKETS, registry=registry)
        for target in TARGETS:
            self.pending.labels("game_session", target).set(0)
            self.failed.labels("game_session", target).set(0)
            self.delay.labels("game_session", target)  # exported from the start, at zero
        self.oldest.labels("game_session").set(0)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="game-session-outbox")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.deliver_due()
                await self.refresh_gauges()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("outbox delivery round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(self.settings.outbox_retry_seconds, 1.0))

    def _now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    async def deliver_due(self) -> int:
        """Deliver every due row once; returns how many were delivered."""
        outbox, replicas = models.outbox, models.replicas
        now = self._now_ms()
        # the claimant still serves: its heartbeat holds, at an address no other process has taken
        claimant_serves = (
            select(replicas.c.owner_id)
            .where(replicas.c.owner_id == outbox.c.claimed_by, replicas.c.expires_ms >= now,
                   replicas.c.address != self._address())
            .exists()
        )
        abandoned = and_(outbox.c.claimed_by != "", outbox.c.claimed_by != self.owner_id, ~claimant_serves)
        async with self.db.read() as session:
            rows = (
                await session.execute(
                    select(outbox.c.id, outbox.c.target, outbox.c.request, outbox.c.attempts, outbox.c.next_attempt_ms,
                           outbox.c.claimed_by, outbox.c.created_ms)
                    .where(outbox.c.state == "pending", or_(outbox.c.next_attempt_ms <= now, abandoned))
                    .order_by(outbox.c.id)
                    .limit(100)
                )
            ).all()
        delivered = 0
        done: set[int] = set()
        for row in rows:  # in row order; a batched target's due rows go when its first row comes
            if row.id in done:
                continue
            if row.target in self.batches:
                group = [r for r in rows if r.target == row.target and r.id not in done][:RECORDS_PER_CALL]
                done.update(r.id for r in group)
                delivered += await self._deliver_batch(row.target, group, now)
            else:
                delivered += await self._deliver_one(row, now)
        return delivered

    async def _claim(self, rows: Sequence[Any], now: int) -> list[Any]:
        """Claim `rows` (one transaction), so that another replica's deliverer leaves them alone
        meanwhile; the rows whose claim held (unchanged since they were read)."""
        outbox = models.outbox
        claimed = []
        async with self.db.write() as session:
            for row in rows:
                result = await session.execute(
                    update(outbox)
                    .where(outbox.c.id == row.id, outbox.c.state == "pending",
                           outbox.c.next_attempt_ms == row.next_attempt_ms, outbox.c.claimed_by == row.claimed_by)
                    .values(next_attempt_ms=now + CLAIM_MS, claimed_by=self.owner_id)
                )
                if getattr(result, "rowcount", 0) == 1:
                    claimed.append(row)
        return claimed

    async def _deliver_one(self, row: Any, now: int) -> int:
        if not await self._claim([row], now):
            return 0
        outcome = await self._attempt(row)
        await self._mark([(row, outcome)], now)
        return int(outcome is None)

    async def _attempt(self, row: Any) -> Refusal | Exception | None:
        """One row's own call: None when delivered."""
        call = self.calls.get(row.target)
        try:
            if call is None:
                raise LookupError(f"no way to deliver {row.target}")
            await call(row.request)
        except grpc.aio.AioRpcError as error:
            return Refusal(error.code(), error.details() or "")
        except Exception as error:  # a bug or a missing target: keep it, retry later
            return error
        return None

    async def _deliver_batch(self, target: str, rows: Sequence[Any], now: int) -> int:
        claimed = await self._claim(rows, now)
        if not claimed:
            return 0
        outcomes: list[Refusal | Exception | None]
        try:
            refusals = await self.batches[target]([row.request for row in claimed])
            outcomes = list(refusals)
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.UNIMPLEMENTED and target in self.calls:
                outcomes = [await self._attempt(row) for row in claimed]  # an older target: one by one
            else:
                outcomes = [Refusal(error.code(), error.details() or "")] * len(claimed)
        except Exception as error:  # a bug: keep the rows, retry later
            outcomes = [error] * len(claimed)
        await self._mark(list(zip(claimed, outcomes, strict=True)), now)
        return sum(outcome is None for outcome in outcomes)

    async def _mark(self, outcomes: Sequence[tuple[Any, Refusal | Exception | None]], now: int) -> None:
        """Each row delivered, kept for a retry (with backoff) or failed for good, by its call's outcome
        (one transaction)."""
        marks = []
        for row, outcome in outcomes:
            state, error_text, next_ms = "delivered", "", now
            if outcome is None:
                self.delay.labels("game_session", row.target).observe(max(0, self._now_ms() - row.created_ms) / 1000)
            elif isinstance(outcome, Refusal):
                error_text = f"{outcome.code.name}: {outcome.details}"[:500]
                if outcome.code in PERMANENT:
                    state = "failed"
                else:
                    state = "pending"
                    delay = min(self.settings.outbox_max_retry_seconds,
                                self.settings.outbox_retry_seconds * 2 ** min(row.attempts, 20))
                    next_ms = self._now_ms() + int(delay * 1000)
            else:
                error_text = repr(outcome)[:500]
                state = "pending"
                next_ms = self._now_ms() + int(self.settings.outbox_max_retry_seconds * 1000)
            if state != "delivered":
                log.warning("outbox delivery failed",
                            extra={"fields": {"id": row.id, "target": row.target, "state": state, "error": error_text}})
            marks.append((row, state, error_text, next_ms))
        outbox = models.outbox
        async with self.db.write() as session:
            for row, state, error_text, next_ms in marks:
                await session.execute(
                    update(outbox).where(outbox.c.id == row.id).values(
                        state=state, attempts=row.attempts + 1, last_error=error_text, next_attempt_ms=next_ms
                    )
                )

    async def refresh_gauges(self) -> None:
        outbox = models.outbox
        async with self.db.read() as session:
            counts = (
                await session.execute(
                    select(outbox.c.target, outbox.c.state, func.count()).where(outbox.c.state != "delivered")
                    .group_by(outbox.c.target, outbox.c.state)
                )
            ).all()
            oldest = (
                await session.execute(select(func.min(outbox.c.created_ms)).where(outbox.c.state == "pending"))
            ).scalar()
        pending = dict.fromkeys(TARGETS, 0)
        failed = dict.fromkeys(TARGETS, 0)
        for target, state, count in counts:
            (pending if state == "pending" else failed)[target] = int(count)
        for target in TARGETS:
            self.pending.labels("game_session", target).set(pending[target])
            self.failed.labels("game_session", target).set(failed[target])
        self.oldest.labels("game_session").set(
            0 if oldest is None else max(0.0, (self._now_ms() - int(oldest)) / 1000)
        )

"""The game-session service's gRPC API: a thin servicer (read the caller, check the input, hand
the change to the manager, build the reply; errors are mapped by the server pipeline).

Who may call what: CreateTable and CancelTable, services only; actions, hints, annulment votes,
for the caller's own seat (the seat comes from the token, never from the request); Subscribe,
GetTable and GetTableSnapshot, the table's players, services and admins, and anyone where the
table allows spectators; ExportRecords, the table's players, services and admins.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeAlias

import grpc
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from engine.actions import DRAW, TAKE_PILE, Action, AddCards, Discard, MeldCards, add_action, meld_action
from engine.cards import format_many, parse, parse_many
from engine.errors import EngineError, IllegalActionError, MalformedError
from services.common import validation as check
from services.common.auth import Identity, Kind, current_identity
from services.common.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnavailableError,
    status_for,
)
from services.common.idempotency import IdempotencyStore, request_hash
from services.common.interceptor import UNDECODABLE, Refused
from services.common.server import Deps
from services.game_session import models, wire
from services.game_session import settings as settings_module
from services.game_session.clock import Clock, RealClock
from services.game_session.events import FINAL_TYPES
from services.game_session.log import Entry
from services.game_session.manager import Manager, Opening, StreamFailure, Subscriber
from services.game_session.outbox import Call, Deliverer, grpc_calls
from services.game_session.settings import GameSessionSettings
from services.game_session.table import LiveTable, State, ruleset_for, ruleset_spec

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
SERVICE = "buraco.v1.GameSessionService"
SERVICE_PATH = f"/{SERVICE}/"
CURRENT_SEQ_HEADER = "buraco-current-seq"
MAX_HINTS = 200

log = logging.getLogger("buraco.game_session")


def _table_id(name: str, field: str = "table") -> str:
    return check.resource_id(name, field, "tables")


class GameSessionApi(game_session_pb2_grpc.GameSessionServiceServicer):
    def __init__(
        self,
        deps: Deps,
        settings: GameSessionSettings | None = None,
        *,
        clock: Clock | None = None,
        address: Callable[[], str] | None = None,
        calls: dict[str, Call] | None = None,
    ) -> None:
        self.deps = deps
        self.settings = settings or GameSessionSettings()
        self.clock = clock or RealClock()
        fallback = address or (lambda: deps.config.address)
        advertised = self.settings.advertise_address
        self.manager = Manager(
            deps.db, self.settings, self.clock, deps.registry,
            address=(lambda: advertised) if advertised else fallback,
        )
        self.deliverer = Deliverer(
            deps.db, calls if calls is not None else grpc_calls(deps.clients), self.settings, self.clock, deps.registry,
            owner_id=self.manager.owner_id, address=lambda: self.manager.address,
        )
        self.manager.on_outbox = self.deliverer.wake
        self.idempotency = IdempotencyStore(
            models.idempotency_keys, retention=timedelta(hours=deps.config.idempotency_retention_hours)
        )

    async def start(self) -> None:
        await self.manager.start()
        self.deliverer.start()

    async def stop(self) -> None:
        await self.deliverer.stop()
        await self.manager.stop()

    # -- helpers ----------------------------------------------------------------------------------
    async def _table(self, name: str, field: str = "table") -> LiveTable:
        return await self.manager.get(_table_id(name, field))

    def _seat(self, table: LiveTable, identity: Identity) -> int:
        player = identity.require_player()
        seat = table.seat_of(player)
        if seat is None:
            raise PermissionDeniedError(f"players/{player} has no seat at {table.name}")
        return seat

    def _viewer(self, table: LiveTable, identity: Identity) -> tuple[int | None, str | None]:
        """(seat, player) of a caller who may watch the table; PERMISSION_DENIED otherwise."""
        player = identity.player
        if player is not None:
            seat = table.seat_of(player)
            if seat is not None:
                return seat, player
        if identity.kind in (Kind.SERVICE, Kind.ADMIN) or table.options.spectators_allowed:
            return None, player
        raise PermissionDeniedError(f"{table.name} does not allow spectators")

    def _scope(self, identity: Identity) -> str:
        return f"{identity.principal}>{identity.acting_for or ''}"

    def _table_proto(self, table: LiveTable) -> game_session_pb2.Table:
        return table.table_proto(self.manager.address if table.live else "")

    # -- tables -----------------------------------------------------------------------------------
    async def CreateTable(
        self, request: game_session_pb2.CreateTableRequest, context: Context
    ) -> game_session_pb2.Table:
        identity = current_identity()
        identity.require_kind(Kind.SERVICE)
        check.request_id(request.request_id)
        table_id = check.identifier(request.table_id, "table_id") if request.table_id else uuid.uuid4().hex[:20]
        check.message(request, "table")
        description = self._checked_table(request.table)
        description.name = f"tables/{table_id}"
        now = self.manager.now_ms()
        description.create_time.FromMilliseconds(now)
        table = LiveTable(table_id, description, now)
        created: list[LiveTable] = []
        method = f"{SERVICE}/CreateTable"
        if self.manager.direct is not None:  # PostgreSQL: a new table in one statement
            reply = table.table_proto(self.manager.address)
            stored_at, expires_at = self.idempotency.window()
            if await self.manager.direct.create_table(
                scope=identity.principal, request_id=request.request_id, method=method,
                digest=request_hash(method, request), table_id=table_id, match_id=description.match_id,
                description=description.SerializeToString(), state=State.STATE_WAITING, now_ms=now,
                seats=[(s.seat, s.player) for s in table.seats if s.player is not None],
                owner_address=self.manager.address, owner_id=self.manager.owner_id,
                response=reply.SerializeToString(deterministic=True), created_at=stored_at, expires_at=expires_at,
            ):
                self.manager.adopt(table)
                return reply
            # a retry, a clash, or an expired key: the general path below tells them apart

        async def work(session: Any) -> game_session_pb2.Table:
            exists = (await session.execute(
                select(models.tables.c.id, models.tables.c.match_id).where(
                    (models.tables.c.id == table_id) | (models.tables.c.match_id == description.match_id)
                )
            )).first()
            if exists is not None:
                what = f"tables/{table_id}" if exists.id == table_id else f"match_id {description.match_id!r}"
                raise AlreadyExistsError(f"{what} exists already")
            await session.execute(models.tables.insert().values(
                id=table_id, match_id=description.match_id, description=description.SerializeToString(),
                state=State.STATE_WAITING, seq=0, match_scores="[0, 0]", created_ms=now, updated_ms=now,
            ))
            players = [s for s in table.seats if s.player is not None]
            if players:
                await session.execute(models.seats.insert(), [
                    {"table_id": table_id, "seat": s.seat, "player": s.player} for s in players
                ])
            await session.execute(models.leases.insert().values(
                table_id=table_id, owner_address=self.manager.address, owner_id=self.manager.owner_id, epoch=1,
                live=1,
            ))
            created.append(table)
            return table.table_proto(self.manager.address)

        try:
            reply = await self.idempotency.run(
                self.deps.db, scope=identity.principal, method=method, request=request,
                response_type=game_session_pb2.Table, work=work,
            )
        except IntegrityError:
            raise AlreadyExistsError(f"tables/{table_id} or match_id {description.match_id!r} exists already") from None
        if created and reply.name == description.name:
            self.manager.adopt(created[0])
        return reply

    def _checked_table(self, given: game_session_pb2.Table) -> game_session_pb2.Table:
        table = game_session_pb2.Table()
        table.CopyFrom(given)
        for output_only in ("name", "state", "seq", "match_scores", "create_time", "owner_address"):
            table.ClearField(output_only)
        check.identifier(table.match_id, "table.match_id")
        check.message(table, "options", "table.options")
        options = table.options
        check.message(options, "ruleset", "table.options.ruleset")
        check.require(options.players in (2, 4), "table.options.players", "must be 2 or 4")
        check.enum(options.length, "table.options.length", common_pb2.MatchLength.DESCRIPTOR)
        if options.length == common_pb2.MATCH_LENGTH_POINTS:
            check.int_range(options.target_points, "table.options.target_points", 505, 3005)
        else:
            check.require(options.target_points == 0, "table.options.target_points", "must be 0 for an express match")
        check.enum(options.mode, "table.options.mode", common_pb2.TableMode.DESCRIPTOR)
        practice = options.mode == common_pb2.TABLE_MODE_PRACTICE
        if practice:
            check.require(options.bet_chips == 0, "table.options.bet_chips", "must be 0 at a practice table")
        else:
            check.require(options.bet_chips >= 0, "table.options.bet_chips", "must not be negative")
        if options.draw_seconds:
            check.int_range(options.draw_seconds, "table.options.draw_seconds", 5, 300)
        if options.play_seconds:
            check.int_range(options.play_seconds, "table.options.play_seconds", 5, 600)
        try:
            ruleset_for(options)
        except (EngineError, ValueError, TypeError) as error:
            raise InvalidArgumentError("table.options.ruleset", str(error)) from None
        check.require(len(table.seats) == options.players, "table.seats", f"one per seat ({options.players})")
        seen: set[str] = set()
        for index, seat in enumerate(table.seats):
            field = f"table.seats[{index}]"
            check.require(seat.seat == index, f"{field}.seat", f"must be {index} (seats in order)")
            seat.bot_controlled = False
            seat.connected = False
            kind = seat.participant.WhichOneof("kind")
            check.require(kind is not None, f"{field}.participant", "a player or a bot is required")
            if kind == "player":
                player = check.player(seat.participant.player, f"{field}.participant.player")
                check.require(player not in seen, f"{field}.participant.player", "sits at another seat already")
                seen.add(player)
            else:
                check.require(practice, f"{field}.participant.bot", "bots sit at practice tables only")
                check.enum(seat.participant.bot, f"{field}.participant.bot", common_pb2.BotLevel.DESCRIPTOR)
        if table.tournament:
            check.resource_id(table.tournament, "table.tournament", "tournaments")
        if table.lobby_table:
            check.resource_id(table.lobby_table, "table.lobby_table", "lobbyTables")
        return table

    async def GetTable(
        self, request: game_session_pb2.GetTableRequest, context: Context
    ) -> game_session_pb2.Table:
        identity = current_identity()
        table = await self._table(request.name, "name")
        self._viewer(table, identity)
        return await self.manager.read(table, self._table_proto)

    async def ListTables(
        self, request: game_session_pb2.ListTablesRequest, context: Context
    ) -> game_session_pb2.ListTablesResponse:
        identity = current_identity()
        size = check.page_size(request.page_size, default=20, maximum=100)
        position = check.page_token(request.page_token)
        player: str | None = None
        if request.player:
            player = check.player(request.player, "player")
            identity.check_may_act_for(player)
        elif identity.kind is Kind.PLAYER:
            player = identity.name
        state = check.enum(request.state, "state", game_session_pb2.Table.State.DESCRIPTOR, required=False)
        tables = models.tables
        query = select(tables.c.id, tables.c.description, tables.c.state, tables.c.seq, tables.c.match_scores)
        if player is not None:
            query = query.where(tables.c.id.in_(select(models.seats.c.table_id).where(models.seats.c.player == player)))
        if state:
            query = query.where(tables.c.state == state)
        after = position.get("after")
        if isinstance(after, str):
            query = query.where(tables.c.id > after)
        query = query.order_by(tables.c.id).limit(size + 1)
        async with self.deps.db.transaction() as session:
            rows = (await session.execute(query)).all()
            # The table row's seq moves only with the table's state; a table this replica does not
            # own shows the last event in its log (the primary key's index answers).
            others = [row.id for row in rows[:size] if (t := self.manager.tables.get(row.id)) is None or t.lost]
            last_seq: dict[str, int] = {}
            if others:
                events = models.events
                found = await session.execute(
                    select(events.c.table_id, func.max(events.c.seq))
                    .where(events.c.table_id.in_(others))
                    .group_by(events.c.table_id)
                )
                last_seq = {table_id: int(seq) for table_id, seq in found.all()}
        reply = game_session_pb2.ListTablesResponse()
        for row in rows[:size]:
            live = self.manager.tables.get(row.id)
            if live is not None:
                reply.tables.append(await self.manager.read(live, self._table_proto))
                continue
            table = game_session_pb2.Table.FromString(row.description)
            table.state = row.state
            table.seq = max(row.seq, last_seq.get(row.id, 0))
            table.match_scores[:] = json.loads(row.match_scores)
            reply.tables.append(table)
        if len(rows) > size:
            reply.next_page_token = check.encode_page_token({"after": rows[size - 1].id})
        return reply

    async def CancelTable(
        self, request: game_session_pb2.CancelTableRequest, context: Context
    ) -> game_session_pb2.Table:
        identity = current_identity()
        identity.require_kind(Kind.SERVICE)
        check.request_id(request.request_id)
        reason = check.text(request.reason, "reason", max_length=500, required=False)
        table = await self._table(request.name, "name")
        digest = request_hash(f"{SERVICE}/CancelTable", request)

        def work(out: list[Entry]) -> None:
            if table.state != State.STATE_WAITING:
                raise FailedPreconditionError(f"{table.name} has started (or ended); it can no longer be cancelled")
            table.state = State.STATE_CANCELLED
            table.add({"t": "table_cancelled", "ms": self.manager.now_ms(), "x": {"reason": reason}}, out)

        if table.state == State.STATE_CANCELLED and (self._scope(identity), request.request_id) in table.requests:
            return self._table_proto(table)
        await self.manager.change(table, work, request=(self._scope(identity), request.request_id, digest))
        return self._table_proto(table)

    # -- streams and views ----------------------------------------------------------------------
    async def _open_stream(
        self, request: game_session_pb2.SubscribeRequest | game_session_pb2.SubscribeChangesRequest
    ) -> tuple[LiveTable, Subscriber, Opening]:
        """Registers the caller's stream on the table: the table, the subscriber and what comes
        first (the snapshot, or the replay after `after_seq`)."""
        identity = current_identity()
        check.require(request.after_seq >= 0, "after_seq", "must not be negative")
        table = await self._table(request.table)
        viewer, player = self._viewer(table, identity)
        return await self.manager.subscribe(table, viewer, player, request.after_seq)

    # The stream handlers yield the messages' encodings (`wire`; the pipeline sends bytes as they
    # are), written from each event's form encoded once for its viewer class.

    async def Subscribe(
        self, request: game_session_pb2.SubscribeRequest, context: Context
    ) -> AsyncIterator[Any]:  # TableEvent encodings
        table, sub, opening = await self._open_stream(request)
        # one generator from the queue to the wire (each layer costs every message a hop; so
        # SubscribeChanges has a loop of its own rather than wrapping this one)
        last = max(request.after_seq, opening.last_seq)
        try:
            for framed in opening.frames:
                yield wire.unframe(framed)
            if opening.final:
                return
            queue, event_for = sub.queue, self.manager.event_for
            while True:
                entry = await queue.get()
                if not isinstance(entry, Entry):  # None: the end (the rest is for Play streams only)
                    if table.lost:
                        raise self.manager.not_owner(table)
                    raise UnavailableError("stream ended (too far behind); resume with after_seq")
                if entry.seq <= last:
                    continue
                last = entry.seq
                yield wire.unframe(event_for(table, entry, sub))
                if entry.type in FINAL_TYPES:
                    return
        finally:
            self.manager.unsubscribe(table, sub)

    def SubscribeChanges(
        self, request: game_session_pb2.SubscribeChangesRequest, context: Context
    ) -> AsyncIterator[Any]:  # TableChanges encodings
        return self._changes(request, None)

    def Play(self, requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:  # PlayUpdate (encoded)
        return self._changes(None, requests)

    async def _changes(
        self, request: game_session_pb2.SubscribeChangesRequest | None, requests: AsyncIterator[Any] | None
    ) -> AsyncIterator[Any]:
        """The loop of `SubscribeChanges` (`request`) and of `Play` (`requests`: a join, then
        actions, read by a task of their own): whole changes from the subscriber's queue to the
        wire; a `Play` stream's messages also name the caller's requests they answer, and its
        refusals pass through the same queue, in their place."""
        play = requests is not None
        scope: str | None = None
        seat = -1
        if requests is not None:
            request = await _join(requests)
            identity = current_identity()
            seat = self._seat(await self._table(request.table), identity)  # Play is for seated players
            scope = self._scope(identity)
        assert request is not None
        table, sub, opening = await self._open_stream(request)
        last = max(request.after_seq, opening.last_seq)
        reader: PlayReader | None = None

        def message(frames: list[bytes], answered: list[str]) -> bytes:
            return wire.play_update(frames, answered) if play else wire.table_changes(frames)

        try:
            # the snapshot or the replay: whole changes (read under the table's lock), one message
            if opening.frames:
                yield message(opening.frames, [])
            if opening.final:
                return
            if requests is not None:
                assert scope is not None
                reader = PlayReader()
                reader.start(self._play_requests(requests, table, seat, sub, scope, reader))
            queue, event_for = sub.queue, self.manager.event_for
            while True:
                items = await queue.get_all()  # one or more whole changes
                frames: list[bytes] = []
                answered: list[str] = []
                for item in items:
                    if not isinstance(item, Entry):
                        if frames:
                            yield message(frames, answered)
                            frames, answered = [], []
                        if isinstance(item, game_session_pb2.PlayUpdate):
                            yield item  # a Play stream's refusal, or its answer to a retry
                            continue
                        if isinstance(item, StreamFailure):
                            raise item.error
                        if table.lost:
                            raise self.manager.not_owner(table)
                        raise UnavailableError("stream ended (too far behind); resume with after_seq")
                    if item.seq <= last:
                        continue
                    last = item.seq
                    frames.append(event_for(table, item, sub))
                    if play and item.request is not None and item.request[0] == scope:
                        answered.append(item.request[1])
                    if item.type in FINAL_TYPES:
                        yield message(frames, answered)
                        return
                if frames:
                    yield message(frames, answered)
        finally:
            if reader is not None:
                reader.stop()
            self.manager.unsubscribe(table, sub)

    async def _play_requests(
        self, requests: AsyncIterator[Any], table: LiveTable, seat: int, sub: Subscriber, scope: str,
        reader: PlayReader,
    ) -> None:
        """A `Play` stream's actions, in order; each refusal is queued for the stream as a
        `PlayError`. A broken protocol, or the table moving away, ends the stream. Each action's
        change runs in this task (`Manager.change(inline=True)`): `reader` is never cancelled
        during one."""
        put = sub.queue.put_nowait
        metrics = self.deps.metrics
        joined = (table, seat, scope)
        try:
            async for message in requests:
                if reader.stopped():
                    return
                if isinstance(message, Refused):  # over the caller's rate limit
                    put(_play_error(_request_id(message.request), message.error)[1])
                    continue
                if message is UNDECODABLE:
                    raise InvalidArgumentError("request", "could not be decoded as a PlayRequest")
                kind = message.WhichOneof("body")
                if kind is None or kind == "join":
                    raise InvalidArgumentError("body", "an action is required (join comes first, once)")
                request = getattr(message, kind)
                method, make = PLAY_ACTIONS[kind]
                started, code = time.perf_counter(), "OK"
                reader.busy = True
                try:
                    if request.table != table.name:
                        raise InvalidArgumentError(f"{kind}.table", f"must be the joined {table.name}")
                    retry = (scope, request.request_id) in table.requests
                    await self._apply(method, request, make, joined)  # the stream carries its change
                    if retry:  # its change was delivered already: answer the request alone
                        put(game_session_pb2.PlayUpdate(request_ids=[request.request_id]))
                except UnavailableError:
                    code = "UNAVAILABLE"
                    raise  # the table moved (or this replica is stopping): the stream ends
                except Exception as error:
                    status, refusal = _play_error(request.request_id, error)
                    code = status.name
                    log.info("play action refused", extra={"fields": {
                        "action": method, "code": code, "details": refusal.error.message}})
                    put(refusal)
                finally:
                    reader.busy = False
                    if metrics is not None:  # each action as its own call: latency and code by action
                        metrics.observe(PLAY_METRIC_NAMES[method], code, time.perf_counter() - started)
                if reader.stopped():  # the stream ended during the change
                    return
        except asyncio.CancelledError:
            raise
        except Exception as error:
            put(StreamFailure(error))

    async def GetTableSnapshot(
        self, request: game_session_pb2.GetTableSnapshotRequest, context: Context
    ) -> game_session_pb2.TableSnapshot:
        identity = current_identity()
        table = await self._table(request.table)
        viewer, _ = self._viewer(table, identity)
        return await self.manager.read(
            table, lambda live: live.snapshot(viewer, self.manager.address if live.live else ""))

    # -- actions ----------------------------------------------------------------------------------
    async def _act(self, method: str, request: Any, make: Callable[[Any], Action] | None) -> \
            game_session_pb2.ActionResult:
        """One action of the caller's seat, as a unary call answers it."""
        seat, entries, seq = await self._apply(method, request, make)
        return game_session_pb2.ActionResult(seq=seq, events=[e.proto(seat) for e in entries])

    async def _apply(
        self, method: str, request: Any, make: Callable[[Any], Action] | None,
        joined: tuple[LiveTable, int, str] | None = None,
    ) -> tuple[int, list[Entry], int]:
        """One action of the caller's seat (`make` builds it from the request; None: leave): the
        seat, the entries it made (a retry: those of the first time) and the table's seq after it.
        `joined`: a `Play` stream's (table, seat, scope), found once at its join (a seat is the
        same player's for the table's life; a table that moved away ends the stream instead)."""
        check.request_id(request.request_id)
        if joined is None:
            identity = current_identity()
            table = await self._table(request.table)
            seat = self._seat(table, identity)
            scope = self._scope(identity)
        else:
            table, seat, scope = joined
        action = make(request) if make is not None else None
        digest = request_hash(METHOD_NAMES[method], request)
        expected = getattr(request, "expected_seq", None)

        def work(out: list[Entry]) -> None:
            if expected is not None and expected != table.seq:
                raise FailedPreconditionError(
                    f"stale view: the table is at seq {table.seq}, not {expected}; resume from your stream",
                    metadata=((CURRENT_SEQ_HEADER, str(table.seq)),),
                )
            if table.state != State.STATE_PLAYING:
                raise FailedPreconditionError(f"{table.name}: the match is not being played")
            if action is None:  # leaving
                self.manager.leave(table, seat, out)
                return
            if table.seats[seat].bot_controlled:
                raise FailedPreconditionError(f"a bot plays seat {seat} now ({table.seats[seat].takeover_reason})")
            try:
                table.apply_action(action, seat, "player", self.manager.now_ms(), out)
            except IllegalActionError as error:
                raise FailedPreconditionError(f"{error.code}: {error.message}") from None
            except MalformedError as error:
                raise InvalidArgumentError("cards", str(error)) from None

        _, entries = await self.manager.change(
            table, work, request=(scope, request.request_id, digest), inline=joined is not None)
        return seat, entries, entries[-1].seq if entries else table.seq

    async def Draw(self, request: game_session_pb2.DrawRequest, context: Context) -> game_session_pb2.DrawResponse:
        return game_session_pb2.DrawResponse(result=await self._act("Draw", request, _draw))

    async def TakeDiscard(
        self, request: game_session_pb2.TakeDiscardRequest, context: Context
    ) -> game_session_pb2.TakeDiscardResponse:
        return game_session_pb2.TakeDiscardResponse(result=await self._act("TakeDiscard", request, _take_pile))

    async def Meld(self, request: game_session_pb2.MeldRequest, context: Context) -> game_session_pb2.MeldResponse:
        return game_session_pb2.MeldResponse(result=await self._act("Meld", request, _meld))

    async def AddToMeld(
        self, request: game_session_pb2.AddToMeldRequest, context: Context
    ) -> game_session_pb2.AddToMeldResponse:
        return game_session_pb2.AddToMeldResponse(result=await self._act("AddToMeld", request, _add))

    async def Discard(
        self, request: game_session_pb2.DiscardRequest, context: Context
    ) -> game_session_pb2.DiscardResponse:
        return game_session_pb2.DiscardResponse(result=await self._act("Discard", request, _discard))

    async def LeaveTable(
        self, request: game_session_pb2.LeaveTableRequest, context: Context
    ) -> game_session_pb2.LeaveTableResponse:
        return game_session_pb2.LeaveTableResponse(result=await self._act("LeaveTable", request, None))

    async def GetLegalMoves(
        self, request: game_session_pb2.GetLegalMovesRequest, context: Context
    ) -> game_session_pb2.GetLegalMovesResponse:
        identity = current_identity()
        table = await self._table(request.table)
        seat = self._seat(table, identity)
        return await self.manager.read(table, lambda live: _legal_moves(live, seat))

    async def ExportRecords(
        self, request: game_session_pb2.ExportRecordsRequest, context: Context
    ) -> game_session_pb2.ExportRecordsResponse:
        identity = current_identity()
        table = await self._table(request.table)
        if identity.kind is Kind.PLAYER:
            self._seat(table, identity)
        reply = game_session_pb2.ExportRecordsResponse()
        spec = ruleset_spec(table.options)
        record: dict[str, Any] | None = None
        number = 0
        seed = commitment = ""
        for entry in table.entries:
            data = entry.data
            if entry.type == "hand_started":
                event = entry.event
                assert event is not None
                number = int(event.public["hand_number"])
                seed, commitment = data["x"]["seed"], data["x"]["commitment"]
                record = {"ruleset": spec, "players": table.players, "dealer": int(event.public["dealer"]),
                          "deal": event.secret["deal"], "actions": []}
            elif record is not None and "a" in data:
                record["actions"].append({"seat": int(data["s"]), **data["a"]})
            if entry.type == "hand_ended" and "e" in data and record is not None:
                reply.hands.add(hand_number=number, record_json=json.dumps(record), seed=seed, commitment=commitment)
                record = None
        return reply

    # -- annulment ------------------------------------------------------------------------------
    async def ProposeAnnulment(
        self, request: game_session_pb2.ProposeAnnulmentRequest, context: Context
    ) -> game_session_pb2.ProposeAnnulmentResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        table = await self._table(request.table)
        seat = self._seat(table, identity)
        digest = request_hash(f"{SERVICE}/ProposeAnnulment", request)

        def work(out: list[Entry]) -> str:
            if table.seats[seat].bot_controlled:
                raise FailedPreconditionError(f"a bot plays seat {seat} now; it cannot propose")
            return self.manager.propose(table, seat, out)

        _, entries = await self.manager.change(table, work, request=(self._scope(identity), request.request_id, digest))
        proposed = next(e for e in entries if e.type == "annulment_proposed")
        return game_session_pb2.ProposeAnnulmentResponse(proposal_id=proposed.data["x"]["proposal_id"])

    async def VoteAnnulment(
        self, request: game_session_pb2.VoteAnnulmentRequest, context: Context
    ) -> game_session_pb2.VoteAnnulmentResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        check.require(bool(request.proposal_id), "proposal_id", "required")
        table = await self._table(request.table)
        seat = self._seat(table, identity)
        digest = request_hash(f"{SERVICE}/VoteAnnulment", request)
        await self.manager.change(
            table, lambda out: self.manager.vote(table, seat, request.proposal_id, request.approve, out),
            request=(self._scope(identity), request.request_id, digest),
        )
        return game_session_pb2.VoteAnnulmentResponse()

    # -- chat -----------------------------------------------------------------------------------
    async def SendChat(
        self, request: game_session_pb2.SendChatRequest, context: Context
    ) -> game_session_pb2.SendChatResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        text = check.text(request.text, "text", max_length=200)
        check.require(text.strip() != "", "text", "must not be blank")
        table = await self._table(request.table)
        sender = identity.require_player()
        seat = table.seat_of(sender)
        if seat is None and not table.options.spectators_allowed:
            raise PermissionDeniedError(f"{table.name} does not allow spectators")
        digest = request_hash(f"{SERVICE}/SendChat", request)
        _, entries = await self.manager.change(
            table, lambda out: self.manager.chat(table, sender, seat, text, out),
            request=(self._scope(identity), request.request_id, digest),
        )
        chat = next(e for e in entries if e.type == "chat")
        return game_session_pb2.SendChatResponse(seq=chat.seq)

    async def MuteChat(
        self, request: game_session_pb2.MuteChatRequest, context: Context
    ) -> game_session_pb2.MuteChatResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        target = check.player(request.player, "player")
        table = await self._table(request.table)
        if identity.kind is Kind.ADMIN and identity.acting_for is None:
            viewer = "*"
        else:
            viewer = identity.require_player()
            check.require(target != viewer, "player", "you cannot mute yourself")
            self._viewer(table, identity)
        await self.manager.mute(table, viewer, target, request.muted)
        return game_session_pb2.MuteChatResponse()


def _legal_moves(table: LiveTable, seat: int) -> game_session_pb2.GetLegalMovesResponse:
    """The seat's legal moves now, as hints (none when it is not the seat's turn)."""
    reply = game_session_pb2.GetLegalMovesResponse(seq=table.seq)
    hand = table.match.hand
    if hand is None or table.to_act() != seat or table.seats[seat].bot_controlled:
        return reply
    legal = hand.legal_actions()
    melds = sorted((a for a in legal if isinstance(a, MeldCards)), key=lambda a: (a.cards, a.wild_as or -1))
    adds = sorted((a for a in legal if isinstance(a, AddCards)), key=lambda a: (a.meld, a.cards))
    reply.can_draw = DRAW in legal
    reply.can_take_discard = TAKE_PILE in legal
    for meld in melds[:MAX_HINTS]:
        option = reply.melds.add(cards=format_many(meld.cards))
        if meld.wild_as is not None:
            option.wild_as = format_many([meld.wild_as])[0]
    for add in adds[:MAX_HINTS]:
        reply.additions.add(meld=add.meld, cards=format_many(add.cards))
    reply.discards[:] = format_many(sorted(a.card for a in legal if isinstance(a, Discard)))
    return reply


def _draw(request: Any) -> Action:
    return DRAW


def _take_pile(request: Any) -> Action:
    return TAKE_PILE


def _meld(request: game_session_pb2.MeldRequest) -> Action:
    cards = _cards(request.cards, "cards", 3)
    wild_as = _card(request.wild_as, "wild_as") if request.wild_as else None
    return meld_action(cards, wild_as)


def _add(request: game_session_pb2.AddToMeldRequest) -> Action:
    check.require(request.meld >= 0, "meld", "must not be negative")
    return add_action(request.meld, _cards(request.cards, "cards", 1))


def _discard(request: game_session_pb2.DiscardRequest) -> Action:
    return Discard(_card(request.card, "card"))


#: A `Play` request's body -> (the unary method it stands for, the action it makes; None: leave).
PLAY_ACTIONS: dict[str, tuple[str, Callable[[Any], Action] | None]] = {
    "draw": ("Draw", _draw),
    "take_discard": ("TakeDiscard", _take_pile),
    "meld": ("Meld", _meld),
    "add_to_meld": ("AddToMeld", _add),
    "discard": ("Discard", _discard),
    "leave": ("LeaveTable", None),
}
#: The action methods' full names (their requests' digests), and a Play stream's action as a call
#: in the metrics, written once rather than at every action.
METHOD_NAMES = {method: f"{SERVICE}/{method}" for method, _ in PLAY_ACTIONS.values()}
PLAY_METRIC_NAMES = {method: f"{SERVICE_PATH}Play/{method}" for method, _ in PLAY_ACTIONS.values()}


class PlayReader:
    """The task that reads a `Play` stream's actions. Its changes run in it (no task of their own
    per action), so it must never be cancelled during one (`Manager.change`): `stop()` cancels it
    only while it waits for the next message, and otherwise lets it end after the change."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        #: an action is being applied: the task may not be cancelled now
        self.busy = False
        #: the stream has ended: the task ends once its change (if any) is done (`stopped()`)
        self._stopping = False

    def start(self, reading: Coroutine[Any, Any, None]) -> None:
        self.task = asyncio.get_running_loop().create_task(reading)

    def stop(self) -> None:
        self._stopping = True
        if self.task is not None and not self.busy:
            self.task.cancel()

    def stopped(self) -> bool:
        return self._stopping


async def _join(requests: AsyncIterator[Any]) -> game_session_pb2.SubscribeChangesRequest:
    """A `Play` stream's first message, which must be its join."""
    try:
        first = await requests.__anext__()
    except StopAsyncIteration:
        raise InvalidArgumentError("join", "the stream ended before its join") from None
    if isinstance(first, Refused):
        raise first.error
    if first is UNDECODABLE:
        raise InvalidArgumentError("request", "could not be decoded as a PlayRequest")
    if first.WhichOneof("body") != "join":
        raise InvalidArgumentError("join", "the first message must be a join")
    join: game_session_pb2.SubscribeChangesRequest = first.join
    return join


def _request_id(request: Any) -> str:
    kind = request.WhichOneof("body") if isinstance(request, game_session_pb2.PlayRequest) else None
    body = getattr(request, kind) if kind is not None else None
    return str(getattr(body, "request_id", ""))


def _play_error(request_id: str, error: Exception) -> tuple[grpc.StatusCode, game_session_pb2.PlayUpdate]:
    """A refused `Play` action, as the unary call's status would have said it (and that status)."""
    code, message, metadata = status_for(error)
    if code is grpc.StatusCode.INTERNAL:
        log.error("unexpected error", exc_info=error, extra={"fields": {"code": code.name}})
    current = next((int(value) for key, value in metadata if key == CURRENT_SEQ_HEADER), 0)
    return code, game_session_pb2.PlayUpdate(error=game_session_pb2.PlayError(
        request_id=request_id, code=code.value[0], message=message, current_seq=current))


def _card(value: str, field: str) -> int:
    try:
        return parse(value)
    except MalformedError as error:
        raise InvalidArgumentError(field, str(error)) from None


def _cards(values: Any, field: str, minimum: int) -> list[int]:
    check.require(len(values) >= minimum, field, f"at least {minimum} card(s)")
    check.require(len(values) <= 60, field, "at most 60 cards")
    try:
        return parse_many(list(values))
    except MalformedError as error:
        raise InvalidArgumentError(field, str(error)) from None


def register(server: grpc.aio.Server, deps: Deps) -> None:
    settings = settings_module.load(production=not deps.config.local)
    bound: dict[str, str] = {}
    api = GameSessionApi(deps, settings, address=lambda: bound.get("address") or deps.config.address)
    attach(server, api, bound)


def attach(server: grpc.aio.Server, api: GameSessionApi, bound: dict[str, str] | None = None) -> None:
    """Serve `api` on `server`: its background work starts with the server and stops (releasing
    the leases, so another replica takes the tables over at once) before the server stops."""
    game_session_pb2_grpc.add_GameSessionServiceServicer_to_server(api, server)
    original_start, original_stop, original_add = server.start, server.stop, server.add_insecure_port

    def add_insecure_port(address: str) -> int:
        port = original_add(address)
        if bound is not None:  # with port 0 the port is known only now: advertise the real one
            bound["address"] = f"{api.deps.config.host}:{port}"
        return port

    async def start() -> None:
        await api.start()
        await original_start()

    async def stop(grace: float | None = None) -> None:
        await api.stop()
        await original_stop(grace)

    server.add_insecure_port = add_insecure_port  # type: ignore[method-assign]
    server.start = start  # type: ignore[method-assign]
    server.stop = stop  # type: ignore[method-assign]


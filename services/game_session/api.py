"""The game-session service's gRPC API: a thin servicer. Each call reads the caller, checks the
request (`requests`), finds the table's actor (`ownership`), checks who may do what (`access`),
hands the change, read or stream to the actor (`actor`, `streaming`), and builds the reply; the
server pipeline maps errors to status codes.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, TypeAlias

import grpc

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from services.common import loadtest_runs
from services.common import validation as check
from services.common.auth import Callers, Kind, allow, current_identity
from services.common.collector import Settler
from services.common.db import Database
from services.common.errors import FailedPreconditionError, PermissionDeniedError
from services.common.idempotency import IdempotencyStore, request_hash
from services.common.server import Bound, Deps
from services.game_session import access, erasure, models, requests, social, store, views
from services.game_session import settings as settings_module
from services.game_session.actor import RequestKey, TableActor
from services.game_session.clock import Clock, RealClock
from services.game_session.log import Entry
from services.game_session.outbox import BatchCall, Call, Deliverer, grpc_batch_calls, grpc_calls
from services.game_session.ownership import Ownership
from services.game_session.settings import GameSessionSettings
from services.game_session.streaming import Streams
from services.game_session.table import LiveTable, State

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
log = logging.getLogger("buraco.game_session")
SERVICE = requests.SERVICE

#: Who may create and cancel tables: the services that seat players (matchmaking's matches and
#: lobby tables, tournaments' rounds). A table's result settles its match's pot (the outbox), so
#: only the services that hold pots make or cancel tables; no other service, and no admin
#: (docs/contracts.md, "Who may call what").
CALLERS = Callers("GameSessionService", {
    "CreateTable": allow("matchmaking", "tournament"),
    "CancelTable": allow("matchmaking", "tournament"),
})


def _table_id(name: str, field: str = "table") -> str:
    return check.resource_id(name, field, "tables")


class GameSessionApi(game_session_pb2_grpc.GameSessionServiceServicer):
    def __init__(
        self,
        deps: Deps,
        settings: GameSessionSettings | None = None,
        *,
        clock: Clock | None = None,
        calls: dict[str, Call] | None = None,
        batch_calls: dict[str, BatchCall] | None = None,
    ) -> None:
        self.deps = deps
        self.settings = settings or GameSessionSettings()
        self.clock = clock or RealClock()
        #: where the server listens, once started (the address other replicas' redirects name,
        #: unless BURACO_GAME_SESSION_ADVERTISE_ADDRESS says otherwise)
        self._bound = ""
        self.tables = Ownership(deps.db, self.settings, self.clock, deps.registry, address=self._address)
        if calls is None:  # the real services (tests give theirs)
            calls, batch_calls = grpc_calls(deps.clients), grpc_batch_calls(deps.clients)
        self.deliverer = Deliverer(
            deps.db, calls, self.settings, self.clock, deps.registry,
            owner_id=self.tables.owner_id, address=lambda: self.tables.address, batches=batch_calls,
        )
        self.tables.on_outbox = self.deliverer.wake
        self.idempotency = IdempotencyStore(
            models.idempotency_keys, retention=timedelta(hours=deps.config.idempotency_retention_hours),
            writes=Database.write)
        self.creator = store.Creator(deps.db, self.idempotency)
        self.streams = Streams(self.tables, deps.metrics)
        self.settler = Settler()

    # -- lifecycle (the server frame's hooks: `serve`) --------------------------------------------
    def _address(self) -> str:
        return self.settings.advertise_address or self._bound or self.deps.config.address

    async def start(self, bound: Bound) -> None:
        """Once the port is bound, before the first call: this replica's heartbeat, the log
        writer, the lease scans, the outbox's deliverer."""
        self._bound = bound.address
        await self.tables.start()
        self.deliverer.start()
        self.settler.start()

    async def stop(self) -> None:
        """When the server begins to stop: the tables' streams end ("reconnect and resume"), the
        leases are released so another replica takes the tables over at once."""
        await self.deliverer.stop()
        await self.settler.stop()
        await self.tables.stop()
        await self.creator.close()

    # -- helpers ----------------------------------------------------------------------------------
    async def _actor(self, name: str, field: str = "table") -> TableActor:
        return await self.tables.get(_table_id(name, field))

    def _table_proto(self, table: LiveTable) -> game_session_pb2.Table:
        return table.table_proto(self.tables.address if table.live else "")

    # -- tables -----------------------------------------------------------------------------------
    async def CreateTable(
        self, request: game_session_pb2.CreateTableRequest, context: Context
    ) -> game_session_pb2.Table:
        identity = CALLERS.require("CreateTable")
        check.request_id(request.request_id)
        table_id = check.identifier(request.table_id, "table_id") if request.table_id else uuid.uuid4().hex[:20]
        check.message(request, "table")
        description = requests.checked_table(request.table)
        description.name = f"tables/{table_id}"
        now = self.tables.now_ms()
        description.create_time.FromMilliseconds(now)
        table = LiveTable(table_id, description, now, expert_budget_ms=self.settings.expert_budget_ms)
        new = store.NewTable(
            table_id=table_id, match_id=description.match_id, description=description.SerializeToString(),
            now_ms=now, seats=[(s.seat, s.player) for s in table.seats if s.player is not None],
            owner_address=self.tables.address, owner_id=self.tables.owner_id,
        )
        reply, created = await self.creator.create(
            scope=identity.principal, method=f"{SERVICE}/CreateTable", request=request, table=new,
            reply=table.table_proto(self.tables.address),
        )
        if created:
            self.tables.adopt(table)
        return reply

    async def GetTable(
        self, request: game_session_pb2.GetTableRequest, context: Context
    ) -> game_session_pb2.Table:
        identity = current_identity()
        actor = await self._actor(request.name, "name")
        access.viewer_of(actor.table, identity)
        return await self.tables.read(actor, self._table_proto)

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
        after = position.get("after")
        listed = await store.list_tables(
            self.deps.db, player=player, state=state, after=after if isinstance(after, str) else None, size=size + 1)
        reply = game_session_pb2.ListTablesResponse()
        for row in listed[:size]:
            actor = self.tables.installed(row.table_id)
            if actor is not None:  # the copy here: its state now
                reply.tables.append(await self.tables.read(actor, self._table_proto))
                continue
            table = game_session_pb2.Table.FromString(row.description)
            table.state = row.state  # type: ignore[assignment]
            table.seq = row.seq
            table.match_scores[:] = json.loads(row.match_scores)
            reply.tables.append(table)
        if len(listed) > size:
            reply.next_page_token = check.encode_page_token({"after": listed[size - 1].table_id})
        return reply

    async def CancelTable(
        self, request: game_session_pb2.CancelTableRequest, context: Context
    ) -> game_session_pb2.Table:
        identity = CALLERS.require("CancelTable")
        check.request_id(request.request_id)
        reason = check.text(request.reason, "reason", max_length=500, required=False)
        actor = await self._actor(request.name, "name")
        key = RequestKey(access.scope_of(identity), request.request_id, request_hash(f"{SERVICE}/CancelTable", request))

        def work(table: LiveTable, out: list[Entry]) -> None:
            if table.state != State.STATE_WAITING:
                raise FailedPreconditionError(f"{table.name} has started (or ended); it can no longer be cancelled")
            table.cancelled()
            table.add({"t": "table_cancelled", "ms": self.tables.now_ms(), "x": {"reason": reason}}, out)

        await self.tables.change(actor, work, key)
        return await self.tables.read(actor, self._table_proto)

    # -- streams and views ----------------------------------------------------------------------
    # The stream handlers yield the messages' encodings (`streaming`).

    def Subscribe(self, request: game_session_pb2.SubscribeRequest, context: Context) -> AsyncIterator[Any]:
        return self.streams.events(request)

    def SubscribeChanges(
        self, request: game_session_pb2.SubscribeChangesRequest, context: Context
    ) -> AsyncIterator[Any]:
        return self.streams.changes(request, None)

    def Play(self, requests_in: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        return self.streams.changes(None, requests_in)

    async def GetTableSnapshot(
        self, request: game_session_pb2.GetTableSnapshotRequest, context: Context
    ) -> game_session_pb2.TableSnapshot:
        identity = current_identity()
        actor = await self._actor(request.table)
        viewer, _ = access.viewer_of(actor.table, identity)
        return await self.tables.read(
            actor, lambda table: table.snapshot(viewer, self.tables.address if table.live else ""))

    async def GetLegalMoves(
        self, request: game_session_pb2.GetLegalMovesRequest, context: Context
    ) -> game_session_pb2.GetLegalMovesResponse:
        identity = current_identity()
        actor = await self._actor(request.table)
        seat = access.seat_of(actor.table, identity)
        return await self.tables.read(actor, lambda table: views.legal_moves(table, seat))

    async def ExportRecords(
        self, request: game_session_pb2.ExportRecordsRequest, context: Context
    ) -> game_session_pb2.ExportRecordsResponse:
        identity = current_identity()
        actor = await self._actor(request.table)
        if identity.kind is Kind.PLAYER:
            access.seat_of(actor.table, identity)
        return await self.tables.read(actor, views.records)

    # -- moves ------------------------------------------------------------------------------------
    async def _move(self, method: str, request: Any) -> game_session_pb2.ActionResult:
        """One move of the caller's seat, as a unary call answers it: the events it made (a
        retry: those of the first time), as the seat sees them, and the table's seq after it."""
        identity = current_identity()
        check.request_id(request.request_id)
        actor = await self._actor(request.table)
        seat = access.seat_of(actor.table, identity)
        work, key = requests.move(method, request, seat, access.scope_of(identity), self.tables.now_ms)
        changed = await self.tables.change(actor, work, key)
        entries = changed.entries
        seq = entries[-1].seq if entries else actor.table.seq
        return game_session_pb2.ActionResult(seq=seq, events=[e.proto(seat) for e in entries])

    async def Draw(self, request: game_session_pb2.DrawRequest, context: Context) -> game_session_pb2.DrawResponse:
        return game_session_pb2.DrawResponse(result=await self._move("Draw", request))

    async def TakeDiscard(
        self, request: game_session_pb2.TakeDiscardRequest, context: Context
    ) -> game_session_pb2.TakeDiscardResponse:
        return game_session_pb2.TakeDiscardResponse(result=await self._move("TakeDiscard", request))

    async def Meld(self, request: game_session_pb2.MeldRequest, context: Context) -> game_session_pb2.MeldResponse:
        return game_session_pb2.MeldResponse(result=await self._move("Meld", request))

    async def AddToMeld(
        self, request: game_session_pb2.AddToMeldRequest, context: Context
    ) -> game_session_pb2.AddToMeldResponse:
        return game_session_pb2.AddToMeldResponse(result=await self._move("AddToMeld", request))

    async def Discard(
        self, request: game_session_pb2.DiscardRequest, context: Context
    ) -> game_session_pb2.DiscardResponse:
        return game_session_pb2.DiscardResponse(result=await self._move("Discard", request))

    async def LeaveTable(
        self, request: game_session_pb2.LeaveTableRequest, context: Context
    ) -> game_session_pb2.LeaveTableResponse:
        return game_session_pb2.LeaveTableResponse(result=await self._move("LeaveTable", request))

    # -- annulment ------------------------------------------------------------------------------
    async def ProposeAnnulment(
        self, request: game_session_pb2.ProposeAnnulmentRequest, context: Context
    ) -> game_session_pb2.ProposeAnnulmentResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        actor = await self._actor(request.table)
        seat = access.seat_of(actor.table, identity)
        key = RequestKey(access.scope_of(identity), request.request_id,
                         request_hash(f"{SERVICE}/ProposeAnnulment", request))
        open_ms = int(self.settings.annulment_seconds * 1000)
        changed = await self.tables.change(
            actor, lambda table, out: social.propose(table, seat, self.tables.now_ms(), open_ms, out), key)
        proposed = next(e for e in changed.entries if e.type == "annulment_proposed")
        return game_session_pb2.ProposeAnnulmentResponse(proposal_id=proposed.data["x"]["proposal_id"])

    async def VoteAnnulment(
        self, request: game_session_pb2.VoteAnnulmentRequest, context: Context
    ) -> game_session_pb2.VoteAnnulmentResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        check.require(bool(request.proposal_id), "proposal_id", "required")
        actor = await self._actor(request.table)
        seat = access.seat_of(actor.table, identity)
        key = RequestKey(access.scope_of(identity), request.request_id,
                         request_hash(f"{SERVICE}/VoteAnnulment", request))
        await self.tables.change(actor, lambda table, out: social.vote(
            table, seat, request.proposal_id, request.approve, self.tables.now_ms(), out), key)
        return game_session_pb2.VoteAnnulmentResponse()

    # -- chat -----------------------------------------------------------------------------------
    async def SendChat(
        self, request: game_session_pb2.SendChatRequest, context: Context
    ) -> game_session_pb2.SendChatResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        text = check.text(request.text, "text", max_length=200)
        check.require(text.strip() != "", "text", "must not be blank")
        actor = await self._actor(request.table)
        sender = identity.require_player()
        seat = actor.table.seat_of(sender)
        if seat is None and not actor.table.options.spectators_allowed:
            raise PermissionDeniedError(f"{actor.name} does not allow spectators")
        key = RequestKey(access.scope_of(identity), request.request_id, request_hash(f"{SERVICE}/SendChat", request))
        per_minute = self.settings.chat_per_minute
        changed = await self.tables.change(actor, lambda table, out: social.chat(
            table, sender, seat, text, self.clock.now(), per_minute, out), key)
        chat = next(e for e in changed.entries if e.type == "chat")
        return game_session_pb2.SendChatResponse(seq=chat.seq)

    async def MuteChat(
        self, request: game_session_pb2.MuteChatRequest, context: Context
    ) -> game_session_pb2.MuteChatResponse:
        identity = current_identity()
        check.request_id(request.request_id)
        target = check.player(request.player, "player")
        actor = await self._actor(request.table)
        if identity.kind is Kind.ADMIN and identity.acting_for is None:
            viewer = "*"
        else:
            viewer = identity.require_player()
            check.require(target != viewer, "player", "you cannot mute yourself")
            access.viewer_of(actor.table, identity)
        await self.tables.mute(actor, viewer, target, request.muted)
        return game_session_pb2.MuteChatResponse()

    # -- load-test runs -------------------------------------------------------------------------
    async def EraseLoadTestRun(
        self, request: common_pb2.EraseLoadTestRunRequest, context: Context
    ) -> common_pb2.EraseLoadTestRunResponse:
        identity, run = loadtest_runs.admitted(request, "GameSessionService")
        if request.dry_run:  # a read: on one snapshot, nothing stored
            async with self.deps.db.read() as session:
                found = await erasure.erase_run(session, run, dry_run=True)
            return loadtest_runs.response(run, True, found.counts())
        done: list[erasure.Erasure] = []

        async def work(session: Any) -> common_pb2.EraseLoadTestRunResponse:
            done.append(await erasure.erase_run(session, run, dry_run=False))
            return loadtest_runs.response(run, False, done[-1].counts())

        reply = await self.idempotency.run(
            self.deps.db, scope=identity.principal, method=f"{SERVICE}/EraseLoadTestRun", request=request,
            response_type=common_pb2.EraseLoadTestRunResponse, work=work,
        )
        if done:  # erased now (not a retry answered from the first time)
            log.info("load-test run erased", extra={"fields": {
                "run": run, "by": identity.principal, **dict(done[-1].counts())}})
            await self.tables.forget(done[-1].table_ids)  # committed: no copy of them stays here
        return reply


def register(server: grpc.aio.Server, deps: Deps) -> GameSessionApi:
    return serve(server, GameSessionApi(deps, settings_module.load(production=not deps.config.local)))


def serve(server: grpc.aio.Server, api: GameSessionApi) -> GameSessionApi:
    """Serve `api` on `server`; `api` is the service's lifecycle (its `start` and `stop` hooks)."""
    game_session_pb2_grpc.add_GameSessionServiceServicer_to_server(api, server)
    return api

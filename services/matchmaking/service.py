"""How the matchmaking service is served: its gRPC service, servicer, matching loop and
migrations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

from buraco.v1 import matchmaking_pb2, matchmaking_pb2_grpc
from services.common.db import Database
from services.common.idempotency import IdempotencyStore
from services.common.server import Bound, Deps, Hooks, ServiceSpec
from services.matchmaking import api, models
from services.matchmaking import settings as settings_module
from services.matchmaking.core import Clock, Core
from services.matchmaking.erasure import Erasure
from services.matchmaking.lobby import Lobby
from services.matchmaking.loop import Loop
from services.matchmaking.metrics import MatchmakingMetrics
from services.matchmaking.parties import Parties
from services.matchmaking.ports import Platform
from services.matchmaking.remote import GrpcPlatform
from services.matchmaking.saga import Sagas
from services.matchmaking.settings import MatchmakingSettings
from services.matchmaking.tickets import Tickets


@dataclass
class Running:
    """What one served instance is made of (tests reach the loop, the sagas and the erasure
    through it)."""

    core: Core
    sagas: Sagas
    loop: Loop
    erasure: Erasure


def system_clock() -> datetime:
    return datetime.now(UTC)


def registrar(
    clock: Clock | None = None,
    settings: MatchmakingSettings | None = None,
    platform: Callable[[Deps, MatchmakingSettings], Platform] | None = None,
    on_ready: Callable[[Running], None] | None = None,
) -> Callable[[grpc.aio.Server, Deps], Hooks]:
    def register(server: grpc.aio.Server, deps: Deps) -> Hooks:
        chosen = settings if settings is not None else settings_module.load()
        now = clock or system_clock
        remote: Platform = (
            platform(deps, chosen)
            if platform is not None
            else GrpcPlatform(deps.clients, chosen.call_timeout_seconds)
        )
        store = IdempotencyStore(
            models.idempotency_keys,
            retention=timedelta(hours=deps.config.idempotency_retention_hours),
            clock=now,
            writes=Database.write,
        )
        core = Core(deps.db, remote, chosen, now, store)
        tickets = Tickets(core)
        sagas = Sagas(core, MatchmakingMetrics(deps.registry))
        loop = Loop(core, sagas, tickets)
        core.wake = loop.wake
        core.queue_position = loop.position
        core.new_place = loop.new_place
        core.queued_here = loop.queued_here
        lobby = Lobby(core, sagas)
        erasure = Erasure(core, tickets)
        servicer = api.MatchmakingApi(deps, tickets, Parties(core), lobby, erasure)
        matchmaking_pb2_grpc.add_MatchmakingServiceServicer_to_server(servicer, server)
        if on_ready is not None:
            on_ready(Running(core, sagas, loop, erasure))
        return _lifecycle(loop, remote)

    return register


def _lifecycle(loop: Loop, platform: Platform) -> Hooks:
    """The matching loop runs while the server serves: started before the first call, stopped
    when the server begins to stop, before its streams end and before the clients and the
    database close (so no step runs without them)."""

    async def start(bound: Bound) -> None:
        loop.start()

    async def stop() -> None:
        await loop.stop()
        await platform.close()

    return Hooks(on_start=start, on_stop=stop)


def build_spec(
    clock: Clock | None = None,
    settings: MatchmakingSettings | None = None,
    platform: Callable[[Deps, MatchmakingSettings], Platform] | None = None,
    on_ready: Callable[[Running], None] | None = None,
) -> ServiceSpec:
    """The service, optionally with an injected clock, settings and platform (tests)."""
    return ServiceSpec(
        name="matchmaking",
        grpc_services=(matchmaking_pb2.DESCRIPTOR.services_by_name["MatchmakingService"].full_name,),
        register=registrar(clock, settings, platform, on_ready),
        migrations=Path(__file__).parent / "migrations",
        calls_others=True,
    )


SPEC = build_spec()

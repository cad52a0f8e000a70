"""How the tournament service is served: its gRPC service, servicer, scheduler and migrations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

from buraco.v1 import tournament_pb2, tournament_pb2_grpc
from services.common.idempotency import IdempotencyStore
from services.common.server import Bound, Deps, Hooks, ServiceSpec
from services.tournament import api, models
from services.tournament import settings as settings_module
from services.tournament.core import Notifier, Tournaments
from services.tournament.ports import Services
from services.tournament.progress import Progress
from services.tournament.records import Clock
from services.tournament.registration import Registrations
from services.tournament.remote import GrpcServices
from services.tournament.scheduler import Scheduler
from services.tournament.settings import TournamentSettings


@dataclass
class Running:
    """What one served instance is made of (tests reach the scheduler through it)."""

    core: Tournaments
    registrations: Registrations
    progress: Progress
    scheduler: Scheduler


def system_clock() -> datetime:
    return datetime.now(UTC)


def registrar(
    clock: Clock | None = None,
    settings: TournamentSettings | None = None,
    services: Callable[[Deps], Services] | None = None,
    on_ready: Callable[[Running], None] | None = None,
) -> Callable[[grpc.aio.Server, Deps], Hooks]:
    def register(server: grpc.aio.Server, deps: Deps) -> Hooks:
        chosen = settings if settings is not None else settings_module.load()
        now = clock or system_clock
        remote = services(deps) if services is not None else GrpcServices(deps.clients, chosen.call_timeout_seconds)
        store = IdempotencyStore(
            models.idempotency_keys, retention=timedelta(hours=deps.config.idempotency_retention_hours), clock=now
        )
        core = Tournaments(deps.db, remote, chosen, now, store, Notifier())
        registrations = Registrations(core)
        progress = Progress(core, registrations)
        scheduler = Scheduler(progress)
        core.wake = scheduler.wake
        servicer = api.TournamentApi(deps, core, registrations)
        tournament_pb2_grpc.add_TournamentServiceServicer_to_server(servicer, server)
        if on_ready is not None:
            on_ready(Running(core, registrations, progress, scheduler))
        return _lifecycle(scheduler)

    return register


def _lifecycle(scheduler: Scheduler) -> Hooks:
    """The scheduler runs while the server serves: started before the first call, stopped when
    the server begins to stop, before the clients and the database close (so no step runs
    without them)."""

    async def start(bound: Bound) -> None:
        scheduler.start()

    async def stop() -> None:
        await scheduler.stop()

    return Hooks(on_start=start, on_stop=stop)


def build_spec(
    clock: Clock | None = None,
    settings: TournamentSettings | None = None,
    services: Callable[[Deps], Services] | None = None,
    on_ready: Callable[[Running], None] | None = None,
) -> ServiceSpec:
    """The service, optionally with an injected clock, settings and other services (tests)."""
    return ServiceSpec(
        name="tournament",
        grpc_services=(tournament_pb2.DESCRIPTOR.services_by_name["TournamentService"].full_name,),
        register=registrar(clock, settings, services, on_ready),
        migrations=Path(__file__).parent / "migrations",
        calls_others=True,
    )


SPEC = build_spec()

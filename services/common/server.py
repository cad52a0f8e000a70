"""Service boot: the gRPC server with health, reflection, the pipeline, metrics and the database.

A service describes itself with a `ServiceSpec` and its `__main__.py` calls `main(SPEC)`:

    python -m services.wallet               # serve (same as `serve`)
    python -m services.wallet migrate       # upgrade its database to head
    python -m services.wallet downgrade base
    python -m services.wallet revision -m "add accounts" [--autogenerate]

Serving (`Server.start`): read the configuration (exit 2 on a bad value or certificates that do
not load), set up logs, keys and the database, run the migrations when BURACO_MIGRATE_ON_START,
register the servicers, bind (TLS only when BURACO_TLS_CERT_FILE is set: services.common.tls), run
the service's start hook, accept calls, mark every service SERVING in `grpc.health.v1`, log one
`listening` line (JSON, with the address and the metrics port), then wait for SIGTERM or SIGINT.
Stopping (`Server.stop`): health NOT_SERVING, refuse new calls (UNAVAILABLE), run the service's
stop hook, end open streams with UNAVAILABLE, let in-flight calls finish for up to
BURACO_SHUTDOWN_GRACE_SECONDS, close the clients and the database.

Start and stop hooks: a service with background work (a loop, a scheduler, leases) returns a
`Lifecycle` from its `register` (`Hooks(on_start=..., on_stop=...)` makes one of two functions):

    def register(server: grpc.aio.Server, deps: Deps) -> Hooks:
        loop = Loop(...)
        add_MyServiceServicer_to_server(MyApi(deps, loop), server)

        async def start(bound: Bound) -> None:     # bound.address: where it really listens
            loop.start()

        return Hooks(on_start=start, on_stop=loop.stop)

- `start(bound)` runs once the port is bound (`bound.port` is the real one when the configured
  port is 0) and before the server accepts any call. If it fails (or the server is stopped while
  it runs, which cancels it), the server stops cleanly without calling `stop` (a start that fails
  half-way undoes its own half), and `Server.start` raises.
- `stop()` runs once, when the server begins to stop: after new calls are refused, before open
  streams are ended and before the grpc server stops, while in-flight calls and streams still
  run, the clients and the database still open (a game-session replica releases its table
  leases there, so another replica takes them over at once and the streams ended just after
  resume there). An error in it is logged, and the stop goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from services.client.channels import Clients
from services.common import config as config_module
from services.common import logs, migrations, tracing, transport
from services.common.auth import Minter, Verifier, keys_from_config
from services.common.config import Config, ConfigError
from services.common.db import Database
from services.common.interceptor import Limits, Pipeline
from services.common.metrics import Metrics
from services.common.tls import ServerTls, TlsError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger("buraco.server")

SEND_MESSAGE_BYTES = 16 << 20


@dataclass
class Deps:
    """What a servicer gets: no module globals, everything explicit."""

    config: Config
    db: Database
    clients: Clients
    minter: Minter | None
    log: logging.Logger
    #: The registry served on /metrics: a service's own metrics go here (`registry=deps.registry`).
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    #: The pipeline's call metrics, for what a stream carries that the pipeline cannot see (the
    #: actions sent on a bidirectional stream). None outside a server (unit tests).
    metrics: Metrics | None = None


@dataclass(frozen=True)
class Bound:
    """Where a started server listens: the configured host and the port it bound (the real one
    when the configured port is 0)."""

    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class Lifecycle(Protocol):
    """A service's background work, started and stopped by the frame (see the module's docstring)."""

    async def start(self, bound: Bound) -> None: ...

    async def stop(self) -> None: ...


async def _nothing_to_start(bound: Bound) -> None:
    return None


async def _nothing_to_stop() -> None:
    return None


@dataclass(frozen=True)
class Hooks:
    """A `Lifecycle` made of two functions (either may be left out)."""

    on_start: Callable[[Bound], Awaitable[None]] = _nothing_to_start
    on_stop: Callable[[], Awaitable[None]] = _nothing_to_stop

    async def start(self, bound: Bound) -> None:
        await self.on_start(bound)

    async def stop(self) -> None:
        await self.on_stop()


@dataclass(frozen=True)
class ServiceSpec:
    #: Package name under services/ and key of config.DEFAULT_PORTS: "wallet", "game_session", ...
    name: str
    #: Full names of the gRPC services served, e.g. ("buraco.v1.WalletService",).
    grpc_services: tuple[str, ...]
    #: Adds the servicer(s) to the server; returns the service's start and stop hooks, if any.
    register: Callable[[grpc.aio.Server, Deps], Lifecycle | None]
    #: The service's Alembic folder.
    migrations: Path
    #: Whether the service calls other services (then production needs BURACO_JWT_PRIVATE_KEY).
    calls_others: bool = False
    #: Extra server interceptors, after the pipeline.
    interceptors: Sequence[grpc.aio.ServerInterceptor] = field(default=())  # type: ignore[type-arg]


class Server:
    """One running service. `start()`, then `wait()` or `stop()`."""

    def __init__(self, spec: ServiceSpec, config: Config, *, tracer_provider: TracerProvider | None = None) -> None:
        self.spec = spec
        self.config = config
        #: OpenTelemetry (services.common.tracing); None: tracing off.
        self.tracer_provider = tracer_provider
        self.verifier: Verifier
        self.minter: Minter | None
        self.verifier, self.minter = keys_from_config(config)
        if spec.calls_others and self.minter is None:
            raise ConfigError(f"BURACO_JWT_PRIVATE_KEY: required, {spec.name} calls other services")
        #: TLS on the port (services.common.tls); None: plaintext. Certificates that do not load stop
        #: the process here (exit 2), before anything else is opened.
        self.server_tls = ServerTls(config.tls) if config.tls.serves_tls else None
        self.metrics = Metrics(spec.name)
        self.pipeline = Pipeline(
            service=spec.name,
            verifier=self.verifier,
            metrics=self.metrics,
            limits=Limits(
                rate_per_second=config.rate_limit_per_second,
                burst=config.rate_limit_burst,
                service_rate_per_second=config.service_rate_limit_per_second,
                max_streams_per_caller=config.max_streams_per_caller,
            ),
        )
        self.db = Database(config.database_url, schema=config.database_schema,
                           connections=config.database_pool_size, application_name=application_name(spec.name),
                           transaction_pooling=config.database_transaction_pooling)
        self.metrics.watch_database(self.db)
        self.clients = Clients(config, self.minter, interceptors=tracing.client_interceptors(tracer_provider))
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        #: The kubelet's probes, on their own plaintext port (the service's may be TLS only):
        #: `readiness` (and ""), SERVING from the start of serving to the start of a stop, and
        #: `liveness`, SERVING for as long as the process answers, draining included, so a replica
        #: that is stopping, busy or briefly starved is taken out of rotation, not restarted.
        self.probes = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self.health_port = 0
        self._probe_server: grpc.aio.Server | None = None
        self.port = 0
        self.metrics_port: int | None = None
        self._server: grpc.aio.Server | None = None
        #: Whether grpc's server was started (it accepts calls).
        self._accepting = False
        #: The service's hooks once their start succeeded (stopped then, once).
        self._lifecycle: Lifecycle | None = None
        #: The task running `start()`, while it runs; set when it has ended (succeeded or not).
        self._starting: asyncio.Task[Any] | None = None
        self._start_over = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    @property
    def stopping(self) -> bool:
        """Whether a stop has begun."""
        return self._stopping is not None

    async def start(self) -> None:
        """Serve. On a failure, or when `stop()` is called meanwhile (which cancels the start), the
        server is stopped cleanly (nothing left bound, running or open) and this raises."""
        self._starting = asyncio.current_task()
        try:
            await self._start()
        except BaseException:
            self._starting = None
            self._start_over.set()
            if self._stopping is None:  # else the stop that cancelled this start is under way
                await self.stop(0)
            raise
        finally:
            self._starting = None
            self._start_over.set()

    async def _start(self) -> None:
        await self._start_probes()
        if self.config.migrate_on_start:
            await migrations.upgrade(self.spec.name, self.spec.migrations, self.db,
                                     timeouts=migration_timeouts(self.config))
        else:
            # Production migrates with the release's Job first; serving on an older schema would
            # fail later, call by call, so refuse to start instead.
            await migrations.check_at_head(self.spec.name, self.spec.migrations, self.db)
        await self.db.check_search_path()  # behind a transaction pooler: the role must name the schema
        server = grpc.aio.server(
            interceptors=[*tracing.server_interceptors(self.tracer_provider), self.pipeline, *self.spec.interceptors],
            options=server_options(self.config),
        )
        deps = Deps(
            self.config, self.db, self.clients, self.minter, logging.getLogger(f"buraco.{self.spec.name}"),
            registry=self.metrics.registry, metrics=self.metrics,
        )
        lifecycle = self.spec.register(server, deps)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if self.config.reflection:
            reflection.enable_server_reflection(
                (
                    *self.spec.grpc_services,
                    health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                    reflection.SERVICE_NAME,
                ),
                server,
            )
        self._server = server
        if self.server_tls is not None:
            self.port = server.add_secure_port(self.config.address, self.server_tls.credentials())
        else:
            self.port = server.add_insecure_port(self.config.address)
        if self.port == 0:
            raise OSError(f"could not bind {self.config.address}")
        if lifecycle is not None:
            await lifecycle.start(Bound(self.config.host, self.port))
            self._lifecycle = lifecycle
        await server.start()
        self._accepting = True
        self.metrics.watch_loop()
        for name in ("", *self.spec.grpc_services):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        for name in ("", READINESS):
            await self.probes.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.config.metrics_enabled:
            self.metrics_port = self.metrics.serve(self.config.host, self.config.metrics_port)
        log.info(
            "listening",
            extra={
                "fields": {
                    "address": self.address,
                    "port": self.port,
                    "metrics_port": self.metrics_port,
                    "health_port": self.health_port,
                    "env": self.config.env,
                }
            },
        )

    async def _start_probes(self) -> None:
        """The probe port, up first: `liveness` answers while the service starts (migrations,
        leases); `readiness` only once it serves."""
        probes = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(self.probes, probes)
        address = f"{self.config.host}:{self.config.health_port}"
        self.health_port = probes.add_insecure_port(address)
        if self.health_port == 0:
            raise OSError(f"could not bind the probe port {address}")
        await probes.start()
        self._probe_server = probes
        for name in ("", READINESS):
            await self.probes.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.probes.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float | None = None) -> asyncio.Task[None]:
        """Begin a graceful stop (idempotent); await the returned task for it to finish."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(
                self._stop(self.config.shutdown_grace_seconds if grace is None else grace)
            )
        return self._stopping

    async def _stop(self, grace: float) -> None:
        starting = self._starting
        if starting is not None:
            # Stopped while starting: the start is cancelled (its hook's start too) and unwinds first.
            starting.cancel()
            await self._start_over.wait()
        log.info("shutting down", extra={"fields": {"grace_seconds": grace}})
        await self.health.enter_graceful_shutdown()
        for name in ("", READINESS):
            await self.probes.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.pipeline.draining = True  # new calls are refused from here on
        server = self._server
        try:
            lifecycle, self._lifecycle = self._lifecycle, None
            if lifecycle is not None:
                try:
                    await lifecycle.stop()
                except Exception:
                    log.exception("the service's stop hook failed", extra={"fields": {"service": self.spec.name}})
            if server is not None:
                if not self._accepting:
                    # A start that failed after the port was bound: grpc frees a bound port only
                    # when a started server stops, so start it (grpc's own start, not a service's
                    # wrapper) to stop it. The pipeline refuses every call by now.
                    with contextlib.suppress(Exception):
                        await type(server).start(server)
                stopping = asyncio.ensure_future(server.stop(grace))
                ended = self.pipeline.end_streams()
                await stopping
                log.info("stopped", extra={"fields": {"streams_ended": ended}})
        finally:
            await self.clients.close()
            await self.db.dispose()
            self.metrics.close()
            if self._probe_server is not None:
                await self._probe_server.stop(None)
                self._probe_server = None
            self._stopped.set()

    async def wait(self) -> None:
        await self._stopped.wait()


#: The probe port's services (`grpc.health.v1`): the kubelet's readinessProbe and livenessProbe.
READINESS = "readiness"
LIVENESS = "liveness"


def server_options(config: Config) -> list[tuple[str, Any]]:
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", SEND_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0),
        # grpc.aio takes up received calls one at a time, each when the event loop comes round to
        # it, so a burst (a gateway's many players on one connection, or many callers at once)
        # waits in grpc's queue of calls not yet taken up. grpc bounds that queue itself (by
        # default from 1,000 calls it cancels new ones at random, all from 3,000, and any that
        # waited 30 s) with CANCELLED, which callers cannot tell from their own cancellation and
        # which the service never sees or logs. The bound is the service's setting instead: one
        # limit, no random drops below it.
        ("grpc.server.max_pending_requests", config.max_pending_calls),
        ("grpc.server.max_pending_requests_hard_limit", config.max_pending_calls),
        ("grpc.server_max_unrequested_time_in_server", config.max_pending_seconds),
    ]
    if config.max_connection_age_seconds > 0:
        # Callers balance over the DNS records of a headless Service; recycling connections makes
        # them re-resolve, so replicas added by the autoscaler get traffic.
        options += [
            ("grpc.max_connection_age_ms", int(config.max_connection_age_seconds * 1000)),
            ("grpc.max_connection_age_grace_ms", int(config.max_connection_age_grace_seconds * 1000)),
        ]
    return options


async def serve(spec: ServiceSpec, config: Config) -> None:
    """Run until SIGTERM or SIGINT, then stop gracefully."""
    tracer_provider = tracing.provider_from_env(spec.name)
    try:
        await _serve(spec, config, tracer_provider)
    finally:
        tracing.shutdown(tracer_provider)


async def _serve(spec: ServiceSpec, config: Config, tracer_provider: TracerProvider | None) -> None:
    server = Server(spec, config, tracer_provider=tracer_provider)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop)
    try:
        await server.start()  # stops the server itself when it fails
    except asyncio.CancelledError:
        if not server.stopping:
            raise
        # SIGTERM or SIGINT while starting: the stop cancelled the start; a clean exit.
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
    await server.wait()


def main(spec: ServiceSpec, argv: Sequence[str] | None = None) -> int:
    """A service's command line. Its `__main__` calls `transport.use_suite_transport()` before
    anything imports grpc, then this; a process whose grpc was imported first logs a warning."""
    suite_transport = transport.use_suite_transport()
    parser = argparse.ArgumentParser(prog=f"python -m services.{spec.name}")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="serve (the default)")
    up = commands.add_parser("migrate", help="upgrade the database")
    up.add_argument("revision", nargs="?", default="head")
    down = commands.add_parser("downgrade", help="downgrade the database")
    down.add_argument("revision")
    new = commands.add_parser("revision", help="write a new migration")
    new.add_argument("-m", "--message", required=True)
    new.add_argument("--autogenerate", action="store_true")
    args = parser.parse_args(argv)
    try:
        config = config_module.load(spec.name)
    except (ConfigError, TlsError) as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    logs.configure(spec.name, config.log_level)
    if not suite_transport:
        log.warning(
            "grpc was imported before the suite chose its transport: this process runs grpc's default "
            "transport; call services.common.transport.use_suite_transport() first in the entry point",
            extra={"fields": {"entry_point": sys.argv[0]}},
        )
    command = args.command or "serve"
    if command == "serve":
        try:
            asyncio.run(serve(spec, config))
        except (ConfigError, TlsError) as error:
            print(f"configuration error: {error}", file=sys.stderr)
            return 2
        except migrations.SchemaNotReadyError as error:
            print(f"database not ready: {error}", file=sys.stderr)
            return 3
        except migrations.MigrationTimeoutError as error:
            print(f"migration failed: {error}", file=sys.stderr)
            return 4
        return 0
    if command == "revision":
        return _revision(spec, config, args)
    try:
        return asyncio.run(_database_command(spec, config, args))
    except migrations.MigrationTimeoutError as error:
        print(f"migration failed: {error}", file=sys.stderr)
        return 4


async def _database_command(spec: ServiceSpec, config: Config, args: Any) -> int:
    db = Database(config.database_url, schema=config.database_schema,
                  transaction_pooling=config.database_transaction_pooling)
    try:
        if args.command == "migrate":
            await migrations.upgrade(spec.name, spec.migrations, db, args.revision, timeouts=migration_timeouts(config))
        else:
            await migrations.downgrade(spec.name, spec.migrations, db, args.revision,
                                       timeouts=migration_timeouts(config))
        revision = await migrations.current(spec.name, spec.migrations, db)
        log.info("database migrated", extra={"fields": {"revision": revision, "url": _safe_url(db.url)}})
    finally:
        await db.dispose()
    return 0


def application_name(service: str) -> str:
    """How a process's connections are named in PostgreSQL (`pg_stat_activity`): the service and
    the process, so connections are counted per replica."""
    return f"buraco-{service}-{os.getpid()}"


def migration_timeouts(config: Config) -> migrations.Timeouts:
    return migrations.Timeouts(config.migration_lock_timeout_seconds, config.migration_statement_timeout_seconds)


def _revision(spec: ServiceSpec, config: Config, args: Any) -> int:
    db = Database(config.database_url, schema=config.database_schema)
    migrations.revision(spec.name, spec.migrations, db, args.message, args.autogenerate)
    return 0


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)

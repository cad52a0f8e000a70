"""The gateway's process: its configuration, its parts, and uvicorn serving them.

Serving: read the configuration (exit 2 on a bad value), set up logs, keys, metrics and tracing,
bind the HTTP port, log one `listening` line (JSON, with the address, the metrics port and the web
address), then serve until SIGTERM or SIGINT. Stopping: readiness answers 503, new sockets are
refused and the open ones closed with 1001 (the browser reconnects, to another replica), uvicorn
lets the requests in flight finish for up to BURACO_SHUTDOWN_GRACE_SECONDS, then the channels to
the services close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn

from services.common import config as common
from services.common import logs, tracing
from services.common.auth import keys_from_config
from services.common.collector import Settler
from services.common.config import Config, ConfigError, Setting
from services.common.metrics import Metrics
from services.gateway import settings as gateway_settings
from services.gateway.app import Gateway, build_app
from services.gateway.settings import DEFAULT_METRICS_PORT, GatewaySettings
from services.gateway.signin import SignIn
from services.gateway.upstream import Upstream

log = logging.getLogger("buraco.gateway")
T = TypeVar("T")
NAME = "gateway"


def load(env: Mapping[str, str] | None = None) -> tuple[Config, GatewaySettings]:
    """The suite-wide settings the gateway shares (as a `Config`) and its own."""
    environment = common.ENV.read(env)
    production = environment == "production"

    def read(setting: Setting[T], default: str | None = None) -> T:
        return setting.read(env, production=production, default=default)

    own = gateway_settings.load(env, production=production)
    config = Config(
        service=NAME,
        env=environment,
        host=read(common.HOST),
        port=own.port,
        metrics_port=read(common.METRICS_PORT, str(DEFAULT_METRICS_PORT)),
        metrics_enabled=read(common.METRICS_ENABLED),
        log_level=read(common.LOG_LEVEL),
        jwt_audience=read(common.JWT_AUDIENCE),
        jwt_public_keys=read(common.JWT_PUBLIC_KEYS),
        jwt_private_key=read(common.JWT_PRIVATE_KEY),
        jwt_leeway_seconds=read(common.JWT_LEEWAY_SECONDS),
        dev_keys_dir=read(common.DEV_KEYS_DIR),
        # TLS to the services (the gateway serves HTTP behind the ingress, which ends the players' TLS)
        tls_ca_file=read(common.TLS_CA_FILE),
        tls_cert_file=read(common.TLS_CERT_FILE),
        tls_key_file=read(common.TLS_KEY_FILE),
        tls_reload_seconds=read(common.TLS_RELOAD_SECONDS),
        shutdown_grace_seconds=read(common.SHUTDOWN_GRACE_SECONDS),
        addresses={name: read(setting) for name, setting in common.ADDRESSES.items()},
    )
    return config, own


@dataclass
class Listening:
    """Where a started gateway serves."""

    host: str
    port: int
    metrics_port: int | None

    @property
    def url(self) -> str:
        host = "localhost" if self.host in ("127.0.0.1", "0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


class _Server(uvicorn.Server):
    """uvicorn's server, telling when it listens and closing the sockets first when it stops.
    SIGTERM and SIGINT begin a graceful stop, after which the process goes on to close its
    channels and exits 0 (uvicorn's own handling raises the signal again once it has stopped,
    which would kill the process before that)."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway, started: Callable[[], None],
                 *, signals: bool) -> None:
        super().__init__(config)
        self.gateway = gateway
        self._started = started
        self._signals = signals

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if not self._signals:
            yield
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.gateway.stop_sessions()
        await super().shutdown(sockets)


class GatewayProcess:
    """The gateway's parts, built from its configuration; `serve()` runs it."""

    def __init__(self, config: Config, settings: GatewaySettings, *, tracer_provider: Any = None) -> None:
        self.config = config
        self.settings = settings
        self.tracer_provider = tracer_provider
        verifier, minter = keys_from_config(config)
        if minter is None:
            raise ConfigError("BURACO_JWT_PRIVATE_KEY: required, the gateway mints the players' tokens")
        self.metrics = Metrics(NAME)
        self.upstream = Upstream(config, minter, token_seconds=settings.token_seconds,
                                 call_seconds=settings.call_seconds,
                                 interceptors=tracing.client_interceptors(tracer_provider))
        self.sign_in = SignIn(settings, minter, verifier, self.upstream.open_account)
        tracer = tracer_provider.get_tracer("buraco.gateway") if tracer_provider is not None else None
        self.gateway = Gateway(settings, self.sign_in, self.upstream, self.metrics, tracer)
        self.app = build_app(self.gateway)
        self.listening: Listening | None = None
        self.ready = asyncio.Event()
        self._server: _Server | None = None

    def _started(self, port: int) -> None:
        metrics_port = None
        if self.config.metrics_enabled:
            metrics_port = self.metrics.serve(self.config.host, self.config.metrics_port)
        self.metrics.watch_loop()
        self.listening = Listening(self.config.host, port, metrics_port)
        log.info("listening", extra={"fields": {
            "address": f"{self.config.host}:{port}", "port": port, "metrics_port": metrics_port,
            "web": self.listening.url, "env": self.config.env, "sign_in": self.settings.sign_in}})
        self.ready.set()

    async def serve(self, *, install_signal_handlers: bool = True) -> None:
        """Serve until stopped (SIGTERM or SIGINT, or `stop()`)."""
        listener = socket.socket(socket.AF_INET6 if ":" in self.config.host else socket.AF_INET)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.config.host, self.settings.port))
        port = int(listener.getsockname()[1])
        server_config = uvicorn.Config(
            self.app, log_config=None, access_log=False, lifespan="off", proxy_headers=False,
            server_header=False, ws="websockets-sansio", ws_max_size=self.settings.max_message_bytes,
            ws_ping_interval=self.settings.ping_seconds, ws_ping_timeout=self.settings.ping_seconds,
            ws_per_message_deflate=False,
            timeout_graceful_shutdown=max(1, int(self.config.shutdown_grace_seconds)),
        )
        server = self._server = _Server(server_config, self.gateway, lambda: self._started(port),
                                        signals=install_signal_handlers)
        settler = Settler()
        settler.start()
        try:
            await server.serve(sockets=[listener])
        finally:
            await settler.stop()
            listener.close()
            await self.upstream.close()
            self.metrics.close()
            log.info("stopped")

    def stop(self) -> None:
        """Begin a graceful stop (as SIGTERM does)."""
        if self._server is not None:
            self._server.should_exit = True


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m services.gateway`: serve (the only command)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in ([], ["serve"]):
        print("usage: python -m services.gateway [serve]", file=sys.stderr)
        return 2
    try:
        config, settings = load()
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    logs.configure(NAME, config.log_level)
    tracer_provider = tracing.provider_from_env(NAME)
    try:
        process = GatewayProcess(config, settings, tracer_provider=tracer_provider)
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(process.serve())
    finally:
        tracing.shutdown(tracer_provider)
    return 0

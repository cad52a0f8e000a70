"""Tracing: off by default; on, a call through two services is one trace (services/common/tracing.py)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from buraco.v1 import ranking_pb2, ranking_pb2_grpc, wallet_pb2, wallet_pb2_grpc
from services.client.channels import act_for
from services.common import logs, tracing
from services.common.auth import Kind
from services.common.config import Config, ConfigError
from services.common.server import Deps, Server, ServiceSpec
from services.ranking.service import SPEC as RANKING
from services.wallet.service import SPEC as WALLET
from tests.services.harness import bearer, dev_minter, make_config

WALLET_GET_ACCOUNT = "/buraco.v1.WalletService/GetAccount"
RANKING_GET_PLAYER = "/buraco.v1.RankingService/GetPlayer"


class Back(wallet_pb2_grpc.WalletServiceServicer):
    """The callee: answers GetAccount and logs inside its span."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def GetAccount(self, request: wallet_pb2.GetAccountRequest, context: Any) -> wallet_pb2.Account:
        self.deps.log.info("back answering", extra={"fields": {"account": request.name}})
        return wallet_pb2.Account(name=request.name)


class Front(ranking_pb2_grpc.RankingServiceServicer):
    """The caller: GetPlayer asks the wallet through deps.clients, as a service does."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def GetPlayer(self, request: ranking_pb2.GetPlayerRequest, context: Any) -> ranking_pb2.PlayerProfile:
        player = request.name.removeprefix("players/")
        account = await self.deps.clients.wallet.GetAccount(
            wallet_pb2.GetAccountRequest(name=f"accounts/player-{player}"), metadata=act_for(player), timeout=10
        )
        return ranking_pb2.PlayerProfile(name=f"players/{account.name.removeprefix('accounts/player-')}")


def _spec(base: ServiceSpec, servicer: Any) -> ServiceSpec:
    def register(server: grpc.aio.Server, deps: Deps) -> None:
        add = (
            wallet_pb2_grpc.add_WalletServiceServicer_to_server
            if servicer is Back
            else ranking_pb2_grpc.add_RankingServiceServicer_to_server
        )
        add(servicer(deps), server)

    return replace(base, register=register)


@contextlib.asynccontextmanager
async def _running(spec: ServiceSpec, config: Config, provider: TracerProvider | None) -> AsyncIterator[Server]:
    server = Server(spec, config, tracer_provider=provider)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(0)


@contextlib.asynccontextmanager
async def _two_services(tmp_path: Path, provider: TracerProvider | None) -> AsyncIterator[str]:
    """The front (ranking) calling the back (wallet), both in process; yields the front's address."""
    async with _running(_spec(WALLET, Back), make_config("wallet", tmp_path), provider) as back:
        front_config = make_config("ranking", tmp_path, addresses={"wallet": back.address})
        async with _running(_spec(RANKING, Front), front_config, provider) as front:
            yield front.address


async def _call_front(address: str, tmp_path: Path) -> ranking_pb2.PlayerProfile:
    token = dev_minter(tmp_path / "dev-keys").mint(Kind.PLAYER, "alice")
    async with grpc.aio.insecure_channel(address) as channel:
        reply: ranking_pb2.PlayerProfile = await ranking_pb2_grpc.RankingServiceStub(channel).GetPlayer(
            ranking_pb2.GetPlayerRequest(name="players/alice"), metadata=bearer(token), timeout=10
        )
        # Probes are never traced.
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    return reply


def _one(spans: list[ReadableSpan], name: str, kind: SpanKind) -> ReadableSpan:
    found = [s for s in spans if s.name == name and s.kind == kind]
    assert len(found) == 1, f"expected one {kind.name} span {name}, got {[(s.name, s.kind.name) for s in spans]}"
    return found[0]


async def test_a_call_through_two_services_is_one_trace(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = tracing.new_provider("test")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with _two_services(tmp_path, provider) as front:
        reply = await _call_front(front, tmp_path)
    assert reply.name == "players/alice"

    spans = list(exporter.get_finished_spans())
    front_server = _one(spans, RANKING_GET_PLAYER, SpanKind.SERVER)
    front_client = _one(spans, WALLET_GET_ACCOUNT, SpanKind.CLIENT)
    back_server = _one(spans, WALLET_GET_ACCOUNT, SpanKind.SERVER)
    assert len(spans) == 3, [s.name for s in spans]  # no span for the health check
    trace_ids = {s.context.trace_id for s in spans if s.context is not None}
    assert len(trace_ids) == 1 and 0 not in trace_ids
    # The chain: gateway call -> front's server span -> its client span -> back's server span.
    assert front_server.parent is None
    assert front_client.parent is not None and front_server.context is not None
    assert front_client.parent.span_id == front_server.context.span_id
    assert back_server.parent is not None and front_client.context is not None
    assert back_server.parent.span_id == front_client.context.span_id
    assert back_server.parent.is_remote
    assert front_server.resource.attributes["service.name"] == "buraco-test"


async def test_tracing_off_adds_no_interceptor(tmp_path: Path) -> None:
    assert tracing.server_interceptors(None) == [] and tracing.client_interceptors(None) == []
    async with _two_services(tmp_path, None) as front:
        reply = await _call_front(front, tmp_path)
    assert reply.name == "players/alice"


def test_tracing_is_off_by_default_and_on_by_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tracing.provider_from_env("wallet", {}) is None
    assert tracing.provider_from_env("wallet", {"BURACO_TRACING_ENABLED": "false"}) is None
    # An exporter to a collector that is not there: nothing is sent until spans are made.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    provider = tracing.provider_from_env("game_session", {"BURACO_TRACING_ENABLED": "true"})
    assert provider is not None
    try:
        assert provider.resource.attributes["service.name"] == "buraco-game-session"
    finally:
        tracing.shutdown(provider)
    named = tracing.new_provider("wallet", {"OTEL_SERVICE_NAME": "wallet-eu"})
    assert named.resource.attributes["service.name"] == "wallet-eu"


def test_a_bad_tracing_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="BURACO_TRACING_ENABLED='maybe'"):
        tracing.enabled({"BURACO_TRACING_ENABLED": "maybe"})


def test_log_lines_inside_a_span_carry_its_ids() -> None:
    provider = tracing.new_provider("test")
    handler = logging.StreamHandler()
    handler.setFormatter(logs.JsonFormatter("test"))
    root = logging.getLogger()
    root.addHandler(handler)
    records: list[str] = []
    handler.emit = lambda record: records.append(handler.format(record))  # type: ignore[method-assign]
    try:
        tracing.install_log_correlation()
        logging.getLogger("buraco.test").warning("outside")
        with provider.get_tracer("test").start_as_current_span("work") as span:
            logging.getLogger("buraco.test").warning("inside", extra={"fields": {"k": 1}})
    finally:
        root.removeHandler(handler)
    outside, inside = (json.loads(r) for r in records)
    assert "trace_id" not in outside
    context = span.get_span_context()
    assert inside["trace_id"] == format(context.trace_id, "032x")
    assert inside["span_id"] == format(context.span_id, "016x")
    assert inside["k"] == 1

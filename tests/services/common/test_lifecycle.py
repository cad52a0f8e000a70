"""A service's start and stop hooks (`Lifecycle`, returned by its `register`): when the frame runs
them. Start: once the port is bound, with the real address, before the first call is served.
Stop: after new calls are refused, while in-flight calls, open streams and the database still
work, before the streams end and the server stops. A failing start, or a stop during the start,
stops the server cleanly."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from sqlalchemy import text

from buraco.v1 import tournament_pb2, tournament_pb2_grpc
from services.common.auth import Kind
from services.common.config import Config
from services.common.interceptor import SHUTDOWN_MESSAGE
from services.common.server import Bound, Deps, Hooks, Lifecycle, Server, ServiceSpec
from services.tournament.service import SPEC as TOURNAMENT
from tests.services.common.test_server import Probe
from tests.services.harness import bearer, dev_minter, make_config


class Recorder:
    """What happened, in order, and the pieces the hooks look at."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.probe: Probe | None = None
        self.deps: Deps | None = None
        self.bound: Bound | None = None


def spec_with(recorder: Recorder, make_hooks: Callable[[Recorder], Lifecycle]) -> ServiceSpec:
    def register(server: grpc.aio.Server, deps: Deps) -> Lifecycle:
        recorder.deps = deps
        recorder.probe = probe = Probe(deps)
        original = probe.GetTournament

        async def get(request: tournament_pb2.GetTournamentRequest, context: object) -> tournament_pb2.Tournament:
            recorder.events.append(f"call {request.name}")
            return await original(request, context)

        probe.GetTournament = get  # type: ignore[method-assign]
        tournament_pb2_grpc.add_TournamentServiceServicer_to_server(probe, server)
        return make_hooks(recorder)

    return replace(TOURNAMENT, register=register)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config("tournament", tmp_path)


def _token(config: Config) -> tuple[tuple[str, str], ...]:
    return bearer(dev_minter(config.dev_keys_dir).mint(Kind.PLAYER, "alice"))


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def test_start_runs_once_bound_with_the_real_address_and_before_the_first_call(config: Config) -> None:
    recorder = Recorder()
    metadata = _token(config)
    early: list[asyncio.Task[tournament_pb2.Tournament]] = []

    def hooks(rec: Recorder) -> Hooks:
        async def start(bound: Bound) -> None:
            rec.bound = bound
            rec.events.append("start")
            # A caller already waiting for the port: it is served only once this hook returned.
            channel = grpc.aio.insecure_channel(bound.address)
            stub = tournament_pb2_grpc.TournamentServiceStub(channel)
            early.append(asyncio.ensure_future(stub.GetTournament(
                tournament_pb2.GetTournamentRequest(name="tournaments/early"), metadata=metadata,
                wait_for_ready=True, timeout=30)))
            await asyncio.sleep(0.5)
            rec.events.append("started")
            early[0].add_done_callback(lambda _: asyncio.ensure_future(channel.close(None)))

        return Hooks(on_start=start)

    server = Server(spec_with(recorder, hooks), config)
    assert config.port == 0
    await server.start()
    try:
        assert recorder.bound is not None
        assert recorder.bound.port == server.port != 0
        assert recorder.bound.address == server.address == f"127.0.0.1:{server.port}"
        assert (await early[0]).name == "tournaments/early"
        assert recorder.events == ["start", "started", "call tournaments/early"]
    finally:
        await server.stop(0)


async def test_stop_runs_after_new_calls_are_refused_and_before_streams_end_and_the_server_stops(
    config: Config,
) -> None:
    recorder = Recorder()
    metadata = _token(config)
    seen: dict[str, object] = {}

    def hooks(rec: Recorder) -> Hooks:
        async def stop() -> None:
            rec.events.append("stop")
            assert rec.probe is not None and rec.deps is not None
            async with grpc.aio.insecure_channel(server.address) as channel:
                stub = tournament_pb2_grpc.TournamentServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.GetTournament(tournament_pb2.GetTournamentRequest(name="tournaments/late"),
                                             metadata=metadata, timeout=10)
                # refused by the frame's pipeline (grpc's server is not stopping yet)
                seen["new call"] = (refused.value.code(), refused.value.details())
            seen["stream open"] = not rec.probe.stream_closed.is_set()
            seen["in-flight call running"] = not slow.done()
            async with rec.deps.db.transaction() as session:
                seen["database"] = (await session.execute(text("SELECT 1"))).scalar_one()
            await asyncio.sleep(0.2)  # a stop that takes a while (releasing leases) holds the rest back
            rec.events.append("stopped")

        return Hooks(on_stop=stop)

    server = Server(spec_with(recorder, hooks), config)
    await server.start()
    assert recorder.probe is not None
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = tournament_pb2_grpc.TournamentServiceStub(channel)
        slow = asyncio.ensure_future(stub.GetTournament(
            tournament_pb2.GetTournamentRequest(name="tournaments/slow"), metadata=metadata, timeout=30))
        await recorder.probe.started.wait()
        stream = stub.WatchTournament(tournament_pb2.WatchTournamentRequest(name="tournaments/t"), metadata=metadata)
        await stream.read()

        async def stream_end() -> None:
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await stream.read()
            recorder.events.append(f"stream ended {ended.value.code().name}")

        ending = asyncio.ensure_future(stream_end())
        stopping = server.stop(grace=30)
        await ending
        assert not stopping.done()  # the in-flight call still holds the stop
        recorder.probe.release.set()
        assert (await slow).name == "tournaments/slow"
        await stopping
    assert seen == {
        "new call": (grpc.StatusCode.UNAVAILABLE, SHUTDOWN_MESSAGE),
        "stream open": True,
        "in-flight call running": True,
        "database": 1,
    }
    assert recorder.events == ["call tournaments/slow", "stop", "stopped", "stream ended UNAVAILABLE"]


async def test_a_failing_start_stops_the_server_cleanly(config: Config) -> None:
    recorder = Recorder()

    def hooks(rec: Recorder) -> Hooks:
        async def start(bound: Bound) -> None:
            rec.bound = bound
            raise RuntimeError("cannot start the loop")

        async def stop() -> None:
            rec.events.append("stop")

        return Hooks(on_start=start, on_stop=stop)

    server = Server(spec_with(recorder, hooks), config)
    with pytest.raises(RuntimeError, match="cannot start the loop"):
        await server.start()
    await asyncio.wait_for(server.wait(), timeout=10)  # stopped, without anyone calling stop()
    assert recorder.bound is not None and recorder.events == []  # a start that failed is not stopped
    assert _port_is_free(recorder.bound.port)
    await server.stop(0)  # idempotent


async def test_a_stop_during_the_start_cancels_it_and_stops_cleanly(config: Config) -> None:
    recorder = Recorder()
    in_start = asyncio.Event()

    def hooks(rec: Recorder) -> Hooks:
        async def start(bound: Bound) -> None:
            rec.bound = bound
            in_start.set()
            try:
                await asyncio.Event().wait()  # a start that takes its time (taking tables over)
            except asyncio.CancelledError:
                rec.events.append("start cancelled")
                raise

        async def stop() -> None:
            rec.events.append("stop")

        return Hooks(on_start=start, on_stop=stop)

    server = Server(spec_with(recorder, hooks), config)
    starting = asyncio.ensure_future(server.start())
    await in_start.wait()
    await asyncio.wait_for(server.stop(), timeout=10)
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert recorder.events == ["start cancelled"]
    assert recorder.bound is not None and _port_is_free(recorder.bound.port)


async def test_a_failing_stop_is_logged_and_the_stop_goes_on(
    config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    caplog.set_level(logging.ERROR, logger="buraco.server")

    def hooks(rec: Recorder) -> Hooks:
        async def stop() -> None:
            raise RuntimeError("lease release failed")

        return Hooks(on_stop=stop)

    server = Server(spec_with(recorder, hooks), config)
    await server.start()
    port = server.port
    await asyncio.wait_for(server.stop(0), timeout=10)
    assert any("stop hook failed" in record.getMessage() for record in caplog.records)
    assert _port_is_free(port)


async def test_a_service_without_hooks_serves_as_before(config: Config) -> None:
    recorder = Recorder()

    def register(server: grpc.aio.Server, deps: Deps) -> None:
        recorder.probe = Probe(deps)
        tournament_pb2_grpc.add_TournamentServiceServicer_to_server(recorder.probe, server)

    server = Server(replace(TOURNAMENT, register=register), config)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = tournament_pb2_grpc.TournamentServiceStub(channel)
            reply = await stub.GetTournament(tournament_pb2.GetTournamentRequest(name="tournaments/t"),
                                             metadata=_token(config), timeout=10)
        assert reply.name == "tournaments/t"
    finally:
        await server.stop(0)

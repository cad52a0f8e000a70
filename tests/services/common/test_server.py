"""The server frame, in-process: health, reflection, the auth interceptor, error mapping, limits,
request ids, metrics and graceful shutdown. A probe servicer stands in for real RPC bodies."""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc.aio import EOF  # type: ignore[attr-defined]
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from buraco.v1 import tournament_pb2, tournament_pb2_grpc
from services.client.channels import act_for, channel
from services.common import logs
from services.common.auth import Kind, Minter, current_identity
from services.common.config import Config
from services.common.errors import NotFoundError, NotOwnerError, not_built
from services.common.server import Deps, Server, ServiceSpec
from services.tournament.api import TournamentApi
from services.tournament.service import SPEC as TOURNAMENT
from tests.services.harness import bearer, dev_minter, make_config, running

SERVICE = "buraco.v1.TournamentService"


class Probe(TournamentApi):
    """Behaviours chosen by the requested name."""

    address = ""
    token = ""

    def __init__(self, deps: Deps) -> None:
        super().__init__(deps)
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.stream_closed = asyncio.Event()
        self.streams_closed = 0

    async def GetTournament(
        self, request: tournament_pb2.GetTournamentRequest, context: Any
    ) -> tournament_pb2.Tournament:
        identity = current_identity()
        if request.name == "tournaments/slow":
            self.started.set()
            await self.release.wait()
        elif request.name == "tournaments/boom":
            raise RuntimeError("secret detail")
        elif request.name == "tournaments/elsewhere":
            raise NotOwnerError("tables/t1", "10.1.2.3:50052", epoch=7)
        elif request.name == "tournaments/missing":
            raise NotFoundError("tournaments/missing does not exist")
        elif request.name == "tournaments/rid":
            return tournament_pb2.Tournament(name=request.name, display_name=logs.request_id_var.get() or "")
        elif request.name == "tournaments/hop":
            async with channel(self.address, token=self.token) as onward:
                stub = tournament_pb2_grpc.TournamentServiceStub(onward)
                return await stub.GetTournament(tournament_pb2.GetTournamentRequest(name="tournaments/rid"))
        return tournament_pb2.Tournament(
            name=request.name, display_name=identity.principal, cancel_reason=identity.acting_for or ""
        )

    async def ListTournaments(
        self, request: tournament_pb2.ListTournamentsRequest, context: Any
    ) -> tournament_pb2.ListTournamentsResponse:
        # An RPC whose body is still to be built, as the services' unbuilt RPCs answer.
        raise not_built("buraco.v1.TournamentService/ListTournaments", 8)

    async def WatchTournament(
        self, request: tournament_pb2.WatchTournamentRequest, context: Any
    ) -> AsyncIterator[tournament_pb2.TournamentUpdate]:
        if request.name == "tournaments/firehose":  # never waits for news: always sending
            while True:
                yield tournament_pb2.TournamentUpdate(tournament=tournament_pb2.Tournament(name=request.name))
        try:
            yield tournament_pb2.TournamentUpdate(tournament=tournament_pb2.Tournament(name=request.name))
            await asyncio.Event().wait()  # a live stream with nothing more to say
        finally:
            self.streams_closed += 1
            self.stream_closed.set()


class Harness:
    def __init__(self, server: Server, probe: Probe, minter: Minter, aio_channel: grpc.aio.Channel) -> None:
        self.server, self.probe, self.minter, self.channel = server, probe, minter, aio_channel
        self.stub = tournament_pb2_grpc.TournamentServiceStub(aio_channel)

    def token(
        self, kind: Kind = Kind.PLAYER, name: str = "alice", **kwargs: Any
    ) -> tuple[tuple[str, str], ...]:
        return bearer(self.minter.mint(kind, name, **kwargs))

    async def get(self, name: str, metadata: Any = None, **kwargs: Any) -> tournament_pb2.Tournament:
        request = tournament_pb2.GetTournamentRequest(name=name)
        metadata = self.token() if metadata is None else metadata
        return await self.stub.GetTournament(request, metadata=metadata, timeout=10, **kwargs)


def probe_spec(probes: list[Probe]) -> ServiceSpec:
    def register(server: grpc.aio.Server, deps: Deps) -> None:
        probe = Probe(deps)
        probes.append(probe)
        tournament_pb2_grpc.add_TournamentServiceServicer_to_server(probe, server)

    return replace(TOURNAMENT, register=register)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config("tournament", tmp_path)


@pytest.fixture
async def harness(config: Config) -> AsyncIterator[Harness]:
    probes: list[Probe] = []
    async with running(probe_spec(probes), config) as server:
        probe = probes[0]
        minter = dev_minter(config.dev_keys_dir)
        probe.address, probe.token = server.address, minter.mint(Kind.SERVICE, "tournament")
        async with grpc.aio.insecure_channel(server.address) as aio_channel:
            yield Harness(server, probe, minter, aio_channel)


def pairs(metadata: Any) -> set[tuple[str, Any]]:
    return {(item[0], item[1]) for item in metadata or ()}


async def read(stream: Any) -> tournament_pb2.TournamentUpdate:
    update: tournament_pb2.TournamentUpdate = await stream.read()
    return update


async def code_of(call: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code()


# -- health and reflection ------------------------------------------------------------------------


async def test_health_serving_without_a_token(harness: Harness) -> None:
    health = health_pb2_grpc.HealthStub(harness.channel)
    for service in ("", SERVICE):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert (
        await code_of(health.Check(health_pb2.HealthCheckRequest(service="nope")))
        == grpc.StatusCode.NOT_FOUND
    )


async def test_reflection_lists_the_services(harness: Harness) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(harness.channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    names = set()
    async for reply in stub.ServerReflectionInfo(iter([request])):
        names = {service.name for service in reply.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names


# -- authentication -------------------------------------------------------------------------------


async def test_the_handler_sees_the_authenticated_identity(harness: Harness) -> None:
    assert (await harness.get("tournaments/t")).display_name == "players/alice"
    service = await harness.get("tournaments/t", harness.token(Kind.SERVICE, "matchmaking"))
    assert service.display_name == "services/matchmaking"


async def test_missing_token_is_unauthenticated(harness: Harness) -> None:
    assert await code_of(harness.get("tournaments/t", ())) == grpc.StatusCode.UNAUTHENTICATED
    assert await code_of(harness.get("tournaments/t", (("authorization", "Basic abc"),))) == (
        grpc.StatusCode.UNAUTHENTICATED
    )


async def test_bad_signature_is_unauthenticated(harness: Harness) -> None:
    header, payload, signature = harness.minter.mint(Kind.PLAYER, "alice").split(".")
    forged = harness.minter.mint(Kind.ADMIN, "alice").split(".")[1]  # a valid body, the wrong signature
    for token in (f"{header}.{forged}.{signature}", f"{header}.{payload}.{signature[:-4]}AAAA", "not.a.jwt"):
        assert await code_of(harness.get("tournaments/t", bearer(token))) == grpc.StatusCode.UNAUTHENTICATED


async def test_token_from_an_unknown_key_is_unauthenticated(harness: Harness, tmp_path: Path) -> None:
    from services.common.auth import ensure_dev_keys, load_private_key

    other, _ = ensure_dev_keys(tmp_path / "other-keys")
    stranger = Minter(load_private_key(other), audience="buraco")
    token = bearer(stranger.mint(Kind.ADMIN, "mallory"))
    assert await code_of(harness.get("tournaments/t", token)) == grpc.StatusCode.UNAUTHENTICATED


async def test_expired_token_is_unauthenticated(harness: Harness) -> None:
    expired = harness.token(ttl=-60)  # expired a minute ago, beyond the 10 s leeway
    assert await code_of(harness.get("tournaments/t", expired)) == grpc.StatusCode.UNAUTHENTICATED


async def test_wrong_audience_is_unauthenticated(harness: Harness, config: Config) -> None:
    from services.common.auth import ensure_dev_keys, load_private_key

    private, _ = ensure_dev_keys(config.dev_keys_dir)
    elsewhere = Minter(load_private_key(private), audience="another-system")
    token = bearer(elsewhere.mint(Kind.SERVICE, "wallet"))
    assert await code_of(harness.get("tournaments/t", token)) == grpc.StatusCode.UNAUTHENTICATED


async def test_a_player_acting_for_another_is_denied(harness: Harness) -> None:
    metadata = harness.token(Kind.PLAYER, "alice") + act_for("bob")
    assert await code_of(harness.get("tournaments/t", metadata)) == grpc.StatusCode.PERMISSION_DENIED
    # naming themselves is allowed
    assert (
        await harness.get("tournaments/t", harness.token() + act_for("alice"))
    ).display_name == "players/alice"


async def test_a_service_may_act_for_a_player_and_it_is_recorded(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="buraco.rpc")
    reply = await harness.get("tournaments/t", harness.token(Kind.SERVICE, "matchmaking") + act_for("bob"))
    assert (reply.display_name, reply.cancel_reason) == ("services/matchmaking", "bob")
    records = [r for r in caplog.records if getattr(r, "fields", {}).get("acting_for") == "players/bob"]
    assert records, "a call made on behalf of a player must be logged with the player"


# -- errors ---------------------------------------------------------------------------------------


async def test_domain_errors_map_to_their_status(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.get("tournaments/missing")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "tournaments/missing does not exist"


async def test_a_replica_that_does_not_own_the_table_says_where_the_owner_is(harness: Harness) -> None:
    from grpc_status import rpc_status

    from buraco.v1 import common_pb2

    call = harness.stub.GetTournament(
        tournament_pb2.GetTournamentRequest(name="tournaments/elsewhere"), metadata=harness.token()
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert ("buraco-owner-address", "10.1.2.3:50052") in pairs(info.value.trailing_metadata())
    status = await rpc_status.aio.from_call(call)  # type: ignore[attr-defined]
    assert status is not None
    details = common_pb2.NotOwnerDetails()
    assert status.details[0].Unpack(details)
    assert (details.resource, details.owner_address, details.epoch) == ("tables/t1", "10.1.2.3:50052", 7)


async def test_unexpected_errors_are_internal_with_a_fixed_message(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="buraco.rpc")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.get("tournaments/boom", (*harness.token(), (logs.REQUEST_ID_HEADER, "req-boom-1")))
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in (info.value.details() or "")
    assert ("x-request-id", "req-boom-1") in pairs(info.value.trailing_metadata())
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and "secret detail" in str(logged[0].exc_info[1] if logged[0].exc_info else "")


async def test_unbuilt_rpcs_are_unimplemented_with_a_clear_message(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.stub.ListTournaments(tournament_pb2.ListTournamentsRequest(), metadata=harness.token())
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert info.value.details() == (
        "buraco.v1.TournamentService/ListTournaments is not implemented yet (issue #8 builds it)"
    )


async def test_undecodable_bytes_are_invalid_argument(harness: Harness) -> None:
    raw = harness.channel.unary_unary(f"/{SERVICE}/GetTournament", None, None)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw(b"\xff\xff\xff\xff\x0f", metadata=harness.token())
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith("request:")


async def test_oversized_requests_are_refused(harness: Harness, config: Config) -> None:
    big = "x" * (config.max_message_bytes + 1)
    assert await code_of(harness.get(big)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (await harness.get("tournaments/t")).name == "tournaments/t"  # the server carries on


# -- limits ---------------------------------------------------------------------------------------


async def test_rate_limit_per_caller(tmp_path: Path) -> None:
    config = make_config("tournament", tmp_path, rate_limit_per_second=0.01, rate_limit_burst=3)
    async with running(probe_spec([]), config) as server, grpc.aio.insecure_channel(server.address) as ch:
        minter = dev_minter(config.dev_keys_dir)
        harness = Harness(server, Probe.__new__(Probe), minter, ch)
        for _ in range(3):
            await harness.get("tournaments/t")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await harness.get("tournaments/t")
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry-after-ms" in dict(pairs(info.value.trailing_metadata()))
        # another caller has its own bucket
        assert (await harness.get("tournaments/t", harness.token(name="bob"))).display_name == "players/bob"


async def test_a_burst_of_calls_on_one_connection_is_served_whole(tmp_path: Path) -> None:
    """A gateway multiplexes many players over one connection: a burst of calls larger than grpc's
    own default queue of calls not yet taken up by the service (1,000, then dropping at random up to
    3,000) must all be served, none cancelled by grpc before the service sees it."""
    burst = 3000
    config = make_config("tournament", tmp_path, rate_limit_burst=burst)
    async with running(probe_spec([]), config) as server, grpc.aio.insecure_channel(server.address) as ch:
        harness = Harness(server, Probe.__new__(Probe), dev_minter(config.dev_keys_dir), ch)
        token = harness.token()

        async def call(n: int) -> str:
            try:
                request = tournament_pb2.GetTournamentRequest(name=f"tournaments/t{n}")
                return (await harness.stub.GetTournament(request, metadata=token, timeout=120)).name
            except grpc.aio.AioRpcError as error:
                return error.code().name

        answers = await asyncio.gather(*(call(n) for n in range(burst)))
    refused = Counter(answer for answer in answers if not answer.startswith("tournaments/"))
    assert refused == Counter()
    assert sorted(answers) == sorted(f"tournaments/t{n}" for n in range(burst))


def test_the_queue_of_calls_not_yet_taken_up_is_configured(tmp_path: Path) -> None:
    from services.common.server import server_options

    options = dict(server_options(make_config("wallet", tmp_path, max_pending_calls=12_000, max_pending_seconds=45)))
    assert options["grpc.server.max_pending_requests"] == 12_000
    assert options["grpc.server.max_pending_requests_hard_limit"] == 12_000
    assert options["grpc.server_max_unrequested_time_in_server"] == 45


async def test_open_streams_per_caller_are_bounded(tmp_path: Path) -> None:
    config = make_config("tournament", tmp_path, max_streams_per_caller=2)
    probes: list[Probe] = []
    async with running(probe_spec(probes), config) as server, grpc.aio.insecure_channel(server.address) as ch:
        minter = dev_minter(config.dev_keys_dir)
        stub = tournament_pb2_grpc.TournamentServiceStub(ch)
        alice = bearer(minter.mint(Kind.PLAYER, "alice"))
        request = tournament_pb2.WatchTournamentRequest(name="tournaments/t")
        open_streams = [stub.WatchTournament(request, metadata=alice) for _ in range(2)]
        for stream in open_streams:
            await stream.read()  # the first update: the stream is open
        third = stub.WatchTournament(request, metadata=alice)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await third.read()
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        bob = stub.WatchTournament(request, metadata=bearer(minter.mint(Kind.PLAYER, "bob")))
        assert (await read(bob)).tournament.name == "tournaments/t"
        open_streams[0].cancel()
        # The server releases the slot in the same step that closes the handler's generator.
        await probes[0].stream_closed.wait()
        assert server.pipeline.stream_limiter.open("players/alice") == 1
        again = stub.WatchTournament(request, metadata=alice)
        assert (await read(again)).tournament.name == "tournaments/t"
        for stream in (open_streams[1], bob, again):
            stream.cancel()


# -- request ids, metrics -------------------------------------------------------------------------


async def test_request_id_is_returned_and_follows_the_call_across_services(harness: Harness) -> None:
    metadata = (*harness.token(), (logs.REQUEST_ID_HEADER, "trace-42"))
    call = harness.stub.GetTournament(
        tournament_pb2.GetTournamentRequest(name="tournaments/hop"), metadata=metadata
    )
    reply = await call
    assert reply.display_name == "trace-42"  # what the second hop saw
    assert ("x-request-id", "trace-42") in pairs(await call.trailing_metadata())
    fresh = harness.stub.GetTournament(
        tournament_pb2.GetTournamentRequest(name="tournaments/rid"), metadata=harness.token()
    )
    generated = (await fresh).display_name
    assert len(generated) == 32 and ("x-request-id", generated) in tuple(
        await fresh.trailing_metadata() or ()
    )


async def test_metrics_count_calls_by_method_and_code(tmp_path: Path) -> None:
    config = make_config("tournament", tmp_path, metrics_enabled=True)
    async with running(probe_spec([]), config) as server, grpc.aio.insecure_channel(server.address) as ch:
        harness = Harness(server, Probe.__new__(Probe), dev_minter(config.dev_keys_dir), ch)
        await harness.get("tournaments/t")
        await code_of(harness.get("tournaments/missing"))
        await code_of(harness.get("tournaments/t", ()))
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
    method = f"/{SERVICE}/GetTournament"
    assert f'buraco_rpc_calls_total{{code="OK",method="{method}",service="tournament"}} 1.0' in body
    assert f'buraco_rpc_errors_total{{code="NOT_FOUND",method="{method}",service="tournament"}} 1.0' in body
    assert (
        f'buraco_rpc_errors_total{{code="UNAUTHENTICATED",method="{method}",service="tournament"}} 1.0'
        in body
    )
    assert f'buraco_rpc_duration_seconds_count{{method="{method}",service="tournament"}} 3.0' in body


async def test_a_blocked_event_loop_shows_in_the_loop_lag_histogram(tmp_path: Path) -> None:
    config = make_config("tournament", tmp_path, metrics_enabled=True)
    async with running(probe_spec([]), config) as server:
        metrics = server.metrics

        def sample(name: str, **labels: str) -> float:
            value = metrics.registry.get_sample_value(name, {"service": "tournament", **labels})
            return 0.0 if value is None else value

        def late() -> float:  # samples over 0.1 s
            return sample("buraco_event_loop_lag_seconds_count") - sample(
                "buraco_event_loop_lag_seconds_bucket", le="0.1")

        await metrics.next_lag_sample()  # the watcher runs from the start
        before = late()
        # A blocking call on the loop (the stimulus, not a wait): the timer due within the watcher's
        # 0.1 s interval fires at least 0.2 s late.
        time.sleep(0.3)
        for _ in range(3):
            await metrics.next_lag_sample()
            if late() > before:
                break
        assert late() >= before + 1
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
    assert 'buraco_event_loop_lag_seconds_bucket{le="0.1",service="tournament"}' in body
    assert metrics.lag_samples >= 2


# -- graceful shutdown ----------------------------------------------------------------------------


async def test_graceful_stop_finishes_calls_ends_streams_and_refuses_new_calls(harness: Harness) -> None:
    slow = asyncio.ensure_future(harness.get("tournaments/slow"))
    await harness.probe.started.wait()
    stream = harness.stub.WatchTournament(
        tournament_pb2.WatchTournamentRequest(name="tournaments/t"), metadata=harness.token(name="bob")
    )
    await stream.read()

    stopping = harness.server.stop(grace=30)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await stream.read()
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "resume" in (ended.value.details() or "")
    assert await code_of(harness.get("tournaments/t")) == grpc.StatusCode.UNAVAILABLE
    assert not slow.done() and not stopping.done()  # the in-flight call holds the stop

    harness.probe.release.set()
    assert (await slow).name == "tournaments/slow"
    await stopping


async def probe(address: str, service: str) -> int:
    async with grpc.aio.insecure_channel(address) as probe_channel:
        answer = await health_pb2_grpc.HealthStub(probe_channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5
        )
        return int(answer.status)


async def test_the_probe_port_takes_a_draining_replica_out_of_rotation_without_restarting_it(
        harness: Harness) -> None:
    """The kubelet's probes: `readiness` fails from the start of a stop, `liveness` answers SERVING
    until the process is gone, so a draining replica is not restarted mid-drain."""
    server = harness.server
    address = f"127.0.0.1:{server.health_port}"
    assert server.health_port not in (0, server.port)
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    assert await probe(address, "readiness") == serving
    assert await probe(address, "") == serving
    assert await probe(address, "liveness") == serving
    async with grpc.aio.insecure_channel(address) as probe_channel:  # the probe port serves nothing else
        stub = tournament_pb2_grpc.TournamentServiceStub(probe_channel)
        assert await code_of(stub.GetTournament(
            tournament_pb2.GetTournamentRequest(name="tournaments/t"), metadata=harness.token(), timeout=5
        )) == grpc.StatusCode.UNIMPLEMENTED

    slow = asyncio.ensure_future(harness.get("tournaments/slow"))
    await harness.probe.started.wait()
    stopping = server.stop(grace=30)
    while await probe(address, "readiness") != not_serving:
        await asyncio.sleep(0)  # the stop has begun on the next turns of the loop
    assert await probe(address, "") == not_serving
    assert await probe(address, "liveness") == serving  # draining: alive, not to be restarted
    assert not stopping.done()
    harness.probe.release.set()
    await slow
    await stopping
    assert await code_of(probe(address, "liveness")) == grpc.StatusCode.UNAVAILABLE  # gone with the process


async def test_graceful_stop_also_ends_streams_that_are_busy_sending(harness: Harness) -> None:
    stream = harness.stub.WatchTournament(
        tournament_pb2.WatchTournamentRequest(name="tournaments/firehose"), metadata=harness.token()
    )
    await stream.read()
    stopping = harness.server.stop(grace=30)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        while await stream.read() is not EOF:
            pass
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    await stopping


def test_connections_are_recycled_only_when_configured(tmp_path: Path) -> None:
    from services.common.server import server_options

    plain = dict(server_options(make_config("wallet", tmp_path)))
    assert "grpc.max_connection_age_ms" not in plain
    aged = dict(
        server_options(
            make_config("wallet", tmp_path, max_connection_age_seconds=300.0, max_connection_age_grace_seconds=20.0)
        )
    )
    assert aged["grpc.max_connection_age_ms"] == 300_000
    assert aged["grpc.max_connection_age_grace_ms"] == 20_000


async def test_a_server_that_does_not_migrate_will_not_start_on_an_empty_database(tmp_path: Path) -> None:
    from services.common.migrations import SchemaNotReadyError

    config = make_config("tournament", tmp_path, migrate_on_start=False)
    server = Server(TOURNAMENT, config)
    with pytest.raises(SchemaNotReadyError, match="never migrated"):
        await server.start()
    await server.stop(0)

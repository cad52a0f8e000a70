"""TLS on the gRPC servers and the calls between services (services.common.tls), with certificates
made at test time: verified calls, mutual TLS, a wrong CA and expired certificates refused, and
certificates renewed in place used without a restart."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from buraco.v1 import tournament_pb2
from services.client.channels import ChannelPool, Clients
from services.common import config as config_module
from services.common.config import Config, ConfigError
from services.common.server import Server
from services.common.tls import ClientTls, ServerTls, TlsError, TlsSettings, host_of
from services.tournament.service import SPEC as TOURNAMENT
from tests.services.common.certs import Authority, authority, leaf
from tests.services.harness import dev_minter, make_config, running


@pytest.fixture(scope="module")
def ca() -> Authority:
    return authority("buraco test CA")


@pytest.fixture(scope="module")
def other_ca() -> Authority:
    return authority("someone else's CA")


def server_config(tmp_path: Path, ca: Authority, *, mutual: bool = False, expired: bool = False,
                  reload_seconds: float = 10.0) -> Config:
    cert, key = leaf(ca, tmp_path, "server", expired=expired)
    return make_config(
        "tournament", tmp_path, tls_cert_file=cert, tls_key_file=key,
        tls_client_ca_file=ca.write(tmp_path / "client-ca.pem") if mutual else None,
        tls_reload_seconds=reload_seconds,
    )


def caller(tmp_path: Path, server: Server, trusted: Authority | None, *, name: str = "caller",
           client_of: Authority | None = None, expired: bool = False) -> Clients:
    """Another service's clients, calling `server` at `localhost:<port>`: trusting `trusted` (None:
    plaintext), presenting a certificate of `client_of` when given."""
    cert = key = None
    if client_of is not None:
        cert, key = leaf(client_of, tmp_path, name, expired=expired)
    config = make_config(
        "matchmaking", tmp_path,
        tls_ca_file=trusted.write(tmp_path / f"{name}-ca.pem") if trusted is not None else None,
        tls_cert_file=cert, tls_key_file=key,
        addresses={"tournament": f"localhost:{server.port}", "game_session": f"localhost:{server.port}"},
    )
    return Clients(config, dev_minter(config.dev_keys_dir))


async def health(channel: grpc.aio.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
    return int(answer.status)


async def refused(channel: grpc.aio.Channel) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await health(channel)
    return info.value.code()


@pytest.fixture
async def tls_server(tmp_path: Path, ca: Authority) -> AsyncIterator[Server]:
    async with running(TOURNAMENT, server_config(tmp_path, ca)) as server:
        yield server


async def test_a_verified_call_between_services_over_tls(tmp_path: Path, ca: Authority, tls_server: Server) -> None:
    clients = caller(tmp_path, tls_server, ca)
    try:
        assert await health(clients.channel("tournament")) == health_pb2.HealthCheckResponse.SERVING
        # an authenticated call (this service's token) on the same verified channel
        answer = await clients.tournament.ListTournaments(tournament_pb2.ListTournamentsRequest(), timeout=5)
        assert list(answer.tournaments) == []
    finally:
        await clients.close()


async def test_a_plaintext_client_cannot_call_a_tls_server(tmp_path: Path, tls_server: Server) -> None:
    clients = caller(tmp_path, tls_server, None)
    try:
        assert await refused(clients.channel("tournament")) == grpc.StatusCode.UNAVAILABLE
    finally:
        await clients.close()


async def test_a_server_whose_certificate_another_ca_signed_is_refused(
        tmp_path: Path, other_ca: Authority, tls_server: Server) -> None:
    clients = caller(tmp_path, tls_server, other_ca)  # trusts only another CA
    try:
        assert await refused(clients.channel("tournament")) == grpc.StatusCode.UNAVAILABLE
    finally:
        await clients.close()


async def test_a_server_with_an_expired_certificate_is_refused(tmp_path: Path, ca: Authority) -> None:
    async with running(TOURNAMENT, server_config(tmp_path, ca, expired=True)) as server:
        clients = caller(tmp_path, server, ca)
        try:
            assert await refused(clients.channel("tournament")) == grpc.StatusCode.UNAVAILABLE
        finally:
            await clients.close()


async def test_a_certificate_for_another_name_is_refused(tmp_path: Path, ca: Authority) -> None:
    cert, key = leaf(ca, tmp_path, "elsewhere", hosts=("wallet-headless",))
    config = make_config("tournament", tmp_path, tls_cert_file=cert, tls_key_file=key)
    async with running(TOURNAMENT, config) as server:
        clients = caller(tmp_path, server, ca)  # calls localhost: the certificate names wallet-headless
        try:
            assert await refused(clients.channel("tournament")) == grpc.StatusCode.UNAVAILABLE
        finally:
            await clients.close()


async def test_a_replica_reached_at_its_pod_address_is_verified_by_the_service_name(
        tmp_path: Path, ca: Authority, tls_server: Server) -> None:
    """A table's owner is reached at its own address (an IP here), which its certificate does not
    name: the game-session address's host (localhost) is verified instead."""
    clients = caller(tmp_path, tls_server, ca)
    pool = ChannelPool(2, tls=clients.tls, server_name=clients.replica_server_name)
    try:
        assert clients.replica_server_name == "localhost"
        address = f"127.0.0.1:{tls_server.port}"
        assert await health(clients.channel_at(address)) == health_pb2.HealthCheckResponse.SERVING
        assert await health(pool.get(address)) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await pool.close()
        await clients.close()


# -- mutual TLS ---------------------------------------------------------------------------------------

@pytest.fixture
async def mutual_server(tmp_path: Path, ca: Authority) -> AsyncIterator[Server]:
    async with running(TOURNAMENT, server_config(tmp_path, ca, mutual=True)) as server:
        yield server


async def test_mutual_tls_admits_a_client_certificate_of_the_ca(
        tmp_path: Path, ca: Authority, mutual_server: Server) -> None:
    clients = caller(tmp_path, mutual_server, ca, client_of=ca)
    try:
        assert await health(clients.channel("tournament")) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await clients.close()


@pytest.mark.parametrize("client", ["none", "other CA", "expired"])
async def test_mutual_tls_refuses_a_client_without_a_valid_certificate(
        tmp_path: Path, ca: Authority, other_ca: Authority, mutual_server: Server, client: str) -> None:
    if client == "none":
        clients = caller(tmp_path, mutual_server, ca)
    elif client == "other CA":
        clients = caller(tmp_path, mutual_server, ca, client_of=other_ca)
    else:
        clients = caller(tmp_path, mutual_server, ca, client_of=ca, expired=True)
    try:
        assert await refused(clients.channel("tournament")) == grpc.StatusCode.UNAVAILABLE
    finally:
        await clients.close()


# -- rotation -----------------------------------------------------------------------------------------

async def test_a_renewed_server_certificate_is_served_without_a_restart(tmp_path: Path, ca: Authority) -> None:
    """The operator's rotation: the server's files are replaced by a certificate of a new CA; new
    connections get it, while a bad renewal (a key of another certificate) keeps the last good one."""
    config = server_config(tmp_path, ca, reload_seconds=0)
    new_ca = authority("next CA")
    async with running(TOURNAMENT, config) as server:
        assert server.server_tls is not None
        old = caller(tmp_path, server, ca, name="old")
        try:
            assert await health(old.channel("tournament")) == health_pb2.HealthCheckResponse.SERVING
        finally:
            await old.close()
        cert, key = leaf(new_ca, tmp_path, "renewed")
        assert config.tls_cert_file is not None and config.tls_key_file is not None
        shutil.copy(cert, config.tls_cert_file)
        shutil.copy(key, config.tls_key_file)
        new = caller(tmp_path, server, new_ca, name="new")
        stale = caller(tmp_path, server, ca, name="stale")
        try:
            assert await health(new.channel("tournament")) == health_pb2.HealthCheckResponse.SERVING
            assert await refused(stale.channel("tournament")) == grpc.StatusCode.UNAVAILABLE
        finally:
            await new.close()
            await stale.close()
        assert server.server_tls.reloads == 1
        # a renewal gone wrong: the certificate's key is not the one written beside it
        _, wrong_key = leaf(new_ca, tmp_path, "unrelated")
        shutil.copy(wrong_key, config.tls_key_file)
        again = caller(tmp_path, server, new_ca, name="again")
        try:
            assert await health(again.channel("tournament")) == health_pb2.HealthCheckResponse.SERVING
        finally:
            await again.close()
        assert server.server_tls.reloads == 1


async def test_a_caller_makes_new_channels_when_its_ca_bundle_changes(
        tmp_path: Path, ca: Authority, other_ca: Authority) -> None:
    async with running(TOURNAMENT, server_config(tmp_path, ca)) as server:
        clients = caller(tmp_path, server, other_ca, name="rotating")
        assert clients.tls is not None
        clients.tls.settings = replace(clients.tls.settings, reload_seconds=0.0)
        clients.tls._next_check = 0.0
        try:
            first = clients.channel("tournament")
            assert await refused(first) == grpc.StatusCode.UNAVAILABLE
            assert clients.tls.settings.ca_file is not None
            ca.write(clients.tls.settings.ca_file)  # the bundle now trusts the server's CA
            second = clients.channel("tournament")
            assert second is not first and clients.tls.version == 1
            assert await health(second) == health_pb2.HealthCheckResponse.SERVING
        finally:
            await clients.close()


# -- settings -----------------------------------------------------------------------------------------

def test_a_certificate_without_its_key_is_a_configuration_error(tmp_path: Path, ca: Authority) -> None:
    cert, _ = leaf(ca, tmp_path, "lonely")
    with pytest.raises(ConfigError, match="BURACO_TLS_CERT_FILE and BURACO_TLS_KEY_FILE go together"):
        config_module.load("ranking", {"BURACO_TLS_CERT_FILE": str(cert)})
    with pytest.raises(ConfigError, match="asks for mutual TLS"):
        config_module.load("ranking", {"BURACO_TLS_CLIENT_CA_FILE": str(ca.write(tmp_path / "ca.pem"))})
    with pytest.raises(ConfigError, match="no such file"):
        config_module.load("ranking", {"BURACO_TLS_CA_FILE": str(tmp_path / "missing.pem")})


def test_files_that_do_not_load_stop_the_server_before_it_starts(tmp_path: Path, ca: Authority) -> None:
    cert, _ = leaf(ca, tmp_path, "one")
    _, other_key = leaf(ca, tmp_path, "two")
    with pytest.raises(TlsError, match="is not the key of the certificate"):
        ServerTls(TlsSettings(cert_file=cert, key_file=other_key))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(TlsError, match="not a PEM certificate chain"):
        ServerTls(TlsSettings(cert_file=garbage, key_file=other_key))
    with pytest.raises(TlsError, match="not a PEM bundle of CA certificates"):
        ClientTls(TlsSettings(ca_file=garbage))
    config = make_config("tournament", tmp_path, tls_cert_file=cert, tls_key_file=other_key)
    with pytest.raises(TlsError):
        Server(TOURNAMENT, config)


@pytest.mark.parametrize(("target", "host"), [
    ("localhost:50053", "localhost"),
    ("dns:///wallet-headless:50053", "wallet-headless"),
    ("dns://10.0.0.10:53/wallet-headless:50053", "wallet-headless"),
    ("wallet-headless.buraco.svc.cluster.local:50053", "wallet-headless.buraco.svc.cluster.local"),
    ("[::1]:50053", "::1"),
    ("ipv4:10.0.0.1:50052,10.0.0.2:50052", None),
])
def test_the_name_a_certificate_must_carry_for_a_target(target: str, host: str | None) -> None:
    assert host_of(target) == host


"""The edge's rules: the client's address behind trusted proxies, origins, rate limits, the gRPC
status to HTTP table, and the gateway's settings."""

from __future__ import annotations

import ipaddress

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import status_pb2

from buraco.v1 import common_pb2
from services.common.config import ConfigError
from services.gateway import settings as gateway_settings
from services.gateway.edge import Limits, client_address, origin_allowed, own_origin
from services.gateway.errors import HIDDEN, HTTP_STATUS, EdgeError, from_rpc
from services.gateway.settings import GatewaySettings

PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("192.168.1.1/32"))


@pytest.mark.parametrize(
    ("peer", "forwarded", "expected"),
    [
        ("203.0.113.5", None, "203.0.113.5"),  # no proxy in front
        ("203.0.113.5", "198.51.100.7", "203.0.113.5"),  # an untrusted peer cannot name the client
        ("10.1.2.3", "198.51.100.7", "198.51.100.7"),  # the load balancer names it
        ("10.1.2.3", "1.1.1.1, 198.51.100.7, 10.9.9.9", "198.51.100.7"),  # the right-most untrusted hop
        ("10.1.2.3", "10.9.9.9, 192.168.1.1", "10.1.2.3"),  # only proxies: the peer
        ("10.1.2.3", "not-an-address, 198.51.100.7", "198.51.100.7"),
        ("10.1.2.3", "198.51.100.7, garbage", "10.1.2.3"),  # a malformed hop: trust nothing
    ],
)
def test_the_client_address_is_read_only_from_trusted_proxies(peer: str, forwarded: str | None, expected: str) -> None:
    assert client_address(peer, forwarded, PROXIES) == expected


def test_without_trusted_proxies_the_header_is_ignored() -> None:
    assert client_address("203.0.113.5", "198.51.100.7", ()) == "203.0.113.5"


def test_origins() -> None:
    own = own_origin({"host": "play.example:8080"}, "http")
    assert own == "http://play.example:8080"
    assert own_origin({"host": "play.example", "x-forwarded-proto": "https"}, "http") == "https://play.example"
    assert origin_allowed(None, own, ())  # not a browser
    assert origin_allowed(own, own, ())
    assert not origin_allowed("https://evil.example", own, ())
    assert origin_allowed("https://app.example", own, ("https://app.example",))
    assert origin_allowed("https://any.example", own, ("*",))


def test_rate_limits_say_when_to_retry() -> None:
    limits = Limits(GatewaySettings(rate_per_second=1, rate_burst=2, address_rate_per_second=1, address_rate_burst=1))
    limits.by_player("ana")
    limits.by_player("ana")
    with pytest.raises(EdgeError) as refused:
        limits.by_player("ana")
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.http_status == 429
    assert refused.value.retry_after_ms is not None and 0 < refused.value.retry_after_ms <= 1000
    assert refused.value.headers() == {"Retry-After": "1"}
    limits.by_player("bia")  # another player's bucket is full
    limits.by_address("203.0.113.5")
    with pytest.raises(EdgeError):
        limits.by_address("203.0.113.5")


def test_sockets_per_player_are_capped_and_counted_back() -> None:
    limits = Limits(GatewaySettings(sockets_per_player=2))
    limits.open_socket("ana")
    limits.open_socket("ana")
    with pytest.raises(EdgeError) as refused:
        limits.open_socket("ana")
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    limits.close_socket("ana")
    limits.open_socket("ana")
    assert limits.sockets("ana") == 2


def test_every_grpc_status_has_one_http_status() -> None:
    assert set(HTTP_STATUS) == set(grpc.StatusCode)
    assert HTTP_STATUS[grpc.StatusCode.FAILED_PRECONDITION] == 400
    assert HTTP_STATUS[grpc.StatusCode.UNAUTHENTICATED] == 401
    assert HTTP_STATUS[grpc.StatusCode.RESOURCE_EXHAUSTED] == 429
    assert HTTP_STATUS[grpc.StatusCode.UNAVAILABLE] == 503


def rpc_error(code: grpc.StatusCode, details: str,
              trailing: tuple[tuple[str, str | bytes], ...] = ()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details, "")


@pytest.mark.parametrize("code", [grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DATA_LOSS])
def test_internal_failures_leak_nothing(code: grpc.StatusCode) -> None:
    assert code in HIDDEN
    error = from_rpc(rpc_error(code, "Traceback: psycopg at 10.0.0.7:5432"), "wallet", "req-1")
    assert error.body() == {"code": code.name.lower(), "message": "internal error (request id req-1)", "details": []}


def test_unavailable_names_the_service_but_no_address() -> None:
    error = from_rpc(rpc_error(grpc.StatusCode.UNAVAILABLE, "failed to connect to 10.0.0.7:50052",
                               (("retry-after-ms", "1500"),)), "game_session", "r")
    assert "10.0.0.7" not in error.message and "game_session" in error.message
    assert error.http_status == 503 and error.headers() == {"Retry-After": "2"}
    assert {"retryAfterMs": 1500} in error.body()["details"]


def test_a_stale_move_tells_the_current_seq_and_hides_the_owner() -> None:
    routing = any_pb2.Any()
    routing.Pack(common_pb2.NotOwnerDetails(resource="tables/t", owner_address="10.0.0.9:50052", epoch=3))
    status = status_pb2.Status(code=9, message="stale", details=[routing]).SerializeToString()
    trailing = (("buraco-current-seq", "41"), ("grpc-status-details-bin", status))
    error = from_rpc(rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "the table is at seq 41, not 40", trailing),
                     "game_session", "r")
    body = error.body()
    assert body["code"] == "failed_precondition" and body["message"] == "the table is at seq 41, not 40"
    assert body["details"] == [{"currentSeq": 41}]
    assert "10.0.0.9" not in str(body)


def test_settings_refuse_what_production_must_not_run() -> None:
    with pytest.raises(ConfigError, match="BURACO_GATEWAY_SIGN_IN"):
        gateway_settings.load({"BURACO_GATEWAY_SIGN_IN": "dev"}, production=True)
    with pytest.raises(ConfigError, match="BURACO_GATEWAY_OIDC_ISSUER"):
        gateway_settings.load({}, production=True)  # oidc by default there, and nothing configured
    with pytest.raises(ConfigError, match="ALLOWED_ORIGINS"):
        gateway_settings.load({"BURACO_GATEWAY_ALLOWED_ORIGINS": "play.example"})
    with pytest.raises(ConfigError, match="TRUSTED_PROXIES"):
        gateway_settings.load({"BURACO_GATEWAY_TRUSTED_PROXIES": "10.0.0.0/33"})
    oidc = {"BURACO_GATEWAY_OIDC_ISSUER": "https://id.example", "BURACO_GATEWAY_OIDC_AUDIENCE": "web",
            "BURACO_GATEWAY_OIDC_JWKS": "https://id.example/jwks"}
    with pytest.raises(ConfigError, match="`\\*`"):
        gateway_settings.load({**oidc, "BURACO_GATEWAY_ALLOWED_ORIGINS": "*"}, production=True)
    loaded = gateway_settings.load({**oidc, "BURACO_GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1",
                                    "BURACO_GATEWAY_ALLOWED_ORIGINS": "https://a.example,https://b.example"},
                                   production=True)
    assert loaded.sign_in == "oidc" and loaded.allowed_origins == ("https://a.example", "https://b.example")
    assert loaded.trusted_proxies == PROXIES

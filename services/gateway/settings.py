"""The gateway's own settings (environment variables, read when it starts).

They sit beside the suite-wide settings it shares with the services (`BURACO_ENV`, `BURACO_HOST`,
the metrics port, the log level, the JWT audience and keys, the services' addresses), declared
once in `SETTINGS` (name, kind and bounds, default, meaning, production rules), from which `load()`
reads them and scripts/gen_settings_doc.py writes the README's "Gateway configuration". A bad
value stops the gateway before it binds (exit status 2, the message names the variable).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from services.common.config import ConfigError, Flag, Maybe, Number, OneOf, Setting, Text, Whole

T = TypeVar("T")

#: The gateway's default HTTP port and metrics port (`make run` prints the web address).
DEFAULT_PORT = 8080
DEFAULT_METRICS_PORT = 9106


def _origins(raw: str) -> str | None:
    for origin in (o.strip() for o in raw.split(",")):
        if origin and origin != "*" and not origin.startswith(("http://", "https://")):
            return f"{origin!r} is not an origin (`https://host[:port]`)"
    return None


def _networks(raw: str) -> str | None:
    for item in (n.strip() for n in raw.split(",")):
        if not item:
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return f"{item!r} is not an address or a network (CIDR)"
    return None


def _jwks(raw: str) -> str | None:
    if raw.startswith(("https://", "http://", "/", "./")) or raw.endswith(".json"):
        return None
    return "a JWKS URL (`https://...`) or the path of a JWKS file (`.json`)"


PORT = Setting("BURACO_GATEWAY_PORT", Whole(0, 65535), str(DEFAULT_PORT),
               "HTTP and WebSocket port (the web table, the JSON API, the socket); 0 picks a free port")
SIGN_IN = Setting(
    "BURACO_GATEWAY_SIGN_IN",
    OneOf(("dev", "oidc")),
    "dev",
    "`dev`: a name and no password (local mode only); `oidc`: an OpenID Connect ID token from "
    "BURACO_GATEWAY_OIDC_ISSUER",
    default_text="dev in local, oidc in production",
    production_default="oidc",
)
OIDC_ISSUER = Setting("BURACO_GATEWAY_OIDC_ISSUER", Maybe(Text("URL")), "",
                      "the `iss` an ID token must carry (required with `oidc`)")
OIDC_AUDIENCE = Setting("BURACO_GATEWAY_OIDC_AUDIENCE", Maybe(Text()), "",
                        "the `aud` an ID token must carry: this frontend's client id (required with `oidc`)")
OIDC_JWKS = Setting("BURACO_GATEWAY_OIDC_JWKS", Maybe(Text("URL or path", _jwks)), "",
                    "the issuer's signing keys: a JWKS URL (fetched, cached, refetched for an unknown "
                    "`kid`) or a JWKS file (required with `oidc`)")
TOKEN_SECONDS = Setting("BURACO_GATEWAY_TOKEN_SECONDS", Number(30, 86_400), "900",
                        "how long a player token the gateway mints is valid (refresh before it ends)")
SESSION_SECONDS = Setting("BURACO_GATEWAY_SESSION_SECONDS", Number(60, 30 * 86_400), "43200",
                          "how long after sign-in tokens may still be refreshed (then: sign in again)")
ALLOWED_ORIGINS = Setting(
    "BURACO_GATEWAY_ALLOWED_ORIGINS", Text("comma-separated origins", _origins), "",
    "origins allowed to call the API from a browser and open the socket (CORS and the WebSocket "
    "`Origin`), besides the gateway's own; `*`: any (local mode only)",
    default_text="(none: the gateway's own origin)",
)
TRUSTED_PROXIES = Setting(
    "BURACO_GATEWAY_TRUSTED_PROXIES", Text("comma-separated addresses or CIDRs", _networks), "",
    "peers whose `X-Forwarded-For` names the client (a load balancer, an ingress); from any other "
    "peer the connection's own address is the client's",
    default_text="(none)",
)
RATE_PER_SECOND = Setting("BURACO_GATEWAY_RATE_PER_SECOND", Number(0.1, 100_000), "20",
                          "requests and socket messages per second per player")
RATE_BURST = Setting("BURACO_GATEWAY_RATE_BURST", Whole(1, 1_000_000), "40", "bucket size per player")
ADDRESS_RATE_PER_SECOND = Setting("BURACO_GATEWAY_ADDRESS_RATE_PER_SECOND", Number(0.1, 1_000_000), "100",
                                  "requests, sign-ins and sockets opened per second per client address")
ADDRESS_RATE_BURST = Setting("BURACO_GATEWAY_ADDRESS_RATE_BURST", Whole(1, 1_000_000), "200",
                             "bucket size per client address")
MAX_BODY_BYTES = Setting("BURACO_GATEWAY_MAX_BODY_BYTES", Whole(256, 16 << 20), "65536",
                         "largest request body (413 beyond)")
MAX_MESSAGE_BYTES = Setting("BURACO_GATEWAY_MAX_MESSAGE_BYTES", Whole(256, 16 << 20), "65536",
                            "largest socket message from a client (the socket is closed with 1009 beyond)")
SOCKETS_PER_PLAYER = Setting("BURACO_GATEWAY_SOCKETS_PER_PLAYER", Whole(1, 1000), "4",
                             "open sockets per player (a new one beyond is refused with 4429)")
STREAMS_PER_SOCKET = Setting("BURACO_GATEWAY_STREAMS_PER_SOCKET", Whole(1, 1000), "8",
                             "subscriptions (a table, a ticket, the lobby...) open at once on one socket")
PING_SECONDS = Setting("BURACO_GATEWAY_PING_SECONDS", Number(1, 3600), "20",
                       "seconds between WebSocket pings; a pong missing for as long closes the socket")
IDLE_SECONDS = Setting("BURACO_GATEWAY_IDLE_SECONDS", Number(5, 86_400), "300",
                       "a socket with no message from its client for this long, and nothing subscribed, is closed")
HELLO_SECONDS = Setting("BURACO_GATEWAY_HELLO_SECONDS", Number(0.5, 600), "10",
                        "how long a new socket may take to send its `hello` (its token)")
CALL_SECONDS = Setting("BURACO_GATEWAY_CALL_SECONDS", Number(0.1, 600), "10",
                       "deadline of one call to a service, retries included")
WEB = Setting("BURACO_GATEWAY_WEB", Flag(), "true", "serve the web table (static files) at `/`")

#: The gateway's settings, in the README's order.
SETTINGS: tuple[Setting[Any], ...] = (
    PORT,
    SIGN_IN,
    OIDC_ISSUER,
    OIDC_AUDIENCE,
    OIDC_JWKS,
    TOKEN_SECONDS,
    SESSION_SECONDS,
    ALLOWED_ORIGINS,
    TRUSTED_PROXIES,
    RATE_PER_SECOND,
    RATE_BURST,
    ADDRESS_RATE_PER_SECOND,
    ADDRESS_RATE_BURST,
    MAX_BODY_BYTES,
    MAX_MESSAGE_BYTES,
    SOCKETS_PER_PLAYER,
    STREAMS_PER_SOCKET,
    PING_SECONDS,
    IDLE_SECONDS,
    HELLO_SECONDS,
    CALL_SECONDS,
    WEB,
)


def _split(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


@dataclass(frozen=True)
class GatewaySettings:
    port: int = 0
    sign_in: str = "dev"
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_jwks: str | None = None
    token_seconds: float = 900.0
    session_seconds: float = 43_200.0
    allowed_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(default=())
    rate_per_second: float = 20.0
    rate_burst: int = 40
    address_rate_per_second: float = 100.0
    address_rate_burst: int = 200
    max_body_bytes: int = 65_536
    max_message_bytes: int = 65_536
    sockets_per_player: int = 4
    streams_per_socket: int = 8
    ping_seconds: float = 20.0
    idle_seconds: float = 300.0
    hello_seconds: float = 10.0
    call_seconds: float = 10.0
    web: bool = True


def load(env: Mapping[str, str] | None = None, *, production: bool = False) -> GatewaySettings:
    """The settings from `env` (default os.environ); ConfigError names a bad variable or a
    combination production refuses."""

    def read(setting: Setting[T]) -> T:
        return setting.read(env, production=production)

    settings = GatewaySettings(
        port=read(PORT),
        sign_in=read(SIGN_IN),
        oidc_issuer=read(OIDC_ISSUER),
        oidc_audience=read(OIDC_AUDIENCE),
        oidc_jwks=read(OIDC_JWKS),
        token_seconds=read(TOKEN_SECONDS),
        session_seconds=read(SESSION_SECONDS),
        allowed_origins=_split(read(ALLOWED_ORIGINS)),
        trusted_proxies=tuple(ipaddress.ip_network(n, strict=False) for n in _split(read(TRUSTED_PROXIES))),
        rate_per_second=read(RATE_PER_SECOND),
        rate_burst=read(RATE_BURST),
        address_rate_per_second=read(ADDRESS_RATE_PER_SECOND),
        address_rate_burst=read(ADDRESS_RATE_BURST),
        max_body_bytes=read(MAX_BODY_BYTES),
        max_message_bytes=read(MAX_MESSAGE_BYTES),
        sockets_per_player=read(SOCKETS_PER_PLAYER),
        streams_per_socket=read(STREAMS_PER_SOCKET),
        ping_seconds=read(PING_SECONDS),
        idle_seconds=read(IDLE_SECONDS),
        hello_seconds=read(HELLO_SECONDS),
        call_seconds=read(CALL_SECONDS),
        web=read(WEB),
    )
    if production and settings.sign_in == "dev":
        raise ConfigError(f"{SIGN_IN.name}=dev: refused when BURACO_ENV=production (players sign in with oidc)")
    if production and "*" in settings.allowed_origins:
        raise ConfigError(f"{ALLOWED_ORIGINS.name}: `*` is refused when BURACO_ENV=production")
    if settings.sign_in == "oidc":
        for setting, value in ((OIDC_ISSUER, settings.oidc_issuer), (OIDC_AUDIENCE, settings.oidc_audience),
                               (OIDC_JWKS, settings.oidc_jwks)):
            if not value:
                raise ConfigError(f"{setting.name}: required when {SIGN_IN.name}=oidc")
    return settings

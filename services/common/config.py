"""Configuration from environment variables, with documented defaults, failing fast on bad values.

Every setting is declared once in `SETTINGS` (name, default, meaning); the README's configuration
table lists the same names (a test keeps them in step). `load(spec_name, default_port, env)` reads
them into a frozen `Config`; a bad value raises `ConfigError` naming the variable, and the
service exits with status 2 before it binds a port.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

#: Default ports of the services, and the order `make run` starts them in.
DEFAULT_PORTS: dict[str, int] = {
    "matchmaking": 50051,
    "game_session": 50052,
    "wallet": 50053,
    "ranking": 50054,
    "tournament": 50055,
}

ENVIRONMENTS = ("local", "production")


class ConfigError(ValueError):
    """A setting is missing or has a bad value; the message names the variable."""


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    meaning: str


def _s(name: str, default: str, meaning: str) -> Setting:
    return Setting(name, default, meaning)


SETTINGS: tuple[Setting, ...] = (
    _s(
        "BURACO_ENV",
        "local",
        "`local` (dev keys generated, migrations at start) or `production` (keys required, dev keys refused)",
    ),
    _s("BURACO_HOST", "127.0.0.1", "address to bind (`0.0.0.0` in containers)"),
    _s("BURACO_PORT", "per service: 50051..50055", "gRPC port; 0 picks a free port"),
    _s(
        "BURACO_METRICS_PORT",
        "9100 + last digit of the default port (9101..9105)",
        "Prometheus `/metrics` port; 0 picks a free port",
    ),
    _s("BURACO_METRICS_ENABLED", "true", "serve Prometheus metrics"),
    _s("BURACO_REFLECTION", "true", "serve gRPC server reflection"),
    _s(
        "BURACO_DATABASE_URL",
        "sqlite+aiosqlite:///var/<service>.db",
        "SQLAlchemy URL; `postgresql://...` and `sqlite:///...` are accepted and given their async driver",
    ),
    _s(
        "BURACO_DATABASE_SCHEMA",
        "(none)",
        "PostgreSQL schema for this service's tables (created by the migrations)",
    ),
    _s(
        "BURACO_MIGRATE_ON_START",
        "true in local, false in production",
        "run the service's migrations before serving",
    ),
    _s("BURACO_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR; DEBUG logs every call"),
    _s("BURACO_JWT_AUDIENCE", "buraco", "the `aud` every token must carry"),
    _s(
        "BURACO_JWT_PUBLIC_KEYS",
        "local: the dev key; production: required",
        "file of PEM public keys "
        "(Ed25519, ECDSA P-256 or RSA) that tokens may be signed with; the token's `kid` picks one",
    ),
    _s(
        "BURACO_JWT_PRIVATE_KEY",
        "local: the dev key; production: (none)",
        "PEM private key this service signs its own service tokens with, for calls to other services",
    ),
    _s("BURACO_JWT_LEEWAY_SECONDS", "10", "clock skew allowed on `exp`, `iat` and `nbf`"),
    _s("BURACO_DEV_KEYS_DIR", "var/dev-keys", "where local mode keeps its generated dev key pair"),
    _s("BURACO_RATE_LIMIT_PER_SECOND", "20", "calls per second per player or admin (token bucket)"),
    _s("BURACO_RATE_LIMIT_BURST", "40", "bucket size per player or admin"),
    _s("BURACO_SERVICE_RATE_LIMIT_PER_SECOND", "2000", "calls per second per service identity"),
    _s("BURACO_MAX_MESSAGE_BYTES", "65536", "largest request accepted (RESOURCE_EXHAUSTED above)"),
    _s("BURACO_MAX_STREAMS_PER_CALLER", "8", "open server streams per caller"),
    _s("BURACO_SHUTDOWN_GRACE_SECONDS", "10", "how long in-flight calls may run on after SIGTERM"),
    _s(
        "BURACO_GRPC_MAX_CONNECTION_AGE_SECONDS",
        "0 (never)",
        "close client connections after this age (GOAWAY), so callers re-resolve DNS and spread over new "
        "replicas; 0 keeps connections forever",
    ),
    _s(
        "BURACO_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS",
        "30",
        "how long calls and streams may run on a connection after its GOAWAY (streams then resume)",
    ),
    _s("BURACO_IDEMPOTENCY_RETENTION_HOURS", "72", "how long answers are kept for retried request ids"),
    _s("BURACO_MATCHMAKING_ADDRESS", "localhost:50051", "where the other services reach matchmaking"),
    _s("BURACO_GAME_SESSION_ADDRESS", "localhost:50052", "where the other services reach game sessions"),
    _s("BURACO_WALLET_ADDRESS", "localhost:50053", "where the other services reach the wallet"),
    _s("BURACO_RANKING_ADDRESS", "localhost:50054", "where the other services reach ranking"),
    _s("BURACO_TOURNAMENT_ADDRESS", "localhost:50055", "where the other services reach tournaments"),
)


@dataclass(frozen=True)
class Config:
    service: str
    env: str = "local"
    host: str = "127.0.0.1"
    port: int = 0
    metrics_port: int = 0
    metrics_enabled: bool = True
    reflection: bool = True
    database_url: str = "sqlite+aiosqlite:///:memory:"
    database_schema: str | None = None
    migrate_on_start: bool = True
    log_level: str = "INFO"
    jwt_audience: str = "buraco"
    jwt_public_keys: Path | None = None
    jwt_private_key: Path | None = None
    jwt_leeway_seconds: float = 10.0
    dev_keys_dir: Path = Path("var/dev-keys")
    rate_limit_per_second: float = 20.0
    rate_limit_burst: int = 40
    service_rate_limit_per_second: float = 2000.0
    max_message_bytes: int = 65536
    max_streams_per_caller: int = 8
    shutdown_grace_seconds: float = 10.0
    max_connection_age_seconds: float = 0.0
    max_connection_age_grace_seconds: float = 30.0
    idempotency_retention_hours: float = 72.0
    addresses: Mapping[str, str] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.env == "local"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def int_setting(name: str, raw: str, low: int, high: int) -> int:
    """A whole-number setting within [low, high], or a ConfigError naming it (every service's)."""
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a whole number") from None
    if not low <= value <= high:
        raise ConfigError(f"{name}={raw!r}: must be between {low} and {high}")
    return value


def number_setting(name: str, raw: str, low: float, high: float) -> float:
    """A number setting within [low, high] (NaN refused), or a ConfigError naming it."""
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number") from None
    if not low <= value <= high:  # also refuses nan
        raise ConfigError(f"{name}={raw!r}: must be between {low:g} and {high:g}")
    return value


def _bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r}: expected true or false")


def _choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    if raw not in choices:
        raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return raw


def _path(name: str, raw: str, *, must_exist: bool) -> Path:
    path = Path(raw)
    if must_exist and not path.is_file():
        raise ConfigError(f"{name}={raw!r}: no such file")
    return path


def normalise_database_url(url: str) -> str:
    """Give plain `postgresql://` and `sqlite://` URLs their async drivers."""
    for plain, driver in (
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
        ("sqlite://", "sqlite+aiosqlite://"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    return url


def load(service: str, env: Mapping[str, str] | None = None) -> Config:
    """Read the settings of `service` (a key of DEFAULT_PORTS) from `env` (default os.environ)."""
    source = os.environ if env is None else env

    def get(name: str, default: str, parse: Callable[[str, str], T]) -> T:
        raw = source.get(name)
        return parse(name, default if raw is None or raw == "" else raw)

    environment = get("BURACO_ENV", "local", lambda n, r: _choice(n, r, ENVIRONMENTS))
    local = environment == "local"
    port = get("BURACO_PORT", str(DEFAULT_PORTS[service]), lambda n, r: int_setting(n, r, 0, 65535))
    metrics_default = 9100 + DEFAULT_PORTS[service] % 10
    database_url = get(
        "BURACO_DATABASE_URL", f"sqlite+aiosqlite:///var/{service}.db", lambda n, r: normalise_database_url(r)
    )
    if not database_url.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
        raise ConfigError(f"BURACO_DATABASE_URL={database_url!r}: expected a sqlite or postgresql URL")
    schema = source.get("BURACO_DATABASE_SCHEMA") or None
    if schema is not None and not schema.replace("_", "").isalnum():
        raise ConfigError(f"BURACO_DATABASE_SCHEMA={schema!r}: letters, digits and _ only")
    public_keys = get("BURACO_JWT_PUBLIC_KEYS", "", lambda n, r: _path(n, r, must_exist=True) if r else None)
    private_key = get("BURACO_JWT_PRIVATE_KEY", "", lambda n, r: _path(n, r, must_exist=True) if r else None)
    if not local and public_keys is None:
        raise ConfigError("BURACO_JWT_PUBLIC_KEYS: required when BURACO_ENV=production")
    addresses = {
        name: source.get(f"BURACO_{name.upper()}_ADDRESS") or f"localhost:{default}"
        for name, default in DEFAULT_PORTS.items()
    }
    return Config(
        service=service,
        env=environment,
        host=get("BURACO_HOST", "127.0.0.1", lambda n, r: r),
        port=port,
        metrics_port=get("BURACO_METRICS_PORT", str(metrics_default), lambda n, r: int_setting(n, r, 0, 65535)),
        metrics_enabled=get("BURACO_METRICS_ENABLED", "true", _bool),
        reflection=get("BURACO_REFLECTION", "true", _bool),
        database_url=database_url,
        database_schema=schema,
        migrate_on_start=get("BURACO_MIGRATE_ON_START", "true" if local else "false", _bool),
        log_level=get(
            "BURACO_LOG_LEVEL",
            "INFO",
            lambda n, r: _choice(n, r.upper(), ("DEBUG", "INFO", "WARNING", "ERROR")),
        ),
        jwt_audience=get("BURACO_JWT_AUDIENCE", "buraco", lambda n, r: r),
        jwt_public_keys=public_keys,
        jwt_private_key=private_key,
        jwt_leeway_seconds=get("BURACO_JWT_LEEWAY_SECONDS", "10", lambda n, r: number_setting(n, r, 0, 300)),
        dev_keys_dir=Path(source.get("BURACO_DEV_KEYS_DIR") or "var/dev-keys"),
        rate_limit_per_second=get("BURACO_RATE_LIMIT_PER_SECOND", "20", lambda n, r: number_setting(n, r, 0.01, 1e6)),
        rate_limit_burst=get("BURACO_RATE_LIMIT_BURST", "40", lambda n, r: int_setting(n, r, 1, 1_000_000)),
        service_rate_limit_per_second=get(
            "BURACO_SERVICE_RATE_LIMIT_PER_SECOND", "2000", lambda n, r: number_setting(n, r, 0.01, 1e7)
        ),
        max_message_bytes=get("BURACO_MAX_MESSAGE_BYTES", "65536", lambda n, r: int_setting(n, r, 1024, 64 << 20)),
        max_streams_per_caller=get("BURACO_MAX_STREAMS_PER_CALLER", "8", lambda n, r: int_setting(n, r, 1, 10_000)),
        shutdown_grace_seconds=get("BURACO_SHUTDOWN_GRACE_SECONDS", "10", lambda n, r: number_setting(n, r, 0, 3600)),
        max_connection_age_seconds=get(
            "BURACO_GRPC_MAX_CONNECTION_AGE_SECONDS", "0", lambda n, r: number_setting(n, r, 0, 30 * 86400)
        ),
        max_connection_age_grace_seconds=get(
            "BURACO_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS", "30", lambda n, r: number_setting(n, r, 0, 86400)
        ),
        idempotency_retention_hours=get(
            "BURACO_IDEMPOTENCY_RETENTION_HOURS", "72", lambda n, r: number_setting(n, r, 0.01, 24 * 365)
        ),
        addresses=addresses,
    )

"""Configuration from environment variables, with documented defaults, failing fast on bad values.

Every setting is declared once, as a `Setting`: its variable's name, its kind (how a value is
parsed and which values it takes: a whole number within bounds, a number, true or false, one of
some words, a file...), its default, its meaning, and whether production requires or refuses it.
That one declaration is what the loaders read and what the README's configuration tables show
(`scripts/gen_settings_doc.py` writes them; a test fails when the README is not in step):

    PORT = Setting("BURACO_PORT", Whole(0, 65535), "", "gRPC port; 0 picks a free port",
                   default_text="per service: 50051..50055")
    port = PORT.read(env, default="50053")        # the loader gives a computed default

The suite-wide settings are `SETTINGS` below; each service's own are the `SETTINGS` of its
`services/<service>/settings.py`, read by its `load()`. A bad value raises `ConfigError` naming
the variable, and the service exits with status 2 before it binds a port. An empty variable is
an unset one.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from services.common.tls import TlsSettings

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


# -- kinds of values ------------------------------------------------------------------------------


def _figure(value: float) -> str:
    """A bound as the tables show it: 0.01, 65,535, 1,000,000."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


class Kind(abc.ABC, Generic[T]):
    """How a setting's text becomes its value, and which values it takes."""

    @abc.abstractmethod
    def parse(self, name: str, raw: str) -> T:
        """The value of `raw` (never empty, unless the kind takes empty: `Maybe`), or a
        ConfigError naming `name`."""

    @abc.abstractmethod
    def values(self) -> str:
        """The values it takes, as the README's tables say it."""


def int_setting(name: str, raw: str, low: int, high: int) -> int:
    """A whole-number setting within [low, high], or a ConfigError naming it."""
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


@dataclass(frozen=True)
class Whole(Kind[int]):
    low: int
    high: int

    def parse(self, name: str, raw: str) -> int:
        return int_setting(name, raw, self.low, self.high)

    def values(self) -> str:
        return f"whole number, {_figure(self.low)} to {_figure(self.high)}"


@dataclass(frozen=True)
class Number(Kind[float]):
    low: float
    high: float

    def parse(self, name: str, raw: str) -> float:
        return number_setting(name, raw, self.low, self.high)

    def values(self) -> str:
        return f"number, {_figure(self.low)} to {_figure(self.high)}"


@dataclass(frozen=True)
class Flag(Kind[bool]):
    def parse(self, name: str, raw: str) -> bool:
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}={raw!r}: expected true or false")

    def values(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class OneOf(Kind[str]):
    choices: tuple[str, ...]
    #: Whether `debug` is read as `DEBUG` (the choices are upper case then).
    upper: bool = False

    def parse(self, name: str, raw: str) -> str:
        value = raw.upper() if self.upper else raw
        if value not in self.choices:
            raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(self.choices)}")
        return value

    def values(self) -> str:
        words = [f"`{choice}`" for choice in self.choices]
        return f"{', '.join(words[:-1])} or {words[-1]}"


@dataclass(frozen=True)
class Text(Kind[str]):
    #: What the text is, for the tables.
    what: str = "text"
    #: A check of the text: None when it is good, else why not.
    check: Callable[[str], str | None] | None = None

    def parse(self, name: str, raw: str) -> str:
        problem = self.check(raw) if self.check is not None else None
        if problem is not None:
            raise ConfigError(f"{name}={raw!r}: {problem}")
        return raw

    def values(self) -> str:
        return self.what


@dataclass(frozen=True)
class File(Kind[Path]):
    """The path of a file that must exist."""

    def parse(self, name: str, raw: str) -> Path:
        path = Path(raw)
        if not path.is_file():
            raise ConfigError(f"{name}={raw!r}: no such file")
        return path

    def values(self) -> str:
        return "path of an existing file"


@dataclass(frozen=True)
class Folder(Kind[Path]):
    def parse(self, name: str, raw: str) -> Path:
        return Path(raw)

    def values(self) -> str:
        return "path of a folder"


@dataclass(frozen=True)
class DatabaseUrl(Kind[str]):
    """A SQLite or PostgreSQL URL, given its async driver."""

    def parse(self, name: str, raw: str) -> str:
        url = normalise_database_url(raw)
        if not url.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            raise ConfigError(f"{name}={url!r}: expected a sqlite or postgresql URL")
        return url

    def values(self) -> str:
        return "`sqlite://` or `postgresql://` URL"


@dataclass(frozen=True)
class TimeZone(Kind[ZoneInfo]):
    def parse(self, name: str, raw: str) -> ZoneInfo:
        try:
            return ZoneInfo(raw)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ConfigError(f"{name}={raw!r}: not an IANA time zone (e.g. America/Sao_Paulo)") from None

    def values(self) -> str:
        return "IANA time zone name"


class Maybe(Kind[T | None]):
    """A setting that may be left unset (empty): None then, else what `inner` makes of it."""

    def __init__(self, inner: Kind[T]) -> None:
        self.inner = inner

    def parse(self, name: str, raw: str) -> T | None:
        return None if raw == "" else self.inner.parse(name, raw)

    def values(self) -> str:
        return self.inner.values()


# -- settings -------------------------------------------------------------------------------------

#: What production (BURACO_ENV=production) says of a setting: it must be set, or it must not be.
Production = Literal["required", "refused"]


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: the single declaration its loader and its documentation use."""

    name: str
    kind: Kind[T]
    #: The default as text, parsed like a value ("" : unset, for a `Maybe`). A default the loader
    #: computes (a port per service, the host name) is given to `read` and described by
    #: `default_text`.
    default: str
    meaning: str
    #: How the README shows the default, when not as `default` (or "(none)" for an empty one).
    default_text: str | None = None
    #: Whether production requires it (unset: an error) or refuses it (set: an error).
    production: Production | None = None
    #: The default in production, when it differs.
    production_default: str | None = None

    @property
    def documented_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        return self.default or "(none)"

    def values(self) -> str:
        """The values it takes, and what production says of it."""
        rule = f"; {self.production} when BURACO_ENV=production" if self.production else ""
        return self.kind.values() + rule

    def read(
        self, env: Mapping[str, str] | None = None, *, production: bool = False, default: str | None = None
    ) -> T:
        """Its value in `env` (default os.environ), else its default (`default` when given); a
        ConfigError names the variable of a bad value or a production rule broken."""
        source = os.environ if env is None else env
        raw = source.get(self.name) or ""
        if production and self.production == "refused" and raw:
            raise ConfigError(f"{self.name}: refused when BURACO_ENV=production")
        if production and self.production == "required" and not raw:
            raise ConfigError(f"{self.name}: required when BURACO_ENV=production")
        if not raw:
            if default is not None:
                raw = default
            elif production and self.production_default is not None:
                raw = self.production_default
            else:
                raw = self.default
        return self.kind.parse(self.name, raw)

    def parsed_default(self) -> T:
        """The value of its (fixed) default."""
        return self.kind.parse(self.name, self.default)


def table(settings: Sequence[Setting[Any]]) -> str:
    """The README's configuration table of `settings` (Markdown)."""
    rows = ["| variable | default | values | meaning |", "|---|---|---|---|"]
    rows += [
        f"| `{s.name}` | {s.documented_default} | {s.values()} | {s.meaning} |" for s in settings
    ]
    return "\n".join(rows)


def _schema_name(raw: str) -> str | None:
    return None if raw.replace("_", "").isalnum() else "letters, digits and _ only"


ENV = Setting(
    "BURACO_ENV",
    OneOf(ENVIRONMENTS),
    "local",
    "`local` (dev keys generated, migrations at start) or `production` (keys required, dev keys refused)",
)
HOST = Setting("BURACO_HOST", Text("host name or address"), "127.0.0.1", "address to bind (`0.0.0.0` in containers)")
PORT = Setting(
    "BURACO_PORT", Whole(0, 65535), "", "gRPC port; 0 picks a free port", default_text="per service: 50051..50055"
)
METRICS_PORT = Setting(
    "BURACO_METRICS_PORT",
    Whole(0, 65535),
    "",
    "Prometheus `/metrics` port; 0 picks a free port",
    default_text="9100 + last digit of the default port (9101..9105)",
)
HEALTH_PORT = Setting(
    "BURACO_HEALTH_PORT",
    Whole(0, 65535),
    "",
    "plaintext `grpc.health.v1` port for the kubelet's probes (services `readiness` and `liveness`, nothing "
    "else); 0 picks a free port",
    default_text="9200 + last digit of the default port (9201..9205)",
)
METRICS_ENABLED = Setting("BURACO_METRICS_ENABLED", Flag(), "true", "serve Prometheus metrics")
REFLECTION = Setting(
    "BURACO_REFLECTION",
    Flag(),
    "true",
    "serve gRPC server reflection (it lists every method to whoever connects)",
    default_text="true in local, false in production",
    production_default="false",
)
DATABASE_URL = Setting(
    "BURACO_DATABASE_URL",
    DatabaseUrl(),
    "",
    "SQLAlchemy URL; `postgresql://...` and `sqlite:///...` are accepted and given their async driver",
    default_text="sqlite+aiosqlite:///var/<service>.db",
)
DATABASE_SCHEMA = Setting(
    "BURACO_DATABASE_SCHEMA",
    Maybe(Text("letters, digits and _", _schema_name)),
    "",
    "PostgreSQL schema for this service's tables (created by the migrations)",
)
DATABASE_POOL_SIZE = Setting(
    "BURACO_DATABASE_POOL_SIZE",
    Whole(1, 1000),
    "10",
    "PostgreSQL connections of the process's main pool (no overflow); the wallet and game sessions "
    "add pools of their own (docs/operations.md, \"Connection budget\")",
)
DATABASE_TRANSACTION_POOLING = Setting(
    "BURACO_DATABASE_TRANSACTION_POOLING",
    Flag(),
    "false",
    "the URL is a pooler in transaction mode (PgBouncer `pool_mode = transaction`): no prepared "
    "statement is kept past its transaction and no session setting is sent, so the role's own "
    "`search_path` must name BURACO_DATABASE_SCHEMA (checked at start; docs/operations.md, \"PgBouncer\")",
)
MIGRATION_LOCK_TIMEOUT_SECONDS = Setting(
    "BURACO_MIGRATION_LOCK_TIMEOUT_SECONDS",
    Number(0.1, 3600),
    "5",
    "how long a migration waits for a table's lock (PostgreSQL) before it fails, naming the wait; "
    "while it waits, every other query on that table queues behind it",
)
MIGRATION_STATEMENT_TIMEOUT_SECONDS = Setting(
    "BURACO_MIGRATION_STATEMENT_TIMEOUT_SECONDS",
    Number(1, 86400),
    "300",
    "how long one migration statement (or the wait for another replica's migration) may run "
    "(PostgreSQL) before it fails",
)
MIGRATE_ON_START = Setting(
    "BURACO_MIGRATE_ON_START",
    Flag(),
    "true",
    "run the service's migrations before serving",
    default_text="true in local, false in production",
    production_default="false",
)
LOG_LEVEL = Setting(
    "BURACO_LOG_LEVEL",
    OneOf(("DEBUG", "INFO", "WARNING", "ERROR"), upper=True),
    "INFO",
    "DEBUG, INFO, WARNING or ERROR; DEBUG logs every call",
)
JWT_AUDIENCE = Setting("BURACO_JWT_AUDIENCE", Text(), "buraco", "the `aud` every token must carry")
JWT_PUBLIC_KEYS = Setting(
    "BURACO_JWT_PUBLIC_KEYS",
    Maybe(File()),
    "",
    "the key set tokens may be signed with (Ed25519, ECDSA P-256 or RSA; the token's `kid` picks one): a JWKS "
    "file with a `scope` on each key (what it may sign: `player`, `admin`, `service:<name>`), or, in local "
    "mode only, PEM public keys (unscoped); read again when it changes",
    default_text="local: the dev key; production: required",
    production="required",
)
JWT_PRIVATE_KEY = Setting(
    "BURACO_JWT_PRIVATE_KEY",
    Maybe(File()),
    "",
    "PEM private key this service signs its own service tokens with, for calls to other services",
    default_text="local: the dev key; production: (none)",
)
JWT_KEYS_RELOAD_SECONDS = Setting(
    "BURACO_JWT_KEYS_RELOAD_SECONDS",
    Number(0.1, 86400),
    "30",
    "how often the key set file is checked for a change (rotation without a restart)",
)
TLS_CERT_FILE = Setting(
    "BURACO_TLS_CERT_FILE",
    Maybe(File()),
    "",
    "PEM certificate chain the gRPC server serves TLS with (TLS only, no plaintext), and presents as its client "
    "certificate when it calls a service that requires one; read again when it changes",
)
TLS_KEY_FILE = Setting(
    "BURACO_TLS_KEY_FILE", Maybe(File()), "", "PEM private key of BURACO_TLS_CERT_FILE (set both or neither)"
)
TLS_CA_FILE = Setting(
    "BURACO_TLS_CA_FILE",
    Maybe(File()),
    "",
    "PEM CA bundle: calls to the other services use TLS and their certificates must chain to it and name the "
    "host called (unset: plaintext calls)",
)
TLS_CLIENT_CA_FILE = Setting(
    "BURACO_TLS_CLIENT_CA_FILE",
    Maybe(File()),
    "",
    "PEM CA bundle: the server requires a client certificate that chains to it (mutual TLS; needs "
    "BURACO_TLS_CERT_FILE)",
)
TLS_RELOAD_SECONDS = Setting(
    "BURACO_TLS_RELOAD_SECONDS",
    Number(0, 86400),
    "10",
    "how often the TLS files are checked for a change (a renewed certificate is used without a restart)",
)
JWT_LEEWAY_SECONDS = Setting(
    "BURACO_JWT_LEEWAY_SECONDS", Number(0, 300), "10", "clock skew allowed on `exp`, `iat` and `nbf`"
)
DEV_KEYS_DIR = Setting(
    "BURACO_DEV_KEYS_DIR", Folder(), "var/dev-keys", "where local mode keeps its generated dev key pair"
)
RATE_LIMIT_PER_SECOND = Setting(
    "BURACO_RATE_LIMIT_PER_SECOND",
    Number(0.01, 1e6),
    "20",
    "calls per second per player or admin (token bucket)",
)
RATE_LIMIT_BURST = Setting("BURACO_RATE_LIMIT_BURST", Whole(1, 1_000_000), "40", "bucket size per player or admin")
SERVICE_RATE_LIMIT_PER_SECOND = Setting(
    "BURACO_SERVICE_RATE_LIMIT_PER_SECOND", Number(0.01, 1e7), "2000", "calls per second per service identity"
)
MAX_MESSAGE_BYTES = Setting(
    "BURACO_MAX_MESSAGE_BYTES",
    Whole(1024, 64 << 20),
    "65536",
    "largest request accepted (RESOURCE_EXHAUSTED above)",
)
MAX_STREAMS_PER_CALLER = Setting(
    "BURACO_MAX_STREAMS_PER_CALLER", Whole(1, 10_000), "8", "open server streams per caller"
)
SHUTDOWN_GRACE_SECONDS = Setting(
    "BURACO_SHUTDOWN_GRACE_SECONDS", Number(0, 3600), "10", "how long in-flight calls may run on after SIGTERM"
)
MAX_CONNECTION_AGE_SECONDS = Setting(
    "BURACO_GRPC_MAX_CONNECTION_AGE_SECONDS",
    Number(0, 30 * 86400),
    "0",
    "close client connections after this age (GOAWAY), so callers re-resolve DNS and spread over new "
    "replicas; 0 keeps connections forever",
    default_text="0 (never)",
)
MAX_CONNECTION_AGE_GRACE_SECONDS = Setting(
    "BURACO_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS",
    Number(0, 86400),
    "30",
    "how long calls and streams may run on a connection after its GOAWAY (streams then resume)",
)
MAX_PENDING_CALLS = Setting(
    "BURACO_GRPC_MAX_PENDING_CALLS",
    Whole(1, 1_000_000),
    "10000",
    "calls received but not yet taken up by the service (it takes them one at a time, between its "
    "other work: a burst waits here); grpc cancels any call beyond it (CANCELLED, never seen by the "
    "service). Each waiting call holds memory (docs/operations.md, \"Bursts of calls\")",
)
MAX_PENDING_SECONDS = Setting(
    "BURACO_GRPC_MAX_PENDING_SECONDS",
    Whole(1, 86400),
    "30",
    "how long a received call may wait to be taken up by the service before grpc cancels it "
    "(CANCELLED); callers' deadlines end it sooner",
)
IDEMPOTENCY_RETENTION_HOURS = Setting(
    "BURACO_IDEMPOTENCY_RETENTION_HOURS",
    Number(0.01, 24 * 365),
    "72",
    "how long answers are kept for retried request ids",
)
TRACING_ENABLED = Setting(
    "BURACO_TRACING_ENABLED",
    Flag(),
    "false",
    "trace every call served and made, to an OpenTelemetry collector (docs/operations.md, \"Tracing\", has the "
    "`OTEL_*` settings)",
)
#: Where the other services are reached, by service.
ADDRESSES: dict[str, Setting[str]] = {
    service: Setting(
        f"BURACO_{service.upper()}_ADDRESS",
        Text("`host:port` or a gRPC target (`dns:///...`)"),
        f"localhost:{port}",
        f"where the other services reach {called}",
    )
    for (service, port), called in zip(
        DEFAULT_PORTS.items(), ("matchmaking", "game sessions", "the wallet", "ranking", "tournaments"), strict=True
    )
}

#: The suite-wide settings, in the README's order.
SETTINGS: tuple[Setting[Any], ...] = (
    ENV,
    HOST,
    PORT,
    METRICS_PORT,
    HEALTH_PORT,
    METRICS_ENABLED,
    REFLECTION,
    DATABASE_URL,
    DATABASE_SCHEMA,
    DATABASE_POOL_SIZE,
    DATABASE_TRANSACTION_POOLING,
    MIGRATE_ON_START,
    MIGRATION_LOCK_TIMEOUT_SECONDS,
    MIGRATION_STATEMENT_TIMEOUT_SECONDS,
    LOG_LEVEL,
    JWT_AUDIENCE,
    JWT_PUBLIC_KEYS,
    JWT_PRIVATE_KEY,
    JWT_KEYS_RELOAD_SECONDS,
    JWT_LEEWAY_SECONDS,
    TLS_CERT_FILE,
    TLS_KEY_FILE,
    TLS_CA_FILE,
    TLS_CLIENT_CA_FILE,
    TLS_RELOAD_SECONDS,
    DEV_KEYS_DIR,
    RATE_LIMIT_PER_SECOND,
    RATE_LIMIT_BURST,
    SERVICE_RATE_LIMIT_PER_SECOND,
    MAX_MESSAGE_BYTES,
    MAX_STREAMS_PER_CALLER,
    SHUTDOWN_GRACE_SECONDS,
    MAX_CONNECTION_AGE_SECONDS,
    MAX_CONNECTION_AGE_GRACE_SECONDS,
    MAX_PENDING_CALLS,
    MAX_PENDING_SECONDS,
    IDEMPOTENCY_RETENTION_HOURS,
    TRACING_ENABLED,
    *ADDRESSES.values(),
)


@dataclass(frozen=True)
class Config:
    """The suite-wide settings of one service. Built directly (tests, in-process servers), a
    `Config` has the declared defaults, except a free port (0) for gRPC and metrics and an
    in-memory database."""

    service: str
    env: str = ENV.default
    host: str = HOST.default
    port: int = 0
    metrics_port: int = 0
    health_port: int = 0
    metrics_enabled: bool = METRICS_ENABLED.parsed_default()
    reflection: bool = REFLECTION.parsed_default()
    database_url: str = "sqlite+aiosqlite:///:memory:"
    database_schema: str | None = None
    database_pool_size: int = DATABASE_POOL_SIZE.parsed_default()
    database_transaction_pooling: bool = DATABASE_TRANSACTION_POOLING.parsed_default()
    migrate_on_start: bool = MIGRATE_ON_START.parsed_default()
    migration_lock_timeout_seconds: float = MIGRATION_LOCK_TIMEOUT_SECONDS.parsed_default()
    migration_statement_timeout_seconds: float = MIGRATION_STATEMENT_TIMEOUT_SECONDS.parsed_default()
    log_level: str = LOG_LEVEL.default
    jwt_audience: str = JWT_AUDIENCE.default
    jwt_public_keys: Path | None = None
    jwt_private_key: Path | None = None
    jwt_leeway_seconds: float = JWT_LEEWAY_SECONDS.parsed_default()
    jwt_keys_reload_seconds: float = JWT_KEYS_RELOAD_SECONDS.parsed_default()
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_ca_file: Path | None = None
    tls_client_ca_file: Path | None = None
    tls_reload_seconds: float = TLS_RELOAD_SECONDS.parsed_default()
    dev_keys_dir: Path = field(default_factory=DEV_KEYS_DIR.parsed_default)
    rate_limit_per_second: float = RATE_LIMIT_PER_SECOND.parsed_default()
    rate_limit_burst: int = RATE_LIMIT_BURST.parsed_default()
    service_rate_limit_per_second: float = SERVICE_RATE_LIMIT_PER_SECOND.parsed_default()
    max_message_bytes: int = MAX_MESSAGE_BYTES.parsed_default()
    max_streams_per_caller: int = MAX_STREAMS_PER_CALLER.parsed_default()
    shutdown_grace_seconds: float = SHUTDOWN_GRACE_SECONDS.parsed_default()
    max_connection_age_seconds: float = MAX_CONNECTION_AGE_SECONDS.parsed_default()
    max_connection_age_grace_seconds: float = MAX_CONNECTION_AGE_GRACE_SECONDS.parsed_default()
    max_pending_calls: int = MAX_PENDING_CALLS.parsed_default()
    max_pending_seconds: int = MAX_PENDING_SECONDS.parsed_default()
    idempotency_retention_hours: float = IDEMPOTENCY_RETENTION_HOURS.parsed_default()
    addresses: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("BURACO_TLS_CERT_FILE and BURACO_TLS_KEY_FILE go together: set both or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ConfigError("BURACO_TLS_CLIENT_CA_FILE asks for mutual TLS: set BURACO_TLS_CERT_FILE and "
                              "BURACO_TLS_KEY_FILE too")

    @property
    def tls(self) -> TlsSettings:
        return TlsSettings(self.tls_cert_file, self.tls_key_file, self.tls_ca_file, self.tls_client_ca_file,
                           self.tls_reload_seconds)

    @property
    def local(self) -> bool:
        return self.env == "local"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


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
    environment = ENV.read(source)
    production = environment == "production"

    def read(setting: Setting[T], default: str | None = None) -> T:
        return setting.read(source, production=production, default=default)

    default_port = DEFAULT_PORTS[service]
    return Config(
        service=service,
        env=environment,
        host=read(HOST),
        port=read(PORT, str(default_port)),
        metrics_port=read(METRICS_PORT, str(9100 + default_port % 10)),
        health_port=read(HEALTH_PORT, str(9200 + default_port % 10)),
        metrics_enabled=read(METRICS_ENABLED),
        reflection=read(REFLECTION),
        database_url=read(DATABASE_URL, f"sqlite+aiosqlite:///var/{service}.db"),
        database_schema=read(DATABASE_SCHEMA),
        database_pool_size=read(DATABASE_POOL_SIZE),
        database_transaction_pooling=read(DATABASE_TRANSACTION_POOLING),
        migrate_on_start=read(MIGRATE_ON_START),
        migration_lock_timeout_seconds=read(MIGRATION_LOCK_TIMEOUT_SECONDS),
        migration_statement_timeout_seconds=read(MIGRATION_STATEMENT_TIMEOUT_SECONDS),
        log_level=read(LOG_LEVEL),
        jwt_audience=read(JWT_AUDIENCE),
        jwt_public_keys=read(JWT_PUBLIC_KEYS),
        jwt_private_key=read(JWT_PRIVATE_KEY),
        jwt_leeway_seconds=read(JWT_LEEWAY_SECONDS),
        jwt_keys_reload_seconds=read(JWT_KEYS_RELOAD_SECONDS),
        tls_cert_file=read(TLS_CERT_FILE),
        tls_key_file=read(TLS_KEY_FILE),
        tls_ca_file=read(TLS_CA_FILE),
        tls_client_ca_file=read(TLS_CLIENT_CA_FILE),
        tls_reload_seconds=read(TLS_RELOAD_SECONDS),
        dev_keys_dir=read(DEV_KEYS_DIR),
        rate_limit_per_second=read(RATE_LIMIT_PER_SECOND),
        rate_limit_burst=read(RATE_LIMIT_BURST),
        service_rate_limit_per_second=read(SERVICE_RATE_LIMIT_PER_SECOND),
        max_message_bytes=read(MAX_MESSAGE_BYTES),
        max_streams_per_caller=read(MAX_STREAMS_PER_CALLER),
        shutdown_grace_seconds=read(SHUTDOWN_GRACE_SECONDS),
        max_connection_age_seconds=read(MAX_CONNECTION_AGE_SECONDS),
        max_connection_age_grace_seconds=read(MAX_CONNECTION_AGE_GRACE_SECONDS),
        max_pending_calls=read(MAX_PENDING_CALLS),
        max_pending_seconds=read(MAX_PENDING_SECONDS),
        idempotency_retention_hours=read(IDEMPOTENCY_RETENTION_HOURS),
        addresses={name: read(setting) for name, setting in ADDRESSES.items()},
    )

"""The game-session service's own settings (environment variables, read when the service starts).

They sit beside the suite-wide settings of `services.common.config`. Declared once in `SETTINGS`
(name, kind and bounds, default, meaning, production rules), from which `load()` reads them and
scripts/gen_settings_doc.py writes the README's "Game session configuration"; docs/game-session.md
lists them too. A bad value stops the service before it binds (exit status 2, the message names
the variable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from services.common.config import Maybe, Number, Setting, Text, Whole

T = TypeVar("T")
DAY = 86_400.0

ADVERTISE_ADDRESS = Setting(
    "BURACO_GAME_SESSION_ADVERTISE_ADDRESS",
    Text("`host:port`"),
    "",
    "`host:port` other replicas' redirects name for the tables this replica owns",
    default_text="(BURACO_HOST:the bound port)",
)
DEAL_SEED = Setting(
    "BURACO_GAME_SESSION_DEAL_SEED",
    Maybe(Text()),
    "",
    "TESTS ONLY, refused when BURACO_ENV=production: a master seed from which every hand's seed "
    "is derived (HMAC-SHA256 of the table name and hand number), so two runs deal alike",
    default_text="(none: seeds from `secrets`)",
    production="refused",
)
LEASE_SECONDS = Setting(
    "BURACO_GAME_SESSION_LEASE_SECONDS",
    Number(1, 3600),
    "10",
    "how long a replica's heartbeat (and so its tables' leases) lasts without renewal",
)
HANDOFF_WAIT_SECONDS = Setting(
    "BURACO_GAME_SESSION_HANDOFF_WAIT_SECONDS",
    Number(0, 3600),
    "0",
    "how long the tables of a replica that stopped gracefully wait for a replica of another revision "
    "(BURACO_GAME_SESSION_REVISION: the new release, in a rolling update) or at the stopped one's "
    "address (its replacement) before any replica takes them over, so that a rolling restart moves "
    "each table once; 0: any replica at once",
)
REVISION = Setting(
    "BURACO_GAME_SESSION_REVISION",
    Text(),
    "",
    "the release this replica runs (the manifests set the pod's `controller-revision-hash`): a "
    "stopped replica's tables go first to replicas of another revision",
    default_text="(none)",
)
TAKEOVER_SCAN_SECONDS = Setting(
    "BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS",
    Number(0.05, 3600),
    "3",
    "how often a replica renews its heartbeat and looks for tables whose owner's heartbeat ran out",
)
START_SECONDS = Setting(
    "BURACO_GAME_SESSION_START_SECONDS",
    Number(0, DAY),
    "60",
    "the first hand is dealt when every human player has subscribed, or after this long",
)
BOT_DELAY_MS = Setting(
    "BURACO_GAME_SESSION_BOT_DELAY_MS", Number(0, 60_000), "600", "pause before a bot plays its turn (0 in tests)"
)
EXPERT_BUDGET_MS = Setting(
    "BURACO_GAME_SESSION_EXPERT_BUDGET_MS",
    Number(1, 10_000),
    "50",
    "CPU an expert bot (bot level HARD) spends on a decision (counted on its decision thread's "
    "clock; it may overshoot by one sampled world), made off the event loop",
)
DISCONNECT_GRACE_SECONDS = Setting(
    "BURACO_GAME_SESSION_DISCONNECT_GRACE_SECONDS",
    Number(0, DAY),
    "20",
    "how long a player's seat waits after their last stream drops before a bot takes it",
)
RECONNECT_WINDOW_SECONDS = Setting(
    "BURACO_GAME_SESSION_RECONNECT_WINDOW_SECONDS",
    Number(0, DAY),
    "180",
    "how long after a bot took a disconnected player's seat the player may come back to it",
)
MAX_AUTO_PLAYS = Setting(
    "BURACO_GAME_SESSION_MAX_AUTO_PLAYS", Whole(1, 100), "3", "automatic plays after which a bot takes the seat"
)
ANNULMENT_SECONDS = Setting(
    "BURACO_GAME_SESSION_ANNULMENT_SECONDS", Number(1, DAY), "60", "how long an annulment proposal stays open"
)
CHAT_PER_MINUTE = Setting(
    "BURACO_GAME_SESSION_CHAT_PER_MINUTE",
    Whole(1, 10_000),
    "10",
    "chat messages one sender may send per table per minute",
)
OUTBOX_RETRY_SECONDS = Setting(
    "BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS",
    Number(0.01, DAY),
    "1",
    "first delay before an outbox delivery is retried",
)
OUTBOX_MAX_RETRY_SECONDS = Setting(
    "BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS",
    Number(0.01, DAY),
    "60",
    "longest delay between outbox retries",
)
BATCH_MAX = Setting(
    "BURACO_GAME_SESSION_BATCH_MAX",
    Whole(1, 100_000),
    "256",
    "most actions one group-commit transaction carries",
)
BATCH_WAIT_MS = Setting(
    "BURACO_GAME_SESSION_BATCH_WAIT_MS",
    Number(0, 1000),
    "5",
    "how long the log writer, under load, once a change is waiting, waits for others to commit "
    "with it (fewer, larger transactions; a lone change at a quiet moment commits at once; 0: never wait)",
)
WRITERS = Setting(
    "BURACO_GAME_SESSION_WRITERS",
    Whole(1, 64),
    "1",
    "group-commit transactions in flight at once on PostgreSQL (each on its own connection); "
    "more only helps when the database's commit latency, not its CPU, is the limit (SQLite: always 1)",
)

#: The game-session service's settings, in the README's order.
SETTINGS: tuple[Setting[Any], ...] = (
    ADVERTISE_ADDRESS,
    DEAL_SEED,
    LEASE_SECONDS,
    HANDOFF_WAIT_SECONDS,
    REVISION,
    TAKEOVER_SCAN_SECONDS,
    START_SECONDS,
    BOT_DELAY_MS,
    EXPERT_BUDGET_MS,
    DISCONNECT_GRACE_SECONDS,
    RECONNECT_WINDOW_SECONDS,
    MAX_AUTO_PLAYS,
    ANNULMENT_SECONDS,
    CHAT_PER_MINUTE,
    OUTBOX_RETRY_SECONDS,
    OUTBOX_MAX_RETRY_SECONDS,
    BATCH_MAX,
    BATCH_WAIT_MS,
    WRITERS,
)


@dataclass(frozen=True)
class GameSessionSettings:
    advertise_address: str = ""
    deal_seed: str | None = None
    lease_seconds: float = 10.0
    handoff_wait_seconds: float = 0.0
    revision: str = ""
    scan_seconds: float = 3.0
    start_wait_seconds: float = 60.0
    bot_delay_seconds: float = 0.6
    expert_budget_ms: float = 50.0
    disconnect_grace_seconds: float = 20.0
    reconnect_window_seconds: float = 180.0
    max_auto_plays: int = 3
    annulment_seconds: float = 60.0
    chat_per_minute: int = 10
    outbox_retry_seconds: float = 1.0
    outbox_max_retry_seconds: float = 60.0
    batch_max: int = 256
    writers: int = 1
    batch_wait_seconds: float = 0.005


def load(env: Mapping[str, str] | None = None, *, production: bool = False) -> GameSessionSettings:
    """The settings from `env` (default os.environ); ConfigError names a bad variable."""

    def read(setting: Setting[T]) -> T:
        return setting.read(env, production=production)

    return GameSessionSettings(
        advertise_address=read(ADVERTISE_ADDRESS),
        deal_seed=read(DEAL_SEED),
        lease_seconds=read(LEASE_SECONDS),
        handoff_wait_seconds=read(HANDOFF_WAIT_SECONDS),
        revision=read(REVISION),
        scan_seconds=read(TAKEOVER_SCAN_SECONDS),
        start_wait_seconds=read(START_SECONDS),
        bot_delay_seconds=read(BOT_DELAY_MS) / 1000.0,
        expert_budget_ms=read(EXPERT_BUDGET_MS),
        disconnect_grace_seconds=read(DISCONNECT_GRACE_SECONDS),
        reconnect_window_seconds=read(RECONNECT_WINDOW_SECONDS),
        max_auto_plays=read(MAX_AUTO_PLAYS),
        annulment_seconds=read(ANNULMENT_SECONDS),
        chat_per_minute=read(CHAT_PER_MINUTE),
        outbox_retry_seconds=read(OUTBOX_RETRY_SECONDS),
        outbox_max_retry_seconds=read(OUTBOX_MAX_RETRY_SECONDS),
        batch_max=read(BATCH_MAX),
        writers=read(WRITERS),
        batch_wait_seconds=read(BATCH_WAIT_MS) / 1000.0,
    )

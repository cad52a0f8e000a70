"""The game-session service's own settings (environment variables, read when the service starts).

They sit beside the suite-wide settings of `services.common.config` and follow the same rules: a
documented default for each, and a bad value stops the service before it binds (exit status 2,
the message names the variable). docs/game-session.md lists them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from services.common.config import ConfigError, Setting, number_setting

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "BURACO_GAME_SESSION_ADVERTISE_ADDRESS",
        "(BURACO_HOST:the bound port)",
        "`host:port` other replicas' redirects name for the tables this replica owns",
    ),
    Setting(
        "BURACO_GAME_SESSION_DEAL_SEED",
        "(none: seeds from `secrets`)",
        "TESTS ONLY, refused when BURACO_ENV=production: a master seed from which every hand's seed "
        "is derived (HMAC-SHA256 of the table name and hand number), so two runs deal alike",
    ),
    Setting(
        "BURACO_GAME_SESSION_LEASE_SECONDS",
        "10",
        "how long a replica's heartbeat (and so its tables' leases) lasts without renewal",
    ),
    Setting(
        "BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS",
        "3",
        "how often a replica renews its heartbeat and looks for tables whose owner's heartbeat ran out",
    ),
    Setting(
        "BURACO_GAME_SESSION_START_SECONDS",
        "60",
        "the first hand is dealt when every human player has subscribed, or after this long",
    ),
    Setting("BURACO_GAME_SESSION_BOT_DELAY_MS", "600", "pause before a bot plays its turn (0 in tests)"),
    Setting(
        "BURACO_GAME_SESSION_DISCONNECT_GRACE_SECONDS",
        "20",
        "how long a player's seat waits after their last stream drops before a bot takes it",
    ),
    Setting(
        "BURACO_GAME_SESSION_RECONNECT_WINDOW_SECONDS",
        "180",
        "how long after a bot took a disconnected player's seat the player may come back to it",
    ),
    Setting("BURACO_GAME_SESSION_MAX_AUTO_PLAYS", "3", "automatic plays after which a bot takes the seat"),
    Setting("BURACO_GAME_SESSION_ANNULMENT_SECONDS", "60", "how long an annulment proposal stays open"),
    Setting("BURACO_GAME_SESSION_CHAT_PER_MINUTE", "10", "chat messages one sender may send per table per minute"),
    Setting("BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS", "1", "first delay before an outbox delivery is retried"),
    Setting("BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS", "60", "longest delay between outbox retries"),
    Setting("BURACO_GAME_SESSION_BATCH_MAX", "256", "most actions one group-commit transaction carries"),
    Setting(
        "BURACO_GAME_SESSION_BATCH_WAIT_MS",
        "5",
        "how long the log writer, under load, once a change is waiting, waits for others to commit "
        "with it (fewer, larger transactions; a lone change at a quiet moment commits at once; 0: never wait)",
    ),
    Setting(
        "BURACO_GAME_SESSION_WRITERS",
        "1",
        "group-commit transactions in flight at once on PostgreSQL (each on its own connection); "
        "more only helps when the database's commit latency, not its CPU, is the limit (SQLite: always 1)",
    ),
)


@dataclass(frozen=True)
class GameSessionSettings:
    advertise_address: str = ""
    deal_seed: str | None = None
    lease_seconds: float = 10.0
    scan_seconds: float = 3.0
    start_wait_seconds: float = 60.0
    bot_delay_seconds: float = 0.6
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
    source = os.environ if env is None else env

    def raw(name: str, default: str) -> str:
        value = source.get(name)
        return default if value is None or value == "" else value

    deal_seed = source.get("BURACO_GAME_SESSION_DEAL_SEED") or None
    if deal_seed is not None and production:
        raise ConfigError("BURACO_GAME_SESSION_DEAL_SEED: for tests only, refused when BURACO_ENV=production")
    day = 86_400.0
    return GameSessionSettings(
        advertise_address=source.get("BURACO_GAME_SESSION_ADVERTISE_ADDRESS", ""),
        deal_seed=deal_seed,
        lease_seconds=number_setting(
            "BURACO_GAME_SESSION_LEASE_SECONDS", raw("BURACO_GAME_SESSION_LEASE_SECONDS", "10"), 1, 3600
        ),
        scan_seconds=number_setting(
            "BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS",
            raw("BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS", "3"),
            0.05,
            3600,
        ),
        start_wait_seconds=number_setting(
            "BURACO_GAME_SESSION_START_SECONDS", raw("BURACO_GAME_SESSION_START_SECONDS", "60"), 0, day
        ),
        bot_delay_seconds=number_setting(
            "BURACO_GAME_SESSION_BOT_DELAY_MS", raw("BURACO_GAME_SESSION_BOT_DELAY_MS", "600"), 0, 60_000
        )
        / 1000.0,
        disconnect_grace_seconds=number_setting(
            "BURACO_GAME_SESSION_DISCONNECT_GRACE_SECONDS",
            raw("BURACO_GAME_SESSION_DISCONNECT_GRACE_SECONDS", "20"),
            0,
            day,
        ),
        reconnect_window_seconds=number_setting(
            "BURACO_GAME_SESSION_RECONNECT_WINDOW_SECONDS",
            raw("BURACO_GAME_SESSION_RECONNECT_WINDOW_SECONDS", "180"),
            0,
            day,
        ),
        max_auto_plays=int(
            number_setting("BURACO_GAME_SESSION_MAX_AUTO_PLAYS", raw("BURACO_GAME_SESSION_MAX_AUTO_PLAYS", "3"), 1, 100)
        ),
        annulment_seconds=number_setting(
            "BURACO_GAME_SESSION_ANNULMENT_SECONDS", raw("BURACO_GAME_SESSION_ANNULMENT_SECONDS", "60"), 1, day
        ),
        chat_per_minute=int(
            number_setting(
                "BURACO_GAME_SESSION_CHAT_PER_MINUTE", raw("BURACO_GAME_SESSION_CHAT_PER_MINUTE", "10"), 1, 10_000
            )
        ),
        outbox_retry_seconds=number_setting(
            "BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS", raw("BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS", "1"), 0.01, day
        ),
        outbox_max_retry_seconds=number_setting(
            "BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS",
            raw("BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS", "60"),
            0.01,
            day,
        ),
        batch_max=int(
            number_setting("BURACO_GAME_SESSION_BATCH_MAX", raw("BURACO_GAME_SESSION_BATCH_MAX", "256"), 1, 100_000)
        ),
        writers=int(number_setting("BURACO_GAME_SESSION_WRITERS", raw("BURACO_GAME_SESSION_WRITERS", "1"), 1, 64)),
        batch_wait_seconds=number_setting(
            "BURACO_GAME_SESSION_BATCH_WAIT_MS", raw("BURACO_GAME_SESSION_BATCH_WAIT_MS", "5"), 0, 1000
        )
        / 1000.0,
    )

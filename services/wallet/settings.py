"""The wallet's own settings (environment variables, read when the service starts).

Declared once in `SETTINGS` (services.common.config: name, kind and bounds, default, meaning),
from which `load()` reads them and scripts/gen_settings_doc.py writes the README's wallet table.
A bad value stops the service before it binds (exit status 2, the message names the variable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from services.common.config import ConfigError, Number, Setting, Whole

#: The largest amount one stake, grant or correction may carry: sums of up to 1,024 stakes stay
#: far inside int64.
MAX_CHIPS = 10**15
DAY = 86_400.0

STARTING_GRANT_CHIPS = Setting(
    "BURACO_WALLET_STARTING_GRANT_CHIPS",
    Whole(0, MAX_CHIPS),
    "1000",
    "chips a new player's account starts with (0: none)",
)
DAILY_BONUS_CHIPS = Setting(
    "BURACO_WALLET_DAILY_BONUS_CHIPS",
    Whole(0, MAX_CHIPS),
    "0",
    "chips of the daily bonus, once per player per UTC day (0: no bonus)",
)
HOUSE_CUT_PERCENT = Setting(
    "BURACO_WALLET_HOUSE_CUT_PERCENT",
    Whole(0, 100),
    "20",
    "the house's share of every pot, rounded down to whole chips",
)
HOLD_TTL_SECONDS = Setting(
    "BURACO_WALLET_HOLD_TTL_SECONDS",
    Number(1, 365 * DAY),
    "21600",
    "how long a hold lives when HoldBets gives no `hold_ttl` (6 hours: longer than a match)",
)
MAX_HOLD_TTL_SECONDS = Setting(
    "BURACO_WALLET_MAX_HOLD_TTL_SECONDS",
    Number(1, 365 * DAY),
    "2592000",
    "the longest `hold_ttl` a caller may ask for (30 days: tournament registration windows)",
)
EXPIRY_SWEEP_SECONDS = Setting(
    "BURACO_WALLET_EXPIRY_SWEEP_SECONDS",
    Number(0, DAY),
    "30",
    "how often the service expires holds past their time and forgets old answers (0: never)",
)
IDEMPOTENCY_RETENTION_DAYS = Setting(
    "BURACO_WALLET_IDEMPOTENCY_RETENTION_DAYS",
    Number(1, 3650),
    "30",
    "how long the wallet keeps answers for retried request ids (replaces the suite-wide hours)",
)
ASYNCPG_POOL_SIZE = Setting(
    "BURACO_WALLET_ASYNCPG_POOL_SIZE",
    Whole(1, 1000),
    "10",
    "PostgreSQL connections of the wallet's own pool (its chip-moving calls), besides the process's main "
    "pool (BURACO_DATABASE_POOL_SIZE)",
)

#: The wallet's settings, in the README's order.
SETTINGS: tuple[Setting[Any], ...] = (
    STARTING_GRANT_CHIPS,
    DAILY_BONUS_CHIPS,
    HOUSE_CUT_PERCENT,
    HOLD_TTL_SECONDS,
    MAX_HOLD_TTL_SECONDS,
    EXPIRY_SWEEP_SECONDS,
    IDEMPOTENCY_RETENTION_DAYS,
    ASYNCPG_POOL_SIZE,
)


@dataclass(frozen=True)
class WalletSettings:
    starting_grant_chips: int = 1000
    daily_bonus_chips: int = 0
    house_cut_percent: int = 20
    hold_ttl: timedelta = timedelta(hours=6)
    max_hold_ttl: timedelta = timedelta(days=30)
    #: 0 seconds: no background sweep.
    expiry_sweep_interval: timedelta = timedelta(seconds=30)
    idempotency_retention: timedelta = timedelta(days=30)
    asyncpg_pool_size: int = 10


def load(env: Mapping[str, str] | None = None) -> WalletSettings:
    """The wallet's settings from `env` (default os.environ); ConfigError names a bad variable."""
    hold_ttl = HOLD_TTL_SECONDS.read(env)
    max_hold_ttl = MAX_HOLD_TTL_SECONDS.read(env)
    if hold_ttl > max_hold_ttl:
        raise ConfigError(
            f"{HOLD_TTL_SECONDS.name}={hold_ttl:g}: longer than {MAX_HOLD_TTL_SECONDS.name}={max_hold_ttl:g}"
        )
    return WalletSettings(
        starting_grant_chips=STARTING_GRANT_CHIPS.read(env),
        daily_bonus_chips=DAILY_BONUS_CHIPS.read(env),
        house_cut_percent=HOUSE_CUT_PERCENT.read(env),
        hold_ttl=timedelta(seconds=hold_ttl),
        max_hold_ttl=timedelta(seconds=max_hold_ttl),
        expiry_sweep_interval=timedelta(seconds=EXPIRY_SWEEP_SECONDS.read(env)),
        idempotency_retention=timedelta(days=IDEMPOTENCY_RETENTION_DAYS.read(env)),
        asyncpg_pool_size=ASYNCPG_POOL_SIZE.read(env),
    )

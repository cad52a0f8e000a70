"""The wallet's own settings (environment variables, read when the service starts).

They sit beside the suite-wide settings of `services.common.config` and follow the same rules:
a documented default for each, and a bad value stops the service before it binds (exit status 2,
the message names the variable). The README's "Wallet" section lists them (a test keeps it in
step with `SETTINGS`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from services.common.config import ConfigError, Setting, int_setting, number_setting

#: The largest amount one stake, grant or correction may carry: sums of up to 1,024 stakes stay
#: far inside int64.
MAX_CHIPS = 10**15

SETTINGS: tuple[Setting, ...] = (
    Setting("BURACO_WALLET_STARTING_GRANT_CHIPS", "1000", "chips a new player's account starts with (0: none)"),
    Setting(
        "BURACO_WALLET_DAILY_BONUS_CHIPS", "0", "chips of the daily bonus, once per player per UTC day (0: no bonus)"
    ),
    Setting("BURACO_WALLET_HOUSE_CUT_PERCENT", "20", "the house's share of every pot, rounded down to whole chips"),
    Setting(
        "BURACO_WALLET_HOLD_TTL_SECONDS",
        "21600",
        "how long a hold lives when HoldBets gives no `hold_ttl` (6 hours: longer than a match)",
    ),
    Setting(
        "BURACO_WALLET_MAX_HOLD_TTL_SECONDS",
        "2592000",
        "the longest `hold_ttl` a caller may ask for (30 days: tournament registration windows)",
    ),
    Setting(
        "BURACO_WALLET_EXPIRY_SWEEP_SECONDS",
        "30",
        "how often the service expires holds past their time and forgets old answers (0: never)",
    ),
    Setting(
        "BURACO_WALLET_IDEMPOTENCY_RETENTION_DAYS",
        "30",
        "how long the wallet keeps answers for retried request ids (replaces the suite-wide hours)",
    ),
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


def load(env: Mapping[str, str] | None = None) -> WalletSettings:
    """The wallet's settings from `env` (default os.environ); ConfigError names a bad variable."""
    source = os.environ if env is None else env
    defaults = {setting.name: setting.default for setting in SETTINGS}

    def raw(name: str) -> str:
        value = source.get(name)
        return defaults[name] if value is None or value == "" else value

    day = 86_400.0
    hold_ttl = number_setting("BURACO_WALLET_HOLD_TTL_SECONDS", raw("BURACO_WALLET_HOLD_TTL_SECONDS"), 1, 365 * day)
    max_hold_ttl = number_setting(
        "BURACO_WALLET_MAX_HOLD_TTL_SECONDS", raw("BURACO_WALLET_MAX_HOLD_TTL_SECONDS"), 1, 365 * day
    )
    if hold_ttl > max_hold_ttl:
        raise ConfigError(
            f"BURACO_WALLET_HOLD_TTL_SECONDS={hold_ttl:g}: longer than BURACO_WALLET_MAX_HOLD_TTL_SECONDS"
            f"={max_hold_ttl:g}"
        )
    return WalletSettings(
        starting_grant_chips=int_setting(
            "BURACO_WALLET_STARTING_GRANT_CHIPS", raw("BURACO_WALLET_STARTING_GRANT_CHIPS"), 0, MAX_CHIPS
        ),
        daily_bonus_chips=int_setting(
            "BURACO_WALLET_DAILY_BONUS_CHIPS", raw("BURACO_WALLET_DAILY_BONUS_CHIPS"), 0, MAX_CHIPS
        ),
        house_cut_percent=int_setting(
            "BURACO_WALLET_HOUSE_CUT_PERCENT", raw("BURACO_WALLET_HOUSE_CUT_PERCENT"), 0, 100
        ),
        hold_ttl=timedelta(seconds=hold_ttl),
        max_hold_ttl=timedelta(seconds=max_hold_ttl),
        expiry_sweep_interval=timedelta(
            seconds=number_setting(
                "BURACO_WALLET_EXPIRY_SWEEP_SECONDS", raw("BURACO_WALLET_EXPIRY_SWEEP_SECONDS"), 0, day
            )
        ),
        idempotency_retention=timedelta(
            days=number_setting(
                "BURACO_WALLET_IDEMPOTENCY_RETENTION_DAYS", raw("BURACO_WALLET_IDEMPOTENCY_RETENTION_DAYS"), 1, 3650
            )
        ),
    )

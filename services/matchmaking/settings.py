"""The matchmaking service's own settings (environment variables, read when the service starts).

They sit beside the suite-wide settings of `services.common.config` (which hold the addresses of
the wallet, ranking and game sessions: BURACO_WALLET_ADDRESS, BURACO_RANKING_ADDRESS,
BURACO_GAME_SESSION_ADDRESS) and follow the same rules: a documented default each, and a bad value
stops the service before it binds (exit status 2, the message names the variable).
docs/matchmaking.md, "Configuration", lists them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.common.config import Setting, number_setting
from services.matchmaking.matcher import Windows

SETTINGS: tuple[Setting, ...] = (
    Setting("BURACO_MATCHMAKING_TICK_SECONDS", "1", "how often the matching loop runs a pass when nothing wakes it"),
    Setting("BURACO_MATCHMAKING_CONFIRM_SECONDS", "20", "how long every player of a proposed match has to confirm"),
    Setting(
        "BURACO_MATCHMAKING_START_SECONDS",
        "60",
        "how long the start of a match may keep retrying the wallet and game sessions before it gives up"
        " and compensates",
    ),
    Setting(
        "BURACO_MATCHMAKING_HOLD_TTL_SECONDS",
        "21600",
        "how long the bets held for a match live in the wallet if never settled or voided (a crash never"
        " orphans a hold)",
    ),
    Setting(
        "BURACO_MATCHMAKING_CALL_TIMEOUT_SECONDS", "5", "deadline of each call to the wallet, ranking and game sessions"
    ),
    Setting("BURACO_MATCHMAKING_RETRY_SECONDS", "0.5", "first wait before retrying a failed call; doubles, up to 30 s"),
    Setting(
        "BURACO_MATCHMAKING_WATCH_POLL_SECONDS",
        "1",
        "how often the matching loop reads the versions of the tickets streamed by this replica, to wake"
        " their streams for changes made by other replicas (at most once a tick)",
    ),
    Setting("BURACO_MATCHMAKING_WINDOW_INITIAL", "2", "rating window half width of a new ticket (rating points)"),
    Setting("BURACO_MATCHMAKING_WINDOW_GROWTH", "2", "rating points the half width grows by every step"),
    Setting("BURACO_MATCHMAKING_WINDOW_STEP_SECONDS", "10", "seconds of waiting per step of the window"),
    Setting("BURACO_MATCHMAKING_WINDOW_MAX", "20", "the widest half width before the window opens completely"),
    Setting(
        "BURACO_MATCHMAKING_WINDOW_OPEN_SECONDS",
        "120",
        "waiting time after which any rating is accepted (0: never)",
    ),
)


@dataclass(frozen=True)
class MatchmakingSettings:
    tick_seconds: float = 1.0
    confirm_seconds: float = 20.0
    start_seconds: float = 60.0
    hold_ttl_seconds: int = 21600
    call_timeout_seconds: float = 5.0
    retry_seconds: float = 0.5
    max_retry_seconds: float = 30.0
    watch_poll_seconds: float = 1.0
    windows: Windows = field(default_factory=Windows)
    #: Bounds every wait of the shutdown (the loop's pass, a saga step under way).
    stop_timeout_seconds: float = 10.0


def load(env: Mapping[str, str] | None = None) -> MatchmakingSettings:
    """The settings from `env` (default os.environ); ConfigError names a bad variable."""
    source = os.environ if env is None else env
    defaults = {setting.name: setting.default for setting in SETTINGS}

    def number(suffix: str, low: float, high: float) -> float:
        name = f"BURACO_MATCHMAKING_{suffix}"
        value = source.get(name)
        return number_setting(name, value or defaults[name], low, high)

    windows = Windows(
        initial=number("WINDOW_INITIAL", 0, 1000),
        growth=number("WINDOW_GROWTH", 0, 1000),
        step_seconds=number("WINDOW_STEP_SECONDS", 0.1, 3600),
        maximum=number("WINDOW_MAX", 0, 1000),
        open_seconds=number("WINDOW_OPEN_SECONDS", 0, 86_400),
    )
    return MatchmakingSettings(
        tick_seconds=number("TICK_SECONDS", 0.01, 60),
        confirm_seconds=number("CONFIRM_SECONDS", 1, 600),
        start_seconds=number("START_SECONDS", 1, 3600),
        hold_ttl_seconds=int(number("HOLD_TTL_SECONDS", 60, 2_592_000)),
        call_timeout_seconds=number("CALL_TIMEOUT_SECONDS", 0.1, 300),
        retry_seconds=number("RETRY_SECONDS", 0.01, 300),
        watch_poll_seconds=number("WATCH_POLL_SECONDS", 0.01, 60),
        windows=windows,
    )

"""The matchmaking service's own settings (environment variables, read when the service starts).

They sit beside the suite-wide settings of `services.common.config` (which hold the addresses of
the wallet, ranking and game sessions: BURACO_WALLET_ADDRESS, BURACO_RANKING_ADDRESS,
BURACO_GAME_SESSION_ADDRESS). Declared once in `SETTINGS` (name, kind and bounds, default,
meaning), from which `load()` reads them and scripts/gen_settings_doc.py writes the README's
"Matchmaking configuration"; docs/matchmaking.md, "Configuration", lists them too (a test keeps
it in step). A bad value stops the service before it binds (exit status 2, the message names the
variable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.common.config import Number, Setting, Whole
from services.matchmaking.matcher import Windows

TICK_SECONDS = Setting(
    "BURACO_MATCHMAKING_TICK_SECONDS",
    Number(0.01, 60),
    "1",
    "how often the matching loop runs a pass when nothing wakes it",
)
CONFIRM_SECONDS = Setting(
    "BURACO_MATCHMAKING_CONFIRM_SECONDS",
    Number(1, 600),
    "20",
    "how long every player of a proposed match has to confirm",
)
START_SECONDS = Setting(
    "BURACO_MATCHMAKING_START_SECONDS",
    Number(1, 3600),
    "60",
    "how long the start of a match may keep retrying the wallet and game sessions before it gives up"
    " and compensates",
)
HOLD_TTL_SECONDS = Setting(
    "BURACO_MATCHMAKING_HOLD_TTL_SECONDS",
    Whole(60, 2_592_000),
    "21600",
    "how long the bets held for a match live in the wallet if never settled or voided (a crash never"
    " orphans a hold)",
)
CALL_TIMEOUT_SECONDS = Setting(
    "BURACO_MATCHMAKING_CALL_TIMEOUT_SECONDS",
    Number(0.1, 300),
    "5",
    "deadline of each call to the wallet, ranking and game sessions",
)
RETRY_SECONDS = Setting(
    "BURACO_MATCHMAKING_RETRY_SECONDS",
    Number(0.01, 300),
    "0.5",
    "first wait before retrying a failed call; doubles, up to 30 s",
)
WATCH_POLL_SECONDS = Setting(
    "BURACO_MATCHMAKING_WATCH_POLL_SECONDS",
    Number(0.01, 60),
    "1",
    "how often the matching loop reads the versions of the tickets streamed by this replica, to wake"
    " their streams for changes made by other replicas (at most once a tick)",
)
WINDOW_INITIAL = Setting(
    "BURACO_MATCHMAKING_WINDOW_INITIAL",
    Number(0, 1000),
    "8",
    "rating window half width of a new ticket (rating points)",
)
WINDOW_GROWTH = Setting(
    "BURACO_MATCHMAKING_WINDOW_GROWTH", Number(0, 1000), "8", "rating points the half width grows by every step"
)
WINDOW_STEP_SECONDS = Setting(
    "BURACO_MATCHMAKING_WINDOW_STEP_SECONDS", Number(0.1, 3600), "1", "seconds of waiting per step of the window"
)
WINDOW_MAX = Setting(
    "BURACO_MATCHMAKING_WINDOW_MAX",
    Number(0, 1000),
    "30",
    "the widest half width before the window opens completely",
)
WINDOW_OPEN_SECONDS = Setting(
    "BURACO_MATCHMAKING_WINDOW_OPEN_SECONDS",
    Number(0, 86_400),
    "2",
    "waiting time after which any rating is accepted (0: never)",
)

#: The matchmaking service's settings, in the README's order.
SETTINGS: tuple[Setting[Any], ...] = (
    TICK_SECONDS,
    CONFIRM_SECONDS,
    START_SECONDS,
    HOLD_TTL_SECONDS,
    CALL_TIMEOUT_SECONDS,
    RETRY_SECONDS,
    WATCH_POLL_SECONDS,
    WINDOW_INITIAL,
    WINDOW_GROWTH,
    WINDOW_STEP_SECONDS,
    WINDOW_MAX,
    WINDOW_OPEN_SECONDS,
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
    windows = Windows(
        initial=WINDOW_INITIAL.read(env),
        growth=WINDOW_GROWTH.read(env),
        step_seconds=WINDOW_STEP_SECONDS.read(env),
        maximum=WINDOW_MAX.read(env),
        open_seconds=WINDOW_OPEN_SECONDS.read(env),
    )
    return MatchmakingSettings(
        tick_seconds=TICK_SECONDS.read(env),
        confirm_seconds=CONFIRM_SECONDS.read(env),
        start_seconds=START_SECONDS.read(env),
        hold_ttl_seconds=HOLD_TTL_SECONDS.read(env),
        call_timeout_seconds=CALL_TIMEOUT_SECONDS.read(env),
        retry_seconds=RETRY_SECONDS.read(env),
        watch_poll_seconds=WATCH_POLL_SECONDS.read(env),
        windows=windows,
    )

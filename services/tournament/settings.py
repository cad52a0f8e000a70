"""The tournament service's own settings (environment variables, read when the service starts).

They sit beside the suite-wide settings of `services.common.config` and follow the same rules: a
documented default each, and a bad value stops the service before it binds (exit status 2, the
message names the variable). The README's "Tournament configuration" lists them (a test keeps it
in step with `SETTINGS`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from services.common.config import ConfigError, Setting, number_setting

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "BURACO_TOURNAMENT_TICK_SECONDS",
        "1",
        "how often the scheduler looks for due work when nothing wakes it (registration windows, starts, retries)",
    ),
    Setting(
        "BURACO_TOURNAMENT_POLL_SECONDS",
        "5",
        "how often a table is read before its no-show deadline, to see who has joined it",
    ),
    Setting(
        "BURACO_TOURNAMENT_RECONCILE_SECONDS",
        "30",
        "how often a table still undecided after its no-show deadline is read, to find results whose report was lost",
    ),
    Setting(
        "BURACO_TOURNAMENT_RESULT_GRACE_SECONDS",
        "60",
        "how long after a table is seen finished its report may take before the result is read from the table",
    ),
    Setting(
        "BURACO_TOURNAMENT_HOLD_TTL_HOURS",
        "720",
        "how long buy-in holds live in the wallet (at most the wallet's BURACO_WALLET_MAX_HOLD_TTL_SECONDS)",
    ),
    Setting(
        "BURACO_TOURNAMENT_MAX_DURATION_HOURS",
        "48",
        "the longest a tournament may run after its start: registration may open at most the hold TTL minus"
        " this before the start",
    ),
    Setting(
        "BURACO_TOURNAMENT_SEEDING_WAIT_SECONDS",
        "120",
        "how long the start waits for the ranking service's ratings before seeding by registration order",
    ),
    Setting(
        "BURACO_TOURNAMENT_LEASE_SECONDS",
        "30",
        "how long a replica keeps a tournament's scheduling to itself; another replica takes over after it",
    ),
    Setting(
        "BURACO_TOURNAMENT_REPLICA_ID",
        "the host name",
        "this replica's name in the scheduling leases; a restarted process with the same name resumes at once",
    ),
    Setting(
        "BURACO_TOURNAMENT_WATCH_POLL_SECONDS",
        "1",
        "how often WatchTournament streams look for changes made by other replicas",
    ),
    Setting(
        "BURACO_TOURNAMENT_CALL_TIMEOUT_SECONDS",
        "10",
        "deadline of each call to the wallet, ranking and game sessions",
    ),
    Setting(
        "BURACO_TOURNAMENT_RETRY_SECONDS",
        "2",
        "first wait before retrying a failed call to another service; doubles each time, up to 5 minutes",
    ),
)


@dataclass(frozen=True)
class TournamentSettings:
    tick_seconds: float = 1.0
    poll_seconds: float = 5.0
    reconcile_seconds: float = 30.0
    result_grace_seconds: float = 60.0
    hold_ttl_hours: float = 720.0
    max_duration_hours: float = 48.0
    seeding_wait_seconds: float = 120.0
    lease_seconds: float = 30.0
    replica_id: str = "local"
    watch_poll_seconds: float = 1.0
    call_timeout_seconds: float = 10.0
    retry_seconds: float = 2.0
    #: The longest wait between retries.
    max_retry_seconds: float = 300.0

    def retry_delay(self, failures: int) -> timedelta:
        """The wait before retrying a tournament step or a table call that has failed `failures`
        times in a row: `retry_seconds`, doubled at each further failure, at most
        `max_retry_seconds`."""
        return timedelta(seconds=min(self.retry_seconds * 2 ** max(0, failures - 1), self.max_retry_seconds))


def load(env: Mapping[str, str] | None = None) -> TournamentSettings:
    """The settings from `env` (default os.environ); ConfigError names a bad variable."""
    source = os.environ if env is None else env
    defaults = {setting.name: setting.default for setting in SETTINGS}

    def raw(name: str) -> str:
        value = source.get(name)
        return defaults[name] if value is None or value == "" else value

    def number(suffix: str, low: float, high: float) -> float:
        name = f"BURACO_TOURNAMENT_{suffix}"
        return number_setting(name, raw(name), low, high)

    hold_ttl = number("HOLD_TTL_HOURS", 1, 24 * 365)
    max_duration = number("MAX_DURATION_HOURS", 1, 24 * 365)
    if max_duration >= hold_ttl:
        raise ConfigError(
            f"BURACO_TOURNAMENT_MAX_DURATION_HOURS={max_duration:g}: must be shorter than"
            f" BURACO_TOURNAMENT_HOLD_TTL_HOURS={hold_ttl:g}"
        )
    replica = source.get("BURACO_TOURNAMENT_REPLICA_ID") or socket.gethostname() or "local"
    if len(replica) > 100 or not replica.isprintable():
        raise ConfigError("BURACO_TOURNAMENT_REPLICA_ID: at most 100 printable characters")
    return TournamentSettings(
        tick_seconds=number("TICK_SECONDS", 0.01, 3600),
        poll_seconds=number("POLL_SECONDS", 0.01, 3600),
        reconcile_seconds=number("RECONCILE_SECONDS", 0.01, 86_400),
        result_grace_seconds=number("RESULT_GRACE_SECONDS", 0, 86_400),
        hold_ttl_hours=hold_ttl,
        max_duration_hours=max_duration,
        seeding_wait_seconds=number("SEEDING_WAIT_SECONDS", 0, 86_400),
        lease_seconds=number("LEASE_SECONDS", 1, 3600),
        replica_id=replica,
        watch_poll_seconds=number("WATCH_POLL_SECONDS", 0.01, 60),
        call_timeout_seconds=number("CALL_TIMEOUT_SECONDS", 0.1, 300),
        retry_seconds=number("RETRY_SECONDS", 0.01, 300),
    )

"""The tournament service's own settings (environment variables, read when the service starts).

Declared once in `SETTINGS` (services.common.config: name, kind and bounds, default, meaning),
from which `load()` reads them and scripts/gen_settings_doc.py writes the README's "Tournament
configuration". A bad value stops the service before it binds (exit status 2, the message names
the variable).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from services.common.config import ConfigError, Number, Setting, Text


def _replica_name(raw: str) -> str | None:
    return None if len(raw) <= 100 and raw.isprintable() else "at most 100 printable characters"


TICK_SECONDS = Setting(
    "BURACO_TOURNAMENT_TICK_SECONDS",
    Number(0.01, 3600),
    "1",
    "how often the scheduler looks for due work when nothing wakes it (registration windows, starts, retries)",
)
POLL_SECONDS = Setting(
    "BURACO_TOURNAMENT_POLL_SECONDS",
    Number(0.01, 3600),
    "5",
    "how often a table is read before its no-show deadline, to see who has joined it",
)
RECONCILE_SECONDS = Setting(
    "BURACO_TOURNAMENT_RECONCILE_SECONDS",
    Number(0.01, 86_400),
    "30",
    "how often a table still undecided after its no-show deadline is read, to find results whose report was lost",
)
RESULT_GRACE_SECONDS = Setting(
    "BURACO_TOURNAMENT_RESULT_GRACE_SECONDS",
    Number(0, 86_400),
    "60",
    "how long after a table is seen finished its report may take before the result is read from the table",
)
HOLD_TTL_HOURS = Setting(
    "BURACO_TOURNAMENT_HOLD_TTL_HOURS",
    Number(1, 24 * 365),
    "720",
    "how long buy-in holds live in the wallet (at most the wallet's BURACO_WALLET_MAX_HOLD_TTL_SECONDS)",
)
MAX_DURATION_HOURS = Setting(
    "BURACO_TOURNAMENT_MAX_DURATION_HOURS",
    Number(1, 24 * 365),
    "48",
    "the longest a tournament may run after its start: registration may open at most the hold TTL minus"
    " this before the start",
)
SEEDING_WAIT_SECONDS = Setting(
    "BURACO_TOURNAMENT_SEEDING_WAIT_SECONDS",
    Number(0, 86_400),
    "120",
    "how long the start waits for the ranking service's ratings before seeding by registration order",
)
LEASE_SECONDS = Setting(
    "BURACO_TOURNAMENT_LEASE_SECONDS",
    Number(1, 3600),
    "30",
    "how long a replica keeps a tournament's scheduling to itself; another replica takes over after it",
)
REPLICA_ID = Setting(
    "BURACO_TOURNAMENT_REPLICA_ID",
    Text("at most 100 printable characters", _replica_name),
    "",
    "this replica's name in the scheduling leases; a restarted process with the same name resumes at once",
    default_text="the host name",
)
WATCH_POLL_SECONDS = Setting(
    "BURACO_TOURNAMENT_WATCH_POLL_SECONDS",
    Number(0.01, 60),
    "1",
    "how often WatchTournament streams look for changes made by other replicas",
)
CALL_TIMEOUT_SECONDS = Setting(
    "BURACO_TOURNAMENT_CALL_TIMEOUT_SECONDS",
    Number(0.1, 300),
    "10",
    "deadline of each call to the wallet, ranking and game sessions",
)
RETRY_SECONDS = Setting(
    "BURACO_TOURNAMENT_RETRY_SECONDS",
    Number(0.01, 300),
    "2",
    "first wait before retrying a failed call to another service; doubles each time, up to 5 minutes",
)

#: The tournament service's settings, in the README's order.
SETTINGS: tuple[Setting[Any], ...] = (
    TICK_SECONDS,
    POLL_SECONDS,
    RECONCILE_SECONDS,
    RESULT_GRACE_SECONDS,
    HOLD_TTL_HOURS,
    MAX_DURATION_HOURS,
    SEEDING_WAIT_SECONDS,
    LEASE_SECONDS,
    REPLICA_ID,
    WATCH_POLL_SECONDS,
    CALL_TIMEOUT_SECONDS,
    RETRY_SECONDS,
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
    hold_ttl = HOLD_TTL_HOURS.read(env)
    max_duration = MAX_DURATION_HOURS.read(env)
    if max_duration >= hold_ttl:
        raise ConfigError(
            f"{MAX_DURATION_HOURS.name}={max_duration:g}: must be shorter than {HOLD_TTL_HOURS.name}={hold_ttl:g}"
        )
    return TournamentSettings(
        tick_seconds=TICK_SECONDS.read(env),
        poll_seconds=POLL_SECONDS.read(env),
        reconcile_seconds=RECONCILE_SECONDS.read(env),
        result_grace_seconds=RESULT_GRACE_SECONDS.read(env),
        hold_ttl_hours=hold_ttl,
        max_duration_hours=max_duration,
        seeding_wait_seconds=SEEDING_WAIT_SECONDS.read(env),
        lease_seconds=LEASE_SECONDS.read(env),
        replica_id=REPLICA_ID.read(env, default=socket.gethostname() or "local"),
        watch_poll_seconds=WATCH_POLL_SECONDS.read(env),
        call_timeout_seconds=CALL_TIMEOUT_SECONDS.read(env),
        retry_seconds=RETRY_SECONDS.read(env),
    )

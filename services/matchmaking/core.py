"""The matchmaking service's core: what its domain logic works over (a database, the clock, the
other services through `ports.Platform`, the idempotency store, this replica's stream notifier),
the idempotent run of a call, eligibility, and the values passed between the parts:

    tickets.py   quick-match tickets: views, streams, creating, cancelling, confirming
    parties.py   parties of two, who queue as one ticket
    lobby.py     the lobby's tables
    saga.py      the start saga
    loop.py      the matching loop

Each part takes the `Core` as its explicit dependencies; their calls return protobuf answers or
raise the errors of `errors.py`. No grpc import in any of them.

Calls to other services are never made inside a write transaction: eligibility and ratings are
read first, then the change is written (idempotently) in one transaction that checks its starting
state again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from buraco.v1 import common_pb2, matchmaking_pb2
from services.common.db import Database
from services.common.idempotency import IdempotencyStore, request_hash
from services.matchmaking.errors import DependencyUnavailableError, IneligibleError
from services.matchmaking.matcher import BucketKey
from services.matchmaking.ports import CallError, Platform, Unreachable
from services.matchmaking.settings import MatchmakingSettings

R = TypeVar("R", bound=Message)
Clock = Callable[[], datetime]
#: What runs statements: an ORM session (the idempotent calls' transactions) or a Core connection
#: (`Database.read_connection`, `write_connection`: the hot paths, without a session's cost).
Executor = AsyncSession | AsyncConnection


def aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back; they were stored as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def timestamp(moment: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(aware(moment))
    return out


def new_id() -> str:
    return uuid.uuid4().hex


class Notifier:
    """Wakes this replica's watch streams when a ticket, party or lobby table changes here (other
    replicas' changes are found by polling)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, key: str) -> asyncio.Event:
        return self._events.setdefault(key, asyncio.Event())

    def changed(self, *keys: str) -> None:
        for key in keys:
            event = self._events.pop(key, None)
            if event is not None:
                event.set()


@dataclass(frozen=True)
class Viewer:
    """Who reads: a player (their own tickets, parties, tables) or a service or admin (any)."""

    player: str | None
    privileged: bool = False


@dataclass(frozen=True)
class Preferences:
    """What a quick-match ticket is for (checked by the API layer)."""

    preset: str
    seats: int
    length: int
    target_points: int
    mode: int
    bet_chips: int

    @property
    def key(self) -> BucketKey:
        return (self.preset, self.seats, self.length, self.target_points, self.mode, self.bet_chips)

    @property
    def competitive(self) -> bool:
        return self.mode == common_pb2.TABLE_MODE_COMPETITIVE

    def table_options(self) -> common_pb2.TableOptions:
        return common_pb2.TableOptions(
            ruleset=common_pb2.RulesetRef(preset=self.preset),
            players=self.seats,
            length=self.length,  # type: ignore[arg-type]
            target_points=self.target_points,
            mode=self.mode,  # type: ignore[arg-type]
            bet_chips=self.bet_chips,
        )

    def pb(self) -> matchmaking_pb2.MatchPreferences:
        return matchmaking_pb2.MatchPreferences(
            preset=self.preset,
            players=self.seats,
            length=self.length,  # type: ignore[arg-type]
            target_points=self.target_points,
            mode=self.mode,  # type: ignore[arg-type]
            bet_chips=self.bet_chips,
        )


def preferences_of(row: Any) -> Preferences:
    return Preferences(row.preset, row.seats, row.length, row.target_points, row.mode, row.bet_chips)


class Core:
    """What the matchmaking service's domain logic works over, shared by its tickets, parties,
    lobby, start saga and matching loop: the database, the other services, the settings, the
    clock, the idempotency store, the notifier of this replica's streams and the loop's wake-up."""

    def __init__(
        self,
        db: Database,
        platform: Platform,
        settings: MatchmakingSettings,
        clock: Clock,
        idempotency: IdempotencyStore,
        notifier: Notifier | None = None,
    ) -> None:
        #: Writes through `db.write()` (on SQLite the process's one writer), reads through
        #: `db.read()` (never waiting for it); see services.common.db.
        self.db = db
        self.platform = platform
        self.settings = settings
        self.clock = clock
        self.idempotency = idempotency
        self.notifier = notifier or Notifier()
        #: Wakes the matching loop (set by the service once it has one).
        self.wake: Callable[[], None] = lambda: None
        #: A searching ticket's place in its bucket as the matching loop last read the queue, given
        #: the ticket's version; None when the loop cannot tell (set by the service: Loop.position).
        self.queue_position: Callable[[str, int], int | None] = lambda ticket, version: None
        #: The place of a ticket about to be queued at the back of a bucket, from the loop's last
        #: reading of the queue and the tickets queued here since; None when the loop cannot tell
        #: (set by the service: Loop.new_place). `queued_here` counts a ticket queued here.
        self.new_place: Callable[[BucketKey], int | None] = lambda key: None
        self.queued_here: Callable[[BucketKey], None] = lambda key: None

    # -- idempotency ------------------------------------------------------------------------------

    async def prior_answer(self, scope: str, method: str, request: Message, response_type: type[R]) -> R | None:
        """The stored answer of a retried call, read before calling other services, so a retry
        answers as the first call did even when eligibility has changed since."""
        async with self.db.read_each() as session:
            row = await self.idempotency.lookup(session, scope, getattr(request, "request_id", ""))
        if row is None or aware(row.expires_at) <= self.clock():
            return None
        if row.method != method or row.request_hash != request_hash(method, request):
            return None  # the idempotent run reports ALREADY_EXISTS
        return response_type.FromString(row.response)

    async def once(
        self,
        scope: str,
        method: str,
        request: Message,
        response_type: type[R],
        work: Callable[[AsyncSession], Any],
    ) -> R:
        reply: R = await self.idempotency.run(
            self.db, scope=scope, method=method, request=request, response_type=response_type, work=work
        )
        return reply

    # -- eligibility ------------------------------------------------------------------------------

    async def check_eligible(self, players: Sequence[str], bet_chips: int) -> None:
        """Competitive play: every player has a wallet account (is registered) that covers the
        bet now (the hold at the start is what really reserves the chips)."""
        try:
            accounts = await asyncio.gather(*(self.platform.account(p) for p in players))
        except Unreachable as error:
            raise DependencyUnavailableError(f"the wallet did not answer ({error.code}); retry") from None
        except CallError as error:
            raise DependencyUnavailableError(f"the wallet refused to answer ({error.code})") from None
        for player, account in zip(players, accounts, strict=True):
            if account is None:
                raise IneligibleError(f"players/{player} is not registered: competitive tables need a wallet account")
            if account.available_chips < bet_chips:
                raise IneligibleError(
                    f"players/{player} has insufficient chips: the bet is {bet_chips},"
                    f" {account.available_chips} available"
                )

"""The matchmaking service's tables. Every table name starts with `matchmaking_`; the
Alembic history in `migrations/` creates them (`python -m services.matchmaking revision --autogenerate`
writes a migration from changes here).

Lists of players and seats are JSON columns: they are read and written whole with their row, and
what must be unique or searched (one live ticket per player, one party per player, invitations)
has a table of its own with a key.
"""

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Table,
)

from services.common.db import new_metadata
from services.common.idempotency import idempotency_table

metadata = new_metadata()

#: Answers of mutating calls by (caller, request id); see services.common.idempotency.
idempotency_keys = idempotency_table(metadata, "matchmaking")

#: Quick-match tickets. `state`: searching, proposed, matched, failed, cancelled.
tickets = Table(
    "matchmaking_tickets",
    metadata,
    Column("id", String(63), primary_key=True),
    #: The player who queued it (a party's leader).
    Column("owner", String(63), nullable=False),
    #: Player ids, the leader first.
    Column("players", JSON, nullable=False),
    Column("party", String(63), nullable=True),
    Column("preset", String(40), nullable=False),
    Column("seats", SmallInteger, nullable=False),
    Column("length", SmallInteger, nullable=False),
    Column("target_points", Integer, nullable=False),
    Column("mode", SmallInteger, nullable=False),
    Column("bet_chips", BigInteger, nullable=False),
    #: The mean of its players' ratings when it was queued.
    Column("rating", Float(53), nullable=False),
    Column("state", String(16), nullable=False),
    #: Requeued at the front after a start that failed for someone else.
    Column("front", Boolean, nullable=False),
    #: When it started waiting (kept when requeued: the window keeps its width).
    Column("queued_at", DateTime(timezone=True), nullable=False),
    #: Players its players met in their last match (docs/matchmaking.md, "Rematches").
    Column("recent", JSON, nullable=False),
    Column("saga_id", String(63), nullable=True),
    #: Players who confirmed the proposed match.
    Column("confirmed", JSON, nullable=False),
    #: Each player's seat in the proposed or started match: {player: seat}.
    Column("seat_of", JSON, nullable=False),
    Column("confirm_deadline", DateTime(timezone=True), nullable=True),
    Column("game_table", String(80), nullable=False),
    Column("game_address", String(255), nullable=False),
    Column("failure_reason", String(200), nullable=False),
    #: Seconds it waited until a match was proposed (the estimated wait of later tickets).
    Column("wait_seconds", Float(53), nullable=True),
    Column("version", Integer, nullable=False),
    Column("create_time", DateTime(timezone=True), nullable=False),
    Column("update_time", DateTime(timezone=True), nullable=False),
)
Index("ix_matchmaking_tickets_state_bucket", tickets.c.state, tickets.c.preset, tickets.c.seats)

#: One live (searching or proposed) ticket per player: the key refuses a second one.
queue_members = Table(
    "matchmaking_queue_members",
    metadata,
    Column("player", String(63), primary_key=True),
    Column("ticket_id", String(63), nullable=False, index=True),
)

#: Parties of two. `state`: open, disbanded.
parties = Table(
    "matchmaking_parties",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("leader", String(63), nullable=False),
    #: The leader first.
    Column("members", JSON, nullable=False),
    Column("invited", JSON, nullable=False),
    Column("state", String(16), nullable=False),
    Column("create_time", DateTime(timezone=True), nullable=False),
    Column("update_time", DateTime(timezone=True), nullable=False),
)

#: One open party per player.
party_members = Table(
    "matchmaking_party_members",
    metadata,
    Column("player", String(63), primary_key=True),
    Column("party_id", String(63), nullable=False, index=True),
)

#: Match starts (docs/matchmaking.md, "The start saga"). The id is the match id; every request id
#: sent to another service derives from it. `kind`: quick or lobby. `state`: confirming, holding,
#: creating, notifying, compensating, started, failed.
sagas = Table(
    "matchmaking_sagas",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("lobby_table", String(63), nullable=True),
    Column("state", String(16), nullable=False),
    #: One entry per seat: {"player": id or null, "bot": level (0 for a player), "ticket": id or null}.
    Column("seats", JSON, nullable=False),
    Column("tickets", JSON, nullable=False),
    #: The game table's TableOptions (serialized).
    Column("options", LargeBinary, nullable=False),
    Column("bet_chips", BigInteger, nullable=False),
    Column("confirm_deadline", DateTime(timezone=True), nullable=True),
    #: After this the start stops retrying and compensates.
    Column("deadline", DateTime(timezone=True), nullable=False),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    Column("attempts", Integer, nullable=False),
    #: Whether a hold or a table may exist (what compensation must undo).
    Column("held", Boolean, nullable=False),
    Column("table_requested", Boolean, nullable=False),
    Column("game_table", String(80), nullable=False),
    Column("game_address", String(255), nullable=False),
    #: Players whose fault the failure is (they fail; the others are requeued at the front).
    Column("culprits", JSON, nullable=False),
    Column("failure_reason", String(200), nullable=False),
    Column("create_time", DateTime(timezone=True), nullable=False),
    Column("update_time", DateTime(timezone=True), nullable=False),
)
Index("ix_matchmaking_sagas_state_next", sagas.c.state, sagas.c.next_attempt_at)

#: The players each player met in their last match (the rematch rule).
recent = Table(
    "matchmaking_recent",
    metadata,
    Column("player", String(63), primary_key=True),
    Column("others", JSON, nullable=False),
    Column("update_time", DateTime(timezone=True), nullable=False),
)

#: Lobby tables. `state`: open, starting, in_match, closed.
lobby_tables = Table(
    "matchmaking_lobby_tables",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("chief", String(63), nullable=True),
    #: TableOptions (serialized); the filterable options are also columns.
    Column("options", LargeBinary, nullable=False),
    Column("preset", String(40), nullable=False),
    Column("seat_count", SmallInteger, nullable=False),
    Column("mode", SmallInteger, nullable=False),
    Column("bet_chips", BigInteger, nullable=False),
    Column("private", Boolean, nullable=False),
    Column("free_seats", SmallInteger, nullable=False),
    Column("state", String(16), nullable=False, index=True),
    #: One entry per seat: {"player": id or null, "bot": level or 0, "ready": bool, "rematch": bool}.
    Column("seats", JSON, nullable=False),
    #: Players at the table without a seat (stood up), in arrival order.
    Column("onlookers", JSON, nullable=False),
    Column("saga_id", String(63), nullable=True),
    Column("game_table", String(80), nullable=False),
    Column("game_address", String(255), nullable=False),
    Column("match_id", String(63), nullable=False),
    Column("version", Integer, nullable=False),
    Column("create_time", DateTime(timezone=True), nullable=False),
    Column("update_time", DateTime(timezone=True), nullable=False),
)

#: Invitations to private lobby tables.
lobby_invitations = Table(
    "matchmaking_lobby_invitations",
    metadata,
    Column("table_id", String(63), primary_key=True),
    Column("player", String(63), primary_key=True, index=True),
)

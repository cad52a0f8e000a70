"""The game-session service's tables. Every table name starts with `game_session_`; the
Alembic history in `migrations/` creates them (`python -m services.game_session revision --autogenerate`
writes a migration from changes here).

Times are whole milliseconds since the epoch (BigInteger): the same on SQLite and PostgreSQL, and
compared with the replica's clock, which is also what the timers use.
"""

from sqlalchemy import BigInteger, Column, Index, Integer, LargeBinary, String, Table, Text

from services.common.db import new_metadata
from services.common.idempotency import idempotency_table

metadata = new_metadata()

#: Answers of mutating calls by (caller, request id); see services.common.idempotency.
idempotency_keys = idempotency_table(metadata, "game_session")

#: One row per table: its immutable description (the CreateTable `Table`, serialised) and the
#: fields that change rarely (state, scores); `seq` is refreshed when the state changes.
tables = Table(
    "game_session_tables",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("match_id", String(200), nullable=False, unique=True),
    Column("description", LargeBinary, nullable=False),
    Column("state", Integer, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("match_scores", String(100), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_game_session_tables_state_id", "state", "id"),
)

#: Who sits where, to list a player's tables.
seats = Table(
    "game_session_seats",
    metadata,
    Column("table_id", String(63), primary_key=True),
    Column("seat", Integer, primary_key=True),
    Column("player", String(63), nullable=False, index=True),
)

#: The authoritative event log: every accepted event, in order, with everything needed to rebuild
#: the table (the deal's secret layer included). `data` is JSON (services.game_session.table).
events = Table(
    "game_session_events",
    metadata,
    Column("table_id", String(63), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("data", Text, nullable=False),
)

#: Ownership: one replica at a time appends to a table's log. `epoch` grows at every change of
#: owner; an append is accepted only under the epoch the appending replica holds (fencing). A
#: lease lasts as long as its owner's heartbeat (`replicas`).
leases = Table(
    "game_session_leases",
    metadata,
    Column("table_id", String(63), primary_key=True),
    Column("owner_address", String(200), nullable=False),
    Column("owner_id", String(64), nullable=False, index=True),
    Column("epoch", BigInteger, nullable=False),
    Column("live", Integer, nullable=False),
    # The lease scans read live leases only: a finished table's row stays (live 0) for good, so
    # without it every scan would read every table the replica ever held.
    Index("ix_game_session_leases_live_owner_id", "live", "owner_id"),
)

#: The replicas' heartbeats: one row per process (`owner_id` is random per process), renewed every
#: scan; a replica whose `expires_ms` passed is presumed gone and its tables may be taken over.
replicas = Table(
    "game_session_replicas",
    metadata,
    Column("owner_id", String(64), primary_key=True),
    Column("address", String(200), nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
    # the release the replica runs, and when it gave its tables up (0: it has not; a graceful stop)
    Column("revision", String(64), nullable=False, server_default=""),
    Column("released_ms", BigInteger, nullable=False, server_default="0"),
)

#: Calls to other services that a match end owes (wallet settle/void, ranking record), written in
#: the transaction that ends the match and delivered by the background deliverer.
outbox = Table(
    "game_session_outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("table_id", String(63), nullable=False),
    Column("target", String(64), nullable=False),
    Column("request", LargeBinary, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_ms", BigInteger, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("last_error", String(500), nullable=False),
    #: the owner id of the replica whose deliverer claimed the row last ('' never claimed)
    Column("claimed_by", String(64), nullable=False, server_default=""),
    Index("ix_game_session_outbox_state_next", "state", "next_attempt_ms"),
    # delivered rows stay: a load-test run's erasure finds its tables' rows by this index
    Index("ix_game_session_outbox_table_id", "table_id"),
)

#: Chat mutes: `viewer` is the player who muted `player`, or `*` for an admin's table-wide mute.
mutes = Table(
    "game_session_mutes",
    metadata,
    Column("table_id", String(63), primary_key=True),
    Column("viewer", String(63), primary_key=True),
    Column("player", String(63), primary_key=True),
)

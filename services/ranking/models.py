"""The ranking service's tables. Every table name starts with `ranking_`; the
Alembic history in `migrations/` creates them (`python -m services.ranking revision --autogenerate`
writes a migration from changes here). docs/ranking.md explains the design.

    matches          one row per recorded match id: its content hash and first result (idempotency)
    players          XP, level and statistics per player (the lock every update of a player takes)
    xp_events        a player's XP awards and level-ups, by a per-player sequence number
    ratings          the current rating per (player, preset, table size); preset `*` = every modality
    rating_history   the rating after each rated match, by a per-rating sequence number
    board_entries    one row per (leaderboard, player): the score and when it was reached
    board_counts     how many entries each leaderboard has per score bucket, per score and per
                     (score, time slot): what makes a player's rank a few index look-ups

No client address is stored anywhere: RecordMatch compares the seats' addresses in memory and
keeps only whether two of them were equal (`matches.shared_address`).
"""

from datetime import UTC, datetime

from sqlalchemy import (
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
idempotency_keys = idempotency_table(metadata, "ranking")

#: Recorded matches: the match id is the idempotency key of RecordMatch across request ids.
matches = Table(
    "ranking_matches",
    metadata,
    Column("match_id", String(63), primary_key=True),
    #: SHA-256 of the request without its request id, addresses replaced by who-shares-with-whom.
    Column("content_hash", String(64), nullable=False),
    Column("preset", String(40), nullable=False),
    Column("players", SmallInteger, nullable=False),
    Column("express", Boolean, nullable=False),
    Column("competitive", Boolean, nullable=False),
    Column("annulled", Boolean, nullable=False),
    #: Two seats came from one address: no XP, ratings or leaderboard points.
    Column("shared_address", Boolean, nullable=False),
    Column("rated", Boolean, nullable=False),
    Column("end_time", DateTime(timezone=True), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    #: The first answer (JSON), returned again to any later call for this match id.
    Column("result", LargeBinary, nullable=False),
)

players = Table(
    "ranking_players",
    metadata,
    Column("player", String(63), primary_key=True),
    Column("xp", BigInteger, nullable=False),
    Column("level", Integer, nullable=False),
    Column("matches", BigInteger, nullable=False),
    Column("wins", BigInteger, nullable=False),
    Column("losses", BigInteger, nullable=False),
    Column("abandonments", BigInteger, nullable=False),
    Column("canastras", BigInteger, nullable=False),
    Column("score_sum", BigInteger, nullable=False),
    #: XP events so far: the next event's sequence number is this + 1.
    Column("xp_events", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

xp_events = Table(
    "ranking_xp_events",
    metadata,
    Column("player", String(63), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("match_id", String(63), nullable=False),
    Column("xp_gained", BigInteger, nullable=False),
    Column("xp_total", BigInteger, nullable=False),
    Column("level", Integer, nullable=False),
    Column("level_up", Boolean, nullable=False),
    Column("time", DateTime(timezone=True), nullable=False),
)

ratings = Table(
    "ranking_ratings",
    metadata,
    Column("player", String(63), primary_key=True),
    Column("preset", String(40), primary_key=True),
    Column("players", SmallInteger, primary_key=True),
    Column("mu", Float(53), nullable=False),
    Column("sigma", Float(53), nullable=False),
    #: Rated matches: also the sequence number of the latest history row.
    Column("matches", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

rating_history = Table(
    "ranking_rating_history",
    metadata,
    Column("player", String(63), primary_key=True),
    Column("preset", String(40), primary_key=True),
    Column("players", SmallInteger, primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("match_id", String(63), nullable=False),
    Column("mu", Float(53), nullable=False),
    Column("sigma", Float(53), nullable=False),
    Column("time", DateTime(timezone=True), nullable=False),
)

board_entries = Table(
    "ranking_board_entries",
    metadata,
    #: `metric|scope|period|start`, e.g. `xp|*|week|2026-11-23`, `r4|aberto|all|-` (leaderboards.py).
    Column("board", String(64), primary_key=True),
    Column("player", String(63), primary_key=True),
    #: Minus the score (XP, or the rating's ordinal in hundredths), so that one ascending index
    #: is the board's order: higher score, then earlier achievement, then player id.
    Column("order_score", BigInteger, nullable=False),
    #: When the score was reached, microseconds since the epoch (UTC).
    Column("achieved_us", BigInteger, nullable=False),
    Index("ix_ranking_board_entries_order", "board", "order_score", "achieved_us", "player"),
)

board_counts = Table(
    "ranking_board_counts",
    metadata,
    Column("board", String(64), primary_key=True),
    #: 0: per score bucket (key = score // BUCKET_WIDTH); 1: per score (key = score);
    #: 2: per score and time slot (key = score, slot = achieved_us // the period's slot length).
    Column("level", SmallInteger, primary_key=True),
    Column("key", BigInteger, primary_key=True),
    Column("slot", BigInteger, primary_key=True),
    Column("count", BigInteger, nullable=False),
)


def aware(moment: datetime) -> datetime:
    """A datetime read back from these tables: SQLite gives it naive; it was stored as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)

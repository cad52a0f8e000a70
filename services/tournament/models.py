"""The tournament service's tables. Every table name starts with `tournament_`; the
Alembic history in `migrations/` creates them (`python -m services.tournament revision --autogenerate`
writes a migration from changes here).

Everything that matters lives here, nothing only in memory: a restarted replica (or another one)
resumes every tournament from these rows (docs/tournaments.md, "State machine and recovery").

- `tournaments`: one row per tournament: its definition, its state and phase, the scheduler's
  `due_at` and lease, and `version`, bumped by every change (WatchTournament follows it).
- `entrants`: one row per entry (a player, or a pair), with its seed once started.
- `entrant_players`: the players of an entry, each with the state of their buy-in hold in the
  wallet (`hold_state`) and the request id of the Register call that made it.
- `rounds` and `pairings`: the bracket; a pairing is one match (or a bye) with its table.
- `matches`: every match id a pairing has had (a replayed table gets a new one), to find the
  pairing a result is about.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
)

from services.common.db import new_metadata
from services.common.idempotency import idempotency_table

metadata = new_metadata()

#: Answers of mutating calls by (caller, request id); see services.common.idempotency.
idempotency_keys = idempotency_table(metadata, "tournament")

Timestamp = DateTime(timezone=True)

tournaments = Table(
    "tournament_tournaments",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("display_name", String(100), nullable=False),
    #: The TableOptions message, serialised (the tables' options: ruleset, seats, length, timers).
    Column("table_options", LargeBinary, nullable=False),
    #: "single_elimination" or "swiss".
    Column("format", String(20), nullable=False),
    Column("swiss_rounds", Integer, nullable=False),
    #: Per player.
    Column("buy_in", BigInteger, nullable=False),
    #: [[place, share_bp], ...]
    Column("prizes", JSON, nullable=False),
    Column("registration_open_at", Timestamp, nullable=False),
    Column("registration_close_at", Timestamp, nullable=False),
    Column("start_at", Timestamp, nullable=False),
    Column("min_entrants", Integer, nullable=False),
    Column("max_entrants", Integer, nullable=False),
    Column("no_show_seconds", Integer, nullable=False),
    #: "scheduled", "registration", "running", "finished", "cancelled".
    Column("state", String(20), nullable=False),
    #: While running: "starting" (closing entries, seeding) or "playing".
    Column("phase", String(20), nullable=False, server_default=""),
    Column("chips_settled", Boolean, nullable=False),
    Column("current_round", Integer, nullable=False),
    Column("total_rounds", Integer, nullable=False),
    Column("cancel_reason", String(500), nullable=False, server_default=""),
    Column("pool_chips", BigInteger, nullable=False),
    Column("house_cut_chips", BigInteger, nullable=False),
    Column("prize_pool_chips", BigInteger, nullable=False),
    #: The next entry number (`e{n}`).
    Column("next_entrant", Integer, nullable=False),
    Column("version", Integer, nullable=False),
    #: When the scheduler should look at the tournament next (null: nothing to do).
    Column("due_at", Timestamp, nullable=True, index=True),
    Column("lease_owner", String(100), nullable=True),
    Column("lease_until", Timestamp, nullable=True),
    #: Failed attempts of the current step with another service (backoff), and why the last one failed.
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("last_error", String(500), nullable=False, server_default=""),
    #: The first time the start asked the ranking service for ratings (the seeding wait runs from it).
    Column("seeding_since", Timestamp, nullable=True),
    Column("created_by", String(200), nullable=False),
    Column("created_at", Timestamp, nullable=False, index=True),
    Column("updated_at", Timestamp, nullable=False),
    Column("started_at", Timestamp, nullable=True),
    Column("ended_at", Timestamp, nullable=True),
)

entrants = Table(
    "tournament_entrants",
    metadata,
    Column("tournament_id", String(40), primary_key=True),
    #: "e{seq}".
    Column("id", String(20), primary_key=True),
    Column("seq", Integer, nullable=False),
    #: "open" (a buy-in still missing: a pair waiting for the partner, or a hold under way),
    #: "complete", "withdrawn" (unregistered), "dropped" (incomplete at the start: released),
    #: "failed" (its only hold was refused; not shown).
    Column("state", String(20), nullable=False),
    Column("seed", Integer, nullable=True),
    Column("rating", Float, nullable=True),
    Column("place", Integer, nullable=True),
    Column("prize_chips", BigInteger, nullable=False),
    Column("registered_at", Timestamp, nullable=False),
    ForeignKeyConstraint(["tournament_id"], ["tournament_tournaments.id"], ondelete="CASCADE"),
)

entrant_players = Table(
    "tournament_entrant_players",
    metadata,
    Column("tournament_id", String(40), primary_key=True),
    Column("entrant_id", String(20), primary_key=True),
    #: 0: the player who created the entry; 1: the partner.
    Column("position", Integer, primary_key=True),
    Column("player", String(63), nullable=False),
    #: "none" (the partner has not registered yet), "holding" (HoldBets under way), "held",
    #: "releasing" (Void under way), "released", "failed" (the hold was refused).
    #: A free tournament makes no wallet calls: registered players are "held" at once.
    Column("hold_state", String(20), nullable=False),
    #: The Register call's request id and request hash (retries find their row by them).
    Column("request_id", String(64), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("registered_at", Timestamp, nullable=True),
    #: When the hold or release began (the scheduler finishes ones left behind).
    Column("op_started_at", Timestamp, nullable=True),
    ForeignKeyConstraint(
        ["tournament_id", "entrant_id"],
        ["tournament_entrants.tournament_id", "tournament_entrants.id"],
        ondelete="CASCADE",
    ),
    Index("ix_tournament_entrant_players_player", "tournament_id", "player"),
)

rounds = Table(
    "tournament_rounds",
    metadata,
    Column("tournament_id", String(40), primary_key=True),
    Column("number", Integer, primary_key=True),
    Column("started_at", Timestamp, nullable=False),
    Column("finished_at", Timestamp, nullable=True),
    ForeignKeyConstraint(["tournament_id"], ["tournament_tournaments.id"], ondelete="CASCADE"),
)

pairings = Table(
    "tournament_pairings",
    metadata,
    Column("tournament_id", String(40), primary_key=True),
    Column("round", Integer, primary_key=True),
    #: Position in the round (elimination: the bracket slot).
    Column("slot", Integer, primary_key=True),
    Column("entrant_a", String(20), nullable=False),
    #: Null for a bye.
    Column("entrant_b", String(20), nullable=True),
    #: "creating" (its table is being created), "playing", "decided".
    Column("state", String(20), nullable=False),
    #: The current match id (null for a bye) and how many tables the pairing has had.
    Column("match_id", String(63), nullable=True, unique=True),
    Column("attempt", Integer, nullable=False),
    Column("table_name", String(80), nullable=True),
    Column("winner", String(20), nullable=True),
    #: "bye", "report" (the game-session service's report), "table" (read from the table),
    #: "no_show", "cancelled" (the tournament was cancelled mid-round).
    Column("decided_by", String(20), nullable=True),
    Column("forfeit", Boolean, nullable=False),
    Column("score_a", BigInteger, nullable=True),
    Column("score_b", BigInteger, nullable=True),
    #: Players seen connected at the table (they showed); players who did not show in time.
    Column("showed", JSON, nullable=False),
    Column("no_shows", JSON, nullable=False),
    Column("table_created_at", Timestamp, nullable=True),
    Column("no_show_deadline", Timestamp, nullable=True),
    #: When the table should next be created (after a failure) or read.
    Column("next_check_at", Timestamp, nullable=True),
    Column("failures", Integer, nullable=False),
    #: When the table was first seen finished without a report yet.
    Column("finished_seen_at", Timestamp, nullable=True),
    Column("decided_at", Timestamp, nullable=True),
    ForeignKeyConstraint(["tournament_id"], ["tournament_tournaments.id"], ondelete="CASCADE"),
)

matches = Table(
    "tournament_matches",
    metadata,
    Column("match_id", String(63), primary_key=True),
    Column("tournament_id", String(40), nullable=False),
    Column("round", Integer, nullable=False),
    Column("slot", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    ForeignKeyConstraint(["tournament_id"], ["tournament_tournaments.id"], ondelete="CASCADE"),
)

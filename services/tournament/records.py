"""Reading and writing the tournament's rows: the helpers `core` (the calls) and `progress` (the
scheduler's steps) share. No grpc.

Every transaction that changes a tournament starts with `lock()`, which serialises it against
every other change to the same tournament (a row lock on PostgreSQL, the write lock on SQLite),
and ends with `bump()`, which bumps the version that WatchTournament streams follow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from services.tournament import models, standings
from services.tournament.errors import TournamentNotFoundError

Clock = Callable[[], datetime]

SINGLE_ELIMINATION = "single_elimination"
SWISS = "swiss"

#: Entry states that count: shown in lists, counted against the maximum.
ACTIVE_ENTRY = ("open", "complete")
#: Hold states of a player who has registered (and not withdrawn).
REGISTERED = ("holding", "held")


def aware(moment: datetime | None) -> datetime | None:
    """SQLite gives naive datetimes back; they were stored as UTC."""
    if moment is None:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def at(moment: datetime | None) -> datetime:
    value = aware(moment)
    assert value is not None
    return value


# -- request ids and match ids derived from durable state ---------------------------------------
# Tournament ids are at most 40 characters, so every derived id fits the 64 of a request id and
# the 63 of a match id (docs/tournaments.md, "Calls to other services").


def hold_request_id(tournament: str, entrant: str, position: int) -> str:
    return f"hold:{tournament}:{entrant}:{position}"


def release_request_id(tournament: str, entrant: str, position: int) -> str:
    return f"release:{tournament}:{entrant}:{position}"


def refund_request_id(tournament: str) -> str:
    return f"refund:{tournament}"


def prizes_request_id(tournament: str) -> str:
    return f"prizes:{tournament}"


def match_id(tournament: str, round_number: int, slot: int, attempt: int) -> str:
    base = f"{tournament}-r{round_number}-m{slot}"
    return base if attempt == 1 else f"{base}-a{attempt}"


def table_request_id(match: str) -> str:
    return f"table:{match}"


def cancel_table_request_id(match: str) -> str:
    return f"cancel-table:{match}"


# -- locking and versions -------------------------------------------------------------------------


async def lock(session: AsyncSession, tournament: str) -> Any:
    """The tournament's row, locked for the rest of the transaction; NOT_FOUND when missing."""
    t = models.tournaments
    if session.get_bind().dialect.name == "postgresql":
        row = (await session.execute(select(t).where(t.c.id == tournament).with_for_update())).first()
    else:
        # SQLite: a write first takes the database's write lock, so what follows reads a state
        # no other writer can change before this transaction commits.
        await session.execute(update(t).where(t.c.id == tournament).values(id=t.c.id))
        row = (await session.execute(select(t).where(t.c.id == tournament))).first()
    if row is None:
        raise TournamentNotFoundError(f"tournaments/{tournament} does not exist")
    return row


async def read(session: AsyncSession, tournament: str) -> Any:
    t = models.tournaments
    row = (await session.execute(select(t).where(t.c.id == tournament))).first()
    if row is None:
        raise TournamentNotFoundError(f"tournaments/{tournament} does not exist")
    return row


async def bump(session: AsyncSession, tournament: str, now: datetime, **values: Any) -> None:
    """Records a change: the given columns, a new version, the update time."""
    t = models.tournaments
    await session.execute(
        update(t).where(t.c.id == tournament).values(version=t.c.version + 1, updated_at=now, **values)
    )


# -- entries --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntryPlayer:
    position: int
    player: str
    hold_state: str
    request_id: str | None
    request_hash: str | None
    registered_at: datetime | None
    op_started_at: datetime | None


@dataclass(frozen=True)
class Entry:
    id: str
    seq: int
    state: str
    seed: int | None
    rating: float | None
    place: int | None
    prize_chips: int
    registered_at: datetime
    players: tuple[EntryPlayer, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.player for p in self.players)


async def entries(session: AsyncSession, tournament: str, *, entrant: str | None = None) -> list[Entry]:
    """The tournament's entries in registration order (or the one named), with their players."""
    e, p = models.entrants, models.entrant_players
    entry_query = select(e).where(e.c.tournament_id == tournament)
    player_query = select(p).where(p.c.tournament_id == tournament)
    if entrant is not None:
        entry_query = entry_query.where(e.c.id == entrant)
        player_query = player_query.where(p.c.entrant_id == entrant)
    players: dict[str, list[EntryPlayer]] = {}
    for row in await session.execute(player_query.order_by(p.c.entrant_id, p.c.position)):
        players.setdefault(row.entrant_id, []).append(
            EntryPlayer(
                row.position,
                row.player,
                row.hold_state,
                row.request_id,
                row.request_hash,
                aware(row.registered_at),
                aware(row.op_started_at),
            )
        )
    return [
        Entry(
            row.id,
            row.seq,
            row.state,
            row.seed,
            row.rating,
            row.place,
            row.prize_chips,
            at(row.registered_at),
            tuple(players.get(row.id, [])),
        )
        for row in await session.execute(entry_query.order_by(e.c.seq))
    ]


async def set_player(session: AsyncSession, tournament: str, entrant: str, position: int, **values: Any) -> int:
    p = models.entrant_players
    result = await session.execute(
        update(p)
        .where(p.c.tournament_id == tournament, p.c.entrant_id == entrant, p.c.position == position)
        .values(**values)
    )
    return int(getattr(result, "rowcount", 0) or 0)


async def set_entry(session: AsyncSession, tournament: str, entrant: str, **values: Any) -> None:
    e = models.entrants
    await session.execute(update(e).where(e.c.tournament_id == tournament, e.c.id == entrant).values(**values))


async def settle_entry_state(session: AsyncSession, tournament: str, entrant: str) -> str:
    """Derives an entry's state from its players' holds (after one of them changed)."""
    (entry,) = await entries(session, tournament, entrant=entrant)
    if entry.state not in ACTIVE_ENTRY:
        return entry.state
    states = [p.hold_state for p in entry.players]
    if all(s == "held" for s in states):
        state = "complete"
    elif any(s in ("holding", "held", "releasing") for s in states):
        state = "open"
    elif entry.players[0].hold_state == "failed":
        state = "failed"
    else:
        state = "withdrawn"
    if state != entry.state:
        await set_entry(session, tournament, entrant, state=state)
    return state


# -- bracket ----------------------------------------------------------------------------------------


async def pairings(session: AsyncSession, tournament: str, *, round_number: int | None = None) -> list[Any]:
    pr = models.pairings
    query = select(pr).where(pr.c.tournament_id == tournament)
    if round_number is not None:
        query = query.where(pr.c.round == round_number)
    return list(await session.execute(query.order_by(pr.c.round, pr.c.slot)))


async def rounds(session: AsyncSession, tournament: str) -> list[Any]:
    r = models.rounds
    return list(await session.execute(select(r).where(r.c.tournament_id == tournament).order_by(r.c.number)))


def results(rows: Sequence[Any]) -> list[standings.Result]:
    """The decided pairings as standings results."""
    out: list[standings.Result] = []
    for row in rows:
        if row.state != "decided" or row.decided_by == "cancelled":
            continue
        pair = (row.entrant_a,) if row.entrant_b is None else (row.entrant_a, row.entrant_b)
        scores = (int(row.score_a), int(row.score_b)) if row.score_a is not None and row.score_b is not None else None
        out.append(standings.Result(row.round, pair, row.winner, scores, row.entrant_b is None, bool(row.forfeit)))
    return out


def table_standings(format_: str, seeded: dict[str, int], rows: Sequence[Any]) -> list[standings.Standing]:
    done = results(rows)
    if format_ == SWISS:
        return standings.swiss_standings(seeded, done)
    return standings.elimination_standings(seeded, done)


def _rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


async def decide(
    session: AsyncSession,
    tournament: str,
    pairing: Any,
    now: datetime,
    *,
    winner: str | None,
    decided_by: str,
    scores: tuple[int, int] | None = None,
    forfeit: bool = False,
    no_shows: Sequence[str] = (),
) -> bool:
    """Decides a pairing, once: False when it was decided already (or has another table now)."""
    pr = models.pairings
    result = await session.execute(
        update(pr)
        .where(
            pr.c.tournament_id == tournament,
            pr.c.round == pairing.round,
            pr.c.slot == pairing.slot,
            pr.c.state != "decided",
            pr.c.attempt == pairing.attempt,
        )
        .values(
            state="decided",
            winner=winner,
            decided_by=decided_by,
            forfeit=forfeit,
            score_a=scores[0] if scores is not None else None,
            score_b=scores[1] if scores is not None else None,
            no_shows=sorted(no_shows),
            decided_at=now,
            next_check_at=None,
        )
    )
    if not _rowcount(result):
        return False
    await bump(session, tournament, now, due_at=now)
    return True


async def replay(session: AsyncSession, tournament: str, pairing: Any, now: datetime) -> bool:
    """The pairing's match is played again at a new table (its table was annulled or cancelled
    with everyone present): a new match id, the table to be created."""
    pr = models.pairings
    attempt = pairing.attempt + 1
    new_match = match_id(tournament, pairing.round, pairing.slot, attempt)
    result = await session.execute(
        update(pr)
        .where(
            pr.c.tournament_id == tournament,
            pr.c.round == pairing.round,
            pr.c.slot == pairing.slot,
            pr.c.state != "decided",
            pr.c.attempt == pairing.attempt,
        )
        .values(
            state="creating",
            attempt=attempt,
            match_id=new_match,
            table_name=None,
            showed=[],
            table_created_at=None,
            no_show_deadline=None,
            next_check_at=now,
            failures=0,
            finished_seen_at=None,
        )
    )
    if not _rowcount(result):
        return False
    await session.execute(
        models.matches.insert().values(
            match_id=new_match, tournament_id=tournament, round=pairing.round, slot=pairing.slot, attempt=attempt
        )
    )
    await bump(session, tournament, now, due_at=now)
    return True

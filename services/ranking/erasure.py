"""Erasing a load-test run (EraseLoadTestRun; docs/ranking.md, "Erasing a load-test run").

A run's players are exactly the ids `{run}-{n}` (services.common.loadtest_runs). The erasure removes,
in one transaction, their profiles, XP events, ratings, rating history and leaderboard entries, and
the recorded matches whose every participant is a run player; the boards' counts drop by what the
removed entries counted, so every other entry's rank is what it would be had the run never played.

Who took part in a match. `ranking_matches` has no participant column; its `result` (the JSON of the
first RecordMatch answer) lists every recorded seat's player (bots are not recorded), and it is
written in the transaction that claims the match, so every committed match row has it. The
matches of a run are found by that JSON (`"player":"{run}-`, a literal LIKE pattern: the run id's
alphabet has no wildcard and no character JSON escapes), then each candidate's participants are read
exactly. The XP events and rating history name matches too, but not every match: practice,
annulled and shared-address matches, and an abandonment, leave neither.

Refused (RunNotErasableError, FAILED_PRECONDITION, nothing changed): a recorded match with
participants from inside and outside the run (erasing it would change the outsiders' records, keeping
it would keep run players' ids); and run players whose first match committed while the erasure was
reading (a run still being recorded).

Locks (PostgreSQL). Recording takes match rows, then players' rows in id order, then count rows in
key order (core.record_match and recorder.py alike), and a player's entries, XP events and ratings
are written only under their row's lock. The erasure takes the same order, less the match rows:
    1. the run players' rows, FOR UPDATE in id order (the database's order, as the recorder's
       ORDER BY player): from then on no recording of a run player can commit until the erasure
       does, so the match scan that follows (a later statement: a newer snapshot) sees every match
       of every locked player;
    2. the matches read (no lock);
    3. the players' XP events, ratings, history and entries deleted (rows of locked players only),
       then the matches (committed rows that no transaction keeps locked: a recording updates only
       the match row it inserted itself; a redelivery claiming an erased id waits for the erasure,
       holding no player or count row yet), then the players' rows;
    4. the count rows, last, each moved by one statement in key order (leaderboards.write_counts,
       the recorder's order), then those that fell to zero deleted (rows this step has locked).
A transaction waiting on the erasure therefore never holds a row the erasure still needs: no
deadlock, and the shared count rows are held only from their update to the commit, as a recording
holds them. A stronger lock (the whole counts table) would stall every recording for the whole
erasure, and could deadlock with a recording that holds a run player's row and waits for counts.
A recording that waited on a deleted player or count row inserts it afresh when the erasure commits.

Cost. The matches are found by a scan of `ranking_matches` (the pattern on their results), the
entries by a scan of `ranking_board_entries` per CHUNK run players (its key leads with the board, and
an index by player would cost every recording); the profiles, events and ratings by their keys. A
few statements per CHUNK players, whatever the run's size: admin work, done rarely.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Table, Text, bindparam, cast, delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from services.common.loadtest_runs import is_run_player, like_prefix
from services.ranking import leaderboards, models
from services.ranking.errors import RunNotErasableError
from services.ranking.leaderboards import Position
from services.ranking.matches import MatchRecorded

#: What the erasure counts, in the contract's order (ranking.proto, EraseLoadTestRun).
KINDS = ("players", "xp_events", "ratings", "rating_history", "leaderboard_entries", "matches")
#: Ids per IN list: well under the bound parameters a statement may have (SQLite 32,766, PostgreSQL
#: 32,767), so a run of any size erases in a few statements per this many players.
CHUNK = 5000
#: Match ids a refusal names (the message gives the count of all of them).
EXAMPLES = 5


def _chunks(values: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(values), CHUNK):
        yield list(values[start : start + CHUNK])


async def erase_run(session: AsyncSession, run: str, *, dry_run: bool) -> list[tuple[str, int]]:
    """Erase load-test run `run` in `session`'s transaction (module docstring); each kind of
    `KINDS` with how many records it erased, or with `dry_run`, how many it would erase (nothing
    changed, no row locked). Raises RunNotErasableError, having changed nothing."""
    players = await _run_players(session, run, lock=not dry_run)
    matches = await _run_matches(session, run, players)
    if dry_run:
        counts = {
            "xp_events": await _count(session, models.xp_events, players),
            "ratings": await _count(session, models.ratings, players),
            "rating_history": await _count(session, models.rating_history, players),
            "leaderboard_entries": await _count(session, models.board_entries, players),
        }
    else:
        counts = {
            "xp_events": await _delete(session, models.xp_events, players),
            "ratings": await _delete(session, models.ratings, players),
            "rating_history": await _delete(session, models.rating_history, players),
        }
        entries = await _delete_entries(session, players)
        counts["leaderboard_entries"] = len(entries)
        m = models.matches
        for chunk in _chunks(matches):
            await session.execute(delete(m).where(m.c.match_id.in_(chunk)))
        await _delete(session, models.players, players)
        await _remove_from_counts(session, entries)
    counts["players"] = len(players)
    counts["matches"] = len(matches)
    return [(kind, counts[kind]) for kind in KINDS]


async def _run_players(session: AsyncSession, run: str, *, lock: bool) -> list[str]:
    """The run's players that have a profile (every recorded player has one), locked in id order
    unless `lock` is false. The LIKE prefix also finds (and locks) ids such as `{run}-5-3`, players
    of another run, which are then left out: their lock only makes their recording wait for this
    transaction."""
    p = models.players.c
    query = select(p.player).where(p.player.like(like_prefix(run))).order_by(p.player)
    if lock:
        query = query.with_for_update()
    return [player for player in (await session.scalars(query)) if is_run_player(run, player)]


async def _run_matches(session: AsyncSession, run: str, players: Sequence[str]) -> list[str]:
    """The ids of the recorded matches whose every participant is a run player, sorted; refuses
    when a match had participants from inside and outside the run, or a run player whose profile
    `players` does not have."""
    m = models.matches.c
    pattern = f'%"player":"{like_prefix(run)}'
    bind = session.bind
    if bind is not None and bind.dialect.name == "postgresql":
        mentions = m.result.op("LIKE", is_comparison=True)(pattern.encode())  # bytea LIKE bytea
    else:
        mentions = cast(m.result, Text).like(pattern)  # SQLite's LIKE matches text, not blobs
    rows = await session.execute(select(m.match_id, m.result).where(mentions))
    erasable: list[str] = []
    shared: list[str] = []
    participants: set[str] = set()
    for row in rows:
        seated = [award.player for award in MatchRecorded.from_json(row.result).results]
        inside = [player for player in seated if is_run_player(run, player)]
        if not inside:
            continue  # only players of another run whose id starts alike (`{run}-5-3`)
        if len(inside) < len(seated):
            shared.append(row.match_id)
        else:
            erasable.append(row.match_id)
            participants.update(inside)
    if shared:
        shared.sort()
        raise RunNotErasableError(
            run,
            f"{len(shared)} recorded match(es) had players from inside and outside the run "
            f"(e.g. {', '.join(shared[:EXAMPLES])}); erase nothing until they are dealt with",
        )
    unknown = participants.difference(players)
    if unknown:
        raise RunNotErasableError(
            run,
            f"{len(unknown)} run player(s) had their first match recorded during the erasure "
            "(the run is still being recorded); retry when it has stopped",
        )
    return sorted(erasable)


async def _count(session: AsyncSession, table: Table, players: Sequence[str]) -> int:
    total = 0
    for chunk in _chunks(players):
        query = select(func.count()).select_from(table).where(table.c.player.in_(chunk))
        total += int(await session.scalar(query) or 0)
    return total


async def _delete(session: AsyncSession, table: Table, players: Sequence[str]) -> int:
    total = 0
    for chunk in _chunks(players):
        result: Any = await session.execute(delete(table).where(table.c.player.in_(chunk)))
        total += int(result.rowcount)
    return total


async def _delete_entries(session: AsyncSession, players: Sequence[str]) -> list[tuple[str, Position]]:
    """Delete the players' leaderboard entries; each one's board and position, for the counts."""
    e = models.board_entries
    removed: list[tuple[str, Position]] = []
    for chunk in _chunks(players):
        rows = await session.execute(
            delete(e)
            .where(e.c.player.in_(chunk))
            .returning(e.c.board, e.c.player, e.c.order_score, e.c.achieved_us)
        )
        removed.extend((r.board, Position(-r.order_score, r.achieved_us, r.player)) for r in rows)
    return removed


async def _remove_from_counts(session: AsyncSession, entries: Sequence[tuple[str, Position]]) -> None:
    """The count rows lose what `entries` counted (in key order); rows left at zero are deleted,
    so that a board's counts are what they would be had the run never played."""
    deltas = leaderboards.removal_deltas(entries)
    if not deltas:
        return
    await leaderboards.write_counts(session, deltas)
    c = models.board_counts
    await session.execute(
        delete(c).where(
            c.c.board == bindparam("k_board"),
            c.c.level == bindparam("k_level"),
            c.c.key == bindparam("k_key"),
            c.c.slot == bindparam("k_slot"),
            c.c.count == 0,
        ),
        [
            {"k_board": board, "k_level": level, "k_key": key, "k_slot": slot}
            for board, level, key, slot in sorted(deltas)
        ],
    )

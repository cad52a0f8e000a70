"""Fixtures of the ranking tests: a migrated database on SQLite and PostgreSQL, matches to record."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from services.common import migrations
from services.common.db import Database
from services.ranking import core, matches
from services.ranking.progress import Outcome
from services.ranking.service import SPEC

ZONE = ZoneInfo("America/Sao_Paulo")
NOW = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)


@pytest.fixture
async def db(database: Database) -> AsyncIterator[Database]:
    """The ranking tables, migrated, on each database; audited after the test."""
    await migrations.upgrade("ranking", SPEC.migrations, database)
    yield database
    async with database.transaction() as session:
        assert await core.audit(session) == []


def seat(
    player: str, seat: int, outcome: Outcome, score: int = 0, canastras: int = 0, group: int | None = None
) -> matches.SeatResult:
    return matches.SeatResult(player, seat, outcome, score, canastras, group)


def match(
    match_id: str,
    *seats: matches.SeatResult,
    preset: str = "aberto",
    players: int | None = None,
    express: bool = False,
    competitive: bool = True,
    annulled: bool = False,
    end_time: datetime = NOW,
) -> matches.FinishedMatch:
    size = players if players is not None else (4 if len(seats) > 2 else 2)
    content = repr((match_id, seats, preset, size, express, competitive, annulled, end_time))
    return matches.FinishedMatch(
        match_id=match_id,
        preset=preset,
        players=size,
        express=express,
        competitive=competitive,
        annulled=annulled,
        end_time=end_time,
        seats=tuple(seats),
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
    )


def duel(match_id: str, winner: str, loser: str, **options: object) -> matches.FinishedMatch:
    return match(match_id, seat(winner, 0, Outcome.WON, 1500), seat(loser, 1, Outcome.LOST, 700), **options)  # type: ignore[arg-type]


async def record(db: Database, finished: matches.FinishedMatch, now: datetime = NOW) -> matches.MatchRecorded:
    async with db.transaction() as session:
        return await core.record_match(session, finished, zone=ZONE, now=now)

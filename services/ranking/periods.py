"""Leaderboard periods in the configured time zone (docs/ranking.md, "Periods"). Pure functions.

A daily period starts at local midnight, a weekly one at midnight on Monday (ISO weeks), a monthly
one at midnight on the 1st, a yearly one at midnight on 1 January, all in the zone named by
BURACO_RANKING_TIME_ZONE (an IANA name, read with zoneinfo, so daylight-saving changes are
followed: a day can last 23 or 25 hours, and where midnight does not exist on the day clocks go
forward, the day starts at the first instant that does). A period is named by its first local date
(`2026-11-23`); the all-time period by `-`.

A match counts in the periods that contain its end time, wherever and whenever it is recorded, so
a result delivered late still lands in the right day.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo


class Period(StrEnum):
    ALL_TIME = "all"
    DAILY = "day"
    WEEKLY = "week"
    MONTHLY = "month"
    YEARLY = "year"


ALL_TIME_START = "-"

#: Length of the time slots the leaderboards count ties in (leaderboards.py): about 150 to 500
#: slots per period, so that counting the entries tied ahead of a player reads few rows.
SLOT_MICROSECONDS: dict[Period, int] = {
    Period.DAILY: 10 * 60 * 1_000_000,
    Period.WEEKLY: 3600 * 1_000_000,
    Period.MONTHLY: 6 * 3600 * 1_000_000,
    Period.YEARLY: 2 * 86400 * 1_000_000,
    Period.ALL_TIME: 7 * 86400 * 1_000_000,
}


@dataclass(frozen=True)
class PeriodBounds:
    period: Period
    #: `YYYY-MM-DD` of the first local day, or `-` for all time.
    start_name: str
    #: The first instant of the period and the first instant after it (None for all time).
    start: datetime | None
    end: datetime | None


def first_day(period: Period, day: date) -> date:
    if period is Period.DAILY:
        return day
    if period is Period.WEEKLY:
        return day - timedelta(days=day.weekday())
    if period is Period.MONTHLY:
        return day.replace(day=1)
    if period is Period.YEARLY:
        return day.replace(month=1, day=1)
    raise ValueError(f"{period} has no first day")


def next_first_day(period: Period, first: date) -> date:
    if period is Period.DAILY:
        return first + timedelta(days=1)
    if period is Period.WEEKLY:
        return first + timedelta(days=7)
    if period is Period.MONTHLY:
        return date(first.year + first.month // 12, first.month % 12 + 1, 1)
    if period is Period.YEARLY:
        return date(first.year + 1, 1, 1)
    raise ValueError(f"{period} has no next day")


def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """The first instant of `day` in `zone`, in UTC. Where midnight is skipped (clocks go forward
    at 00:00), zoneinfo reads 00:00 with the offset in force before the change, which is exactly
    the instant of the change: the first instant of the day."""
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def bounds(period: Period, moment: datetime, zone: ZoneInfo) -> PeriodBounds:
    """The period of kind `period` that contains `moment` (an aware datetime)."""
    if period is Period.ALL_TIME:
        return PeriodBounds(period, ALL_TIME_START, None, None)
    first = first_day(period, moment.astimezone(zone).date())
    end = local_midnight(next_first_day(period, first), zone)
    return PeriodBounds(period, first.isoformat(), local_midnight(first, zone), end)

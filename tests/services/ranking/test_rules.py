"""The pure rules: XP per outcome, the level curve, period bounds in a zone, the rating model."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.config import ConfigError
from services.ranking import ratings
from services.ranking.periods import Period, bounds
from services.ranking.progress import Outcome, level_for, level_start, xp_for
from services.ranking.ratings import Skill, rate_sides, win_probability
from services.ranking.settings import RankingSettings


def test_xp_per_outcome_and_length() -> None:
    assert xp_for(Outcome.WON, express=False) == 40
    assert xp_for(Outcome.WON, express=True) == 20
    assert xp_for(Outcome.LOST, express=False) == 5
    assert xp_for(Outcome.LOST, express=True) == 5
    assert xp_for(Outcome.ABANDONED, express=False) == 0


def test_the_level_curve_at_its_documented_points() -> None:
    starts = {1: 0, 2: 100, 3: 300, 4: 600, 5: 1000, 10: 4500, 20: 19000, 50: 122500}
    for level, xp in starts.items():
        assert level_start(level) == xp
        assert level_for(xp) == level
        if xp:
            assert level_for(xp - 1) == level - 1
    assert level_for(0) == 1 and level_for(99) == 1


@given(st.integers(0, 10**15))
def test_the_level_is_the_highest_one_started(xp: int) -> None:
    level = level_for(xp)
    assert level_start(level) <= xp < level_start(level + 1)


SAO_PAULO = ZoneInfo("America/Sao_Paulo")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_periods_start_at_local_midnight_weeks_on_monday() -> None:
    moment = at("2026-11-29T02:59:59+00:00")  # Saturday 23:59:59 in Sao Paulo (UTC-3)
    day = bounds(Period.DAILY, moment, SAO_PAULO)
    assert day.start_name == "2026-11-28"
    assert (day.start, day.end) == (at("2026-11-28T03:00:00+00:00"), at("2026-11-29T03:00:00+00:00"))
    assert bounds(Period.DAILY, moment + timedelta(seconds=1), SAO_PAULO).start_name == "2026-11-29"
    week = bounds(Period.WEEKLY, moment, SAO_PAULO)
    assert (week.start_name, week.end) == ("2026-11-23", at("2026-11-30T03:00:00+00:00"))
    assert bounds(Period.MONTHLY, moment, SAO_PAULO).start_name == "2026-11-01"
    assert bounds(Period.MONTHLY, at("2026-12-01T02:59:59+00:00"), SAO_PAULO).start_name == "2026-11-01"
    assert bounds(Period.MONTHLY, at("2026-12-01T03:00:00+00:00"), SAO_PAULO).start_name == "2026-12-01"
    year = bounds(Period.YEARLY, at("2027-01-01T02:59:59+00:00"), SAO_PAULO)
    assert (year.start_name, year.end) == ("2026-01-01", at("2027-01-01T03:00:00+00:00"))
    assert bounds(Period.ALL_TIME, moment, SAO_PAULO).start_name == "-"
    # The same instant is already Sunday in UTC.
    assert bounds(Period.DAILY, moment, ZoneInfo("UTC")).start_name == "2026-11-29"


def test_days_follow_daylight_saving_changes() -> None:
    # Sao Paulo, 2018-11-04: clocks went from 00:00 to 01:00, a 23-hour day starting at 01:00 local.
    short = bounds(Period.DAILY, at("2018-11-04T12:00:00+00:00"), SAO_PAULO)
    assert (short.start, short.end) == (at("2018-11-04T03:00:00+00:00"), at("2018-11-05T02:00:00+00:00"))
    # 2019-02-16: clocks went back from 00:00 to 23:00, a 25-hour day.
    long = bounds(Period.DAILY, at("2019-02-16T12:00:00+00:00"), SAO_PAULO)
    assert long.end is not None and long.start is not None
    assert long.end - long.start == timedelta(hours=25)
    # The repeated hour belongs to the day it repeats.
    assert bounds(Period.DAILY, at("2019-02-17T02:30:00+00:00"), SAO_PAULO).start_name == "2019-02-16"


def test_the_time_zone_setting() -> None:
    assert RankingSettings.load({}).time_zone == ZoneInfo("America/Sao_Paulo")
    assert RankingSettings.load({"BURACO_RANKING_TIME_ZONE": "Europe/Lisbon"}).time_zone.key == "Europe/Lisbon"
    for bad in ("Mars/Olympus", "../../etc/passwd", "America"):
        with pytest.raises(ConfigError, match="BURACO_RANKING_TIME_ZONE"):
            RankingSettings.load({"BURACO_RANKING_TIME_ZONE": bad})


def test_ratings_move_winners_up_and_predict_the_stronger_side() -> None:
    new = Skill()
    (winner,), (loser,) = rate_sides([[new], [new]], 0)
    assert winner.mu > 25 > loser.mu and winner.sigma < new.sigma and loser.sigma < new.sigma
    assert winner.ordinal > 0 > loser.ordinal
    strong, weak = Skill(32, 2), Skill(20, 2)
    assert win_probability([[strong], [weak]])[0] > 0.8
    # Pairs: a side's strength is its two players together; partners share the result.
    sides = rate_sides([[strong, weak], [new, new]], 1)
    assert sides[0][0].mu < strong.mu and sides[0][1].mu < weak.mu
    assert sides[1][0].mu > new.mu and sides[1][1].mu > new.mu


_skill = st.builds(Skill, st.floats(-20.0, 70.0), st.floats(0.3, 12.0))


@given(
    st.lists(_skill, min_size=1, max_size=2),
    st.lists(_skill, min_size=1, max_size=2),
    st.integers(0, 1),
)
def test_the_two_team_update_gives_the_library_s_floats(first: list[Skill], second: list[Skill], winner: int) -> None:
    """rate_sides' written-out update for two sides equals OpenSkill's own, float for float."""
    assert ratings._rate_two_teams([first, second], winner) == ratings._rate_with_model([first, second], winner)

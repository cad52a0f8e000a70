"""The ranking service's own settings (README, "Ranking configuration"), read when it starts; a bad
value stops it (exit status 2, the message names the variable).

    BURACO_RANKING_TIME_ZONE   IANA zone whose midnights start the leaderboards' daily, weekly,
                               monthly and yearly periods (default America/Sao_Paulo)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from services.common.config import ConfigError

TIME_ZONE_VARIABLE = "BURACO_RANKING_TIME_ZONE"
DEFAULT_TIME_ZONE = "America/Sao_Paulo"


@dataclass(frozen=True)
class RankingSettings:
    time_zone: ZoneInfo

    @staticmethod
    def load(env: Mapping[str, str] | None = None) -> RankingSettings:
        source = os.environ if env is None else env
        name = source.get(TIME_ZONE_VARIABLE) or DEFAULT_TIME_ZONE
        return RankingSettings(time_zone=zone(name))


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(f"{TIME_ZONE_VARIABLE}={name!r}: not an IANA time zone (e.g. America/Sao_Paulo)") from None

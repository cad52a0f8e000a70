"""The ranking service's own settings (README, "Ranking configuration"), read when it starts.

Declared once in `SETTINGS` (services.common.config: name, kind, default, meaning), from which
`RankingSettings.load()` reads them and scripts/gen_settings_doc.py writes the README's table. A
bad value stops the service before it binds (exit status 2, the message names the variable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from services.common.config import Setting, TimeZone

TIME_ZONE = Setting(
    "BURACO_RANKING_TIME_ZONE",
    TimeZone(),
    "America/Sao_Paulo",
    "IANA zone whose local midnights start the daily, weekly (Monday), monthly and yearly leaderboards; an"
    " unknown name stops the service (exit status 2)",
)

#: The ranking service's settings, in the README's order.
SETTINGS: tuple[Setting[Any], ...] = (TIME_ZONE,)


@dataclass(frozen=True)
class RankingSettings:
    time_zone: ZoneInfo

    @staticmethod
    def load(env: Mapping[str, str] | None = None) -> RankingSettings:
        return RankingSettings(time_zone=TIME_ZONE.read(env))


"""The matchmaking settings: documented defaults, bad values refused, and docs/matchmaking.md lists
every one with its default."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from services.common.config import ConfigError
from services.matchmaking.settings import SETTINGS, MatchmakingSettings, load

DOC = Path(__file__).resolve().parents[3] / "docs" / "matchmaking.md"


def test_the_defaults_are_the_documented_ones() -> None:
    assert load({}) == MatchmakingSettings()
    text = DOC.read_text()
    for setting in SETTINGS:
        assert f"| `{setting.name}` | {setting.default} | {setting.meaning} |" in text, setting.name


def test_values_are_read_and_bad_ones_refused() -> None:
    chosen = load({"BURACO_MATCHMAKING_WINDOW_OPEN_SECONDS": "0", "BURACO_MATCHMAKING_CONFIRM_SECONDS": "5"})
    assert chosen.confirm_seconds == 5 and chosen.windows.half_width(10**6) == chosen.windows.maximum
    assert load({}).windows.half_width(120) == math.inf
    for name, value in (
        ("BURACO_MATCHMAKING_TICK_SECONDS", "fast"),
        ("BURACO_MATCHMAKING_CONFIRM_SECONDS", "0"),
        ("BURACO_MATCHMAKING_WINDOW_STEP_SECONDS", "nan"),
    ):
        with pytest.raises(ConfigError, match=name):
            load({name: value})

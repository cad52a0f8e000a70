"""The game-session service as a process, and its settings: it serves, survives the fuzz harness
and stops on SIGTERM; every setting is documented and the fixed deal seed is refused in
production. Its calls are tested by what they do: test_table_calls.py, test_moves.py,
test_streams.py, test_play_stream.py, test_match_end.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from buraco.v1 import game_session_pb2
from tests.services.service_checks import check_service_process

SERVICE_DESCRIPTOR = game_session_pb2.DESCRIPTOR.services_by_name["GameSessionService"]


def test_the_process_serves_survives_fuzzing_and_stops_on_sigterm(tmp_path: Path) -> None:
    check_service_process("game_session", SERVICE_DESCRIPTOR, tmp_path)


def test_settings_are_documented_and_the_deal_seed_is_refused_in_production() -> None:
    from services.common.config import ConfigError
    from services.game_session import settings as gs_settings
    from tests.services.harness import ROOT

    for document in ("README.md", "docs/game-session.md"):
        text = (ROOT / document).read_text()
        assert [s.name for s in gs_settings.SETTINGS if f"`{s.name}`" not in text] == [], document
    assert gs_settings.load({"BURACO_GAME_SESSION_DEAL_SEED": "x"}).deal_seed == "x"
    with pytest.raises(ConfigError, match="BURACO_GAME_SESSION_DEAL_SEED"):
        gs_settings.load({"BURACO_GAME_SESSION_DEAL_SEED": "x"}, production=True)
    with pytest.raises(ConfigError, match="BURACO_GAME_SESSION_LEASE_SECONDS"):
        gs_settings.load({"BURACO_GAME_SESSION_LEASE_SECONDS": "soon"})

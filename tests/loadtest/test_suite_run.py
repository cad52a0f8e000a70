"""The driver against the whole suite as real processes (SQLite): the player's journey through
matchmaking, game sessions, the wallet and ranking, and the `tables` scenario; every match played
to its end, every pot checked to the chip, no error."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.journey import run_shard
from loadtest.recorder import Recorder
from loadtest.settings import Settings
from tests.services.harness import dev_minter, service_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    """Wallet, ranking, game sessions and matchmaking, each its own process, wired together."""
    tmp_path = tmp_path_factory.mktemp("suite")
    dev_minter(tmp_path / "dev-keys")
    with contextlib.ExitStack() as stack:
        wallet = stack.enter_context(service_process("wallet", tmp_path))
        ranking = stack.enter_context(service_process("ranking", tmp_path))
        wired = {"BURACO_WALLET_ADDRESS": wallet.address, "BURACO_RANKING_ADDRESS": ranking.address}
        game_session = stack.enter_context(
            service_process("game_session", tmp_path, {**wired, "BURACO_GAME_SESSION_BOT_DELAY_MS": "0"})
        )
        matchmaking = stack.enter_context(
            service_process(
                "matchmaking",
                tmp_path,
                {
                    **wired,
                    "BURACO_GAME_SESSION_ADDRESS": game_session.address,
                    "BURACO_MATCHMAKING_TICK_SECONDS": "0.2",
                },
            )
        )
        targets = {
            "wallet": wallet.address,
            "ranking": ranking.address,
            "game_session": game_session.address,
            "matchmaking": matchmaking.address,
        }
        yield targets, tmp_path / "dev-keys" / "dev-private.pem"


def run(suite: tuple[dict[str, str], Path], **changes: object) -> Recorder:
    targets, key = suite
    settings = Settings(players=4, journeys=1, targets=targets, token_key=key, wait_timeout_s=60)
    settings = replace(settings, **changes)  # type: ignore[arg-type]
    settings.check()
    recorder, _ = asyncio.run(run_shard(settings, range(settings.players)))
    return recorder


def errors_of(recorder: Recorder) -> dict[tuple[str, str], dict[str, int]]:
    return {(s.kind, s.name): dict(s.errors) for s in recorder if s.errors}


def test_the_whole_journey(suite: tuple[dict[str, str], Path]) -> None:
    recorder = run(suite, run_id="jny1", bet=30)
    assert errors_of(recorder) == {}
    assert recorder.counters["journeys_completed"] == 4
    steps = {s.name: s.ok for s in recorder if s.kind == "step"}
    assert steps == {
        "signup": 4, "fund": 4, "queue": 4, "play": 4, "settle": 4, "leaderboard": 4, "journey": 4
    }
    rpcs = {s.name: s for s in recorder if s.kind == "rpc"}
    assert rpcs["matchmaking.CreateTicket"].ok == 4
    assert rpcs["matchmaking.WatchTicket"].first_event.count == 4
    assert rpcs["game_session.SubscribeChanges"].first_event.count == 4
    assert rpcs["game_session.Discard"].ok > 0
    assert "game_session.CreateTable" not in rpcs  # matchmaking made the tables


def test_the_tables_scenario_with_two_journeys_per_table(suite: tuple[dict[str, str], Path]) -> None:
    recorder = run(suite, scenario="tables", run_id="tab1", journeys=2, bot="random", seats=4, players=4)
    assert errors_of(recorder) == {}
    assert recorder.counters["matches_completed"] == 2
    rpcs = {s.name: s for s in recorder if s.kind == "rpc"}
    assert rpcs["game_session.CreateTable"].ok == 2
    assert rpcs["wallet.HoldBets"].ok == 2
    assert {s.name: s.ok for s in recorder if s.kind == "step"}["settle"] == 8


def test_the_journey_on_play_streams(suite: tuple[dict[str, str], Path]) -> None:
    """`--play-stream`: each player acts on its Play stream; every action is timed under
    game_session.Play/<Method>, no unary action call is made, and the pots settle as before."""
    recorder = run(suite, run_id="pst1", bet=20, play_stream=True)
    assert errors_of(recorder) == {}
    assert recorder.counters["journeys_completed"] == 4
    rpcs = {s.name: s for s in recorder if s.kind == "rpc"}
    assert rpcs["game_session.Play"].first_event.count == 4
    assert rpcs["game_session.Play/Discard"].ok > 0 and rpcs["game_session.Play/Draw"].ok > 0
    assert not {"game_session.Discard", "game_session.Draw", "game_session.SubscribeChanges"} & set(rpcs)
    assert {s.name: s.ok for s in recorder if s.kind == "step"}["settle"] == 4

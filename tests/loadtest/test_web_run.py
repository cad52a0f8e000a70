"""The `web` scenario (loadtest/web.py) against the whole suite and the gateway as real processes
(SQLite): players sign in, queue and play through the gateway as browsers do (HTTP and one socket
each), every match played to its end, every pot checked to the chip, no error; and its knobs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from loadtest.cli import build_parser, main, settings_from
from loadtest.settings import Settings
from loadtest.web import next_move, player_address
from tests.conftest import DatabaseTarget
from tests.e2e.suite import SERVICES, suite
from tests.services.harness import service_process

START = 1000
BET = 30


@pytest.mark.slow
@pytest.mark.parametrize("db_target", ["sqlite"], indirect=True)
async def test_the_web_scenario_through_the_gateway(db_target: DatabaseTarget, tmp_path: Path) -> None:
    async with suite(db_target, tmp_path, SERVICES, BURACO_WALLET_STARTING_GRANT_CHIPS=str(START)) as running:
        env = {f"BURACO_{name.upper()}_ADDRESS": running.address(name) for name in SERVICES}
        env |= {
            "BURACO_GATEWAY_PORT": "0",
            "BURACO_GATEWAY_WEB": "false",
            # the driver is the players' proxy: each player's X-Forwarded-For is its address
            "BURACO_GATEWAY_TRUSTED_PROXIES": "127.0.0.1",
            # players without think time move faster than people: the per-player limit lifted
            "BURACO_GATEWAY_RATE_PER_SECOND": "1000",
            "BURACO_GATEWAY_RATE_BURST": "1000",
        }
        with service_process("gateway", tmp_path, env=env) as gateway:
            out = tmp_path / "report"
            argv = ["--scenario", "web", "--gateway", f"http://{gateway.address}", "--players", "4",
                    "--journeys", "1", "--bet", str(BET), "--run-id", "web1", "--wait-timeout", "60",
                    "--out", str(out), "--max-error-rate", "0", "--fail-if", "step:settle:p99<60s"]
            assert await asyncio.to_thread(main, argv) == 0
    document = json.loads((out / "report.json").read_text())
    summary, rows = document["summary"], {row["name"]: row for row in document["rows"]}
    counters = summary["counters"]
    assert counters["journeys_completed"] == 4 and counters["journeys_started"] == 4
    assert "journeys_failed" not in counters
    assert counters["settlements_checked"] == 4  # every player's balance moved by its match's outcome
    assert summary["rpc_errors"] == 0 and summary["rpc_calls"] > 100
    assert {name: row["errors"] for name, row in rows.items() if row["errors"]} == {}
    steps = {row["name"]: row["ok"] for row in document["rows"] if row["kind"] == "step"}
    assert steps == {"signin": 4, "fund": 4, "queue": 4, "play": 4, "settle": 4, "leaderboard": 4, "journey": 4}
    assert rows["http.SignIn"]["ok"] == 4 and rows["socket.hello"]["ok"] == 4
    assert rows["http.matchmaking.CreateTicket"]["ok"] == 4
    assert rows["socket.ticket"]["first_event_count"] == 4 and rows["socket.table"]["first_event_count"] == 4
    assert rows["http.game_session.GetLegalMoves"]["ok"] > 0
    assert rows["socket.act/Draw"]["ok"] > 0 and rows["socket.act/Discard"]["ok"] > 0
    assert rows["http.wallet.GetAccount"]["ok"] >= 8  # before the match and until it settled
    assert rows["http.ranking.ListLeaderboardEntries"]["ok"] == 4
    for row in (rows["socket.act/Discard"], rows["play"]):  # the report's percentiles, per call and per step
        assert None not in (row["p50_ms"], row["p95_ms"], row["p99_ms"], row["p999_ms"])
    assert [gate["passed"] for gate in document["gates"]] == [True, True]
    assert document["summary"]["settings"]["gateway"] == f"http://{gateway.address}"


def test_the_web_scenario_needs_the_gateway_and_only_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["--scenario", "web"], "--scenario web needs --gateway"),
        (["--scenario", "web", "--gateway", "localhost:8080"], "--scenario web needs --gateway"),
        (["--gateway", "http://localhost:8080"], "--gateway is for --scenario web"),
        (["--scenario", "web", "--gateway", "http://h:1", "--play-stream"], "--play-stream is not for"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    settings = settings_from(build_parser().parse_args(
        ["--scenario", "web", "--gateway", "https://play.example/", "--token-key", "/nonexistent.pem"]))
    assert settings.gateway == "https://play.example"  # no signing key needed: players sign in
    assert Settings.from_json(settings.to_json()) == settings


def test_the_web_player_takes_the_first_hint_and_an_address_of_its_own() -> None:
    assert next_move({"canDraw": True, "discards": ["7H"]}) == ("Draw", {})
    assert next_move({"melds": [{"cards": ["3H", "4H", "5H"]}], "discards": ["7H"]}) == (
        "Meld", {"cards": ["3H", "4H", "5H"], "wildAs": ""})
    assert next_move({"additions": [{"meld": 1, "cards": ["6H"]}], "discards": ["7H"]}) == (
        "AddToMeld", {"meld": 1, "cards": ["6H"]})
    assert next_move({"discards": ["7H", "8C"]}) == ("Discard", {"card": "7H"})
    assert next_move({"seq": "4"}) is None
    assert len({player_address(i) for i in range(70_000)}) == 70_000
    assert player_address(258) == "10.0.1.2"

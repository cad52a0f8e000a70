"""The tournament service's API: every RPC built, who may call what, bad input, paging, and the
real process under the fuzz harness with a check of its database afterwards."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from buraco.v1 import common_pb2, tournament_pb2, tournament_pb2_grpc
from services.common.auth import Kind
from services.tournament.settings import SETTINGS
from tests.services.callers import denied, outcome
from tests.services.fuzzing import fuzz_service
from tests.services.harness import ROOT, bearer, dev_minter, health_status, service_process
from tests.services.tournament.support import Platform, TournamentService, definition

SERVICE = tournament_pb2.DESCRIPTOR.services_by_name["TournamentService"]
T = tournament_pb2.Tournament

# -- the process under fuzzing ----------------------------------------------------------------------

ENTRY_STATES = {"open", "complete", "withdrawn", "dropped", "failed"}
HOLD_STATES = {"none", "holding", "held", "releasing", "released", "failed"}


def check_database(path: Path) -> None:
    """What must hold of the tournament service's tables whatever the calls were."""
    with sqlite3.connect(path) as db:
        tournaments = db.execute(
            "SELECT id, state, format, buy_in, prizes, min_entrants, max_entrants, registration_open_at,"
            " registration_close_at, start_at, version FROM tournament_tournaments"
        ).fetchall()
        assert tournaments, "the tournament made before the fuzzing is gone"
        for tid, state, fmt, buy_in, prizes, low, high, opens, closes, starts, version in tournaments:
            assert state in {"scheduled", "registration", "running", "finished", "cancelled"}
            assert fmt in {"single_elimination", "swiss"} and version >= 1
            assert 2 <= low <= high and opens < closes <= starts
            shares = json.loads(prizes)
            assert (sum(s for _, s in shares) == 10_000) if buy_in else shares == []
            entries = db.execute("SELECT id, state FROM tournament_entrants WHERE tournament_id = ?", (tid,)).fetchall()
            active = [e for e, s in entries if s in ("open", "complete")]
            assert len(active) <= high and all(s in ENTRY_STATES for _, s in entries)
            registered: list[str] = []
            for entry, entry_state in entries:
                rows = db.execute(
                    "SELECT player, hold_state FROM tournament_entrant_players"
                    " WHERE tournament_id = ? AND entrant_id = ? ORDER BY position",
                    (tid, entry),
                ).fetchall()
                assert rows and all(h in HOLD_STATES for _, h in rows)
                if entry_state == "complete":
                    assert all(h == "held" for _, h in rows)
                if entry_state in ("open", "complete"):
                    registered += [p for p, h in rows if h in ("holding", "held", "releasing")]
            assert len(registered) == len(set(registered)), "a player in two entries"


def test_the_process_serves_survives_fuzzing_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The real process: SERVING, reflection, the fuzz harness (as every kind of caller, with a
    free tournament `t1` open for registration so that calls about it do real work), then its
    database checked, then SIGTERM ends it cleanly."""
    minter = dev_minter(tmp_path / "dev-keys")
    with service_process("tournament", tmp_path) as process:
        assert health_status(process.address) == 1
        assert health_status(process.address, SERVICE.full_name) == 1
        with grpc.insecure_channel(process.address) as channel:
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            replies = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            assert SERVICE.full_name in {s.name for r in replies for s in r.list_services_response.service}
            stub = tournament_pb2_grpc.TournamentServiceStub(channel)
            now = datetime.now(UTC)
            stub.CreateTournament(
                tournament_pb2.CreateTournamentRequest(
                    request_id="fuzz-setup",
                    tournament_id="t1",
                    tournament=definition(
                        now - timedelta(minutes=1),
                        buy_in_chips=0,
                        prizes={},
                        max_entrants=3,
                        starts=now + timedelta(hours=2),
                        closes=now + timedelta(hours=1),
                    ),
                ),
                metadata=bearer(minter.mint(Kind.ADMIN, "root")),
                timeout=10,
            )
            stub.Register(
                tournament_pb2.RegisterRequest(tournament="tournaments/t1", request_id="setup"),
                metadata=bearer(minter.mint(Kind.PLAYER, "carol")),
                timeout=10,
            )
        seen = fuzz_service(
            process, SERVICE, minter, examples=250, invariant=lambda: check_database(tmp_path / "tournament.db")
        )
        assert "UNAUTHENTICATED" in seen and "INVALID_ARGUMENT" in seen and sum(seen.values()) == 250
        assert process.terminate() == 0
        process.wait_for_log("stopped")


# -- who may call what, and bad input ---------------------------------------------------------------


async def call_code(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_only_admins_create_and_cancel(service: TournamentService, platform: Platform) -> None:
    request = tournament_pb2.CreateTournamentRequest(
        request_id="c1", tournament_id="cup", tournament=definition(service.clock.now)
    )
    for metadata in (service.as_player("alice"), service.as_service("matchmaking", "alice")):
        assert (
            await call_code(service.stub.CreateTournament(request, metadata=metadata))
            == grpc.StatusCode.PERMISSION_DENIED
        )
    created = await service.stub.CreateTournament(request, metadata=service.as_admin())
    assert created.name == "tournaments/cup" and created.state == T.STATE_SCHEDULED
    assert await service.stub.CreateTournament(request, metadata=service.as_admin()) == created  # a retry
    other = tournament_pb2.CreateTournamentRequest(
        request_id="c2", tournament_id="cup", tournament=definition(service.clock.now)
    )
    assert (
        await call_code(service.stub.CreateTournament(other, metadata=service.as_admin()))
        == grpc.StatusCode.ALREADY_EXISTS
    )
    cancel = tournament_pb2.CancelTournamentRequest(name="tournaments/cup", request_id="x", reason="r")
    assert await call_code(service.stub.CancelTournament(cancel, metadata=service.as_player("alice"))) == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    report = tournament_pb2.ReportMatchResultRequest(
        request_id="m",
        tournament="tournaments/cup",
        match_id="m",
        match_scores=[1, 2],
        outcomes=[
            common_pb2.PlayerOutcome(player="players/a", seat=0, outcome=common_pb2.OUTCOME_WON),
            common_pb2.PlayerOutcome(player="players/b", seat=1, outcome=common_pb2.OUTCOME_LOST),
        ],
    )
    # only the game-session service reports results (docs/contracts.md, "Who may call what")
    callers = [
        (service.as_player("a"), "players/a"),
        (service.as_service("matchmaking"), "services/matchmaking"),
        (service.as_service("tournament"), "services/tournament"),
        (service.as_admin(), "admins/root"),
    ]
    for metadata, principal in callers:
        assert await outcome(service.stub.ReportMatchResult(report, metadata=metadata)) == denied(
            principal, "TournamentService.ReportMatchResult", "services/game-session")
    assert await call_code(service.stub.ReportMatchResult(report, metadata=service.as_service("game-session"))) == (
        grpc.StatusCode.NOT_FOUND
    )


BAD_DEFINITIONS: list[tuple[dict[str, object], str]] = [
    ({"display_name": ""}, "tournament.display_name"),
    ({"players": 3}, "tournament.table_options.players"),
    ({"preset": "poker"}, "tournament.table_options.ruleset.preset"),
    ({"format": 0}, "tournament.format"),
    ({"format": T.FORMAT_SWISS, "swiss_rounds": 0}, "tournament.swiss_rounds"),
    ({"format": T.FORMAT_SWISS, "swiss_rounds": 16}, "tournament.swiss_rounds"),
    ({"swiss_rounds": 3}, "tournament.swiss_rounds"),
    ({"buy_in_chips": -1}, "tournament.buy_in_chips"),
    ({"prizes": {1: 5000, 2: 4000}}, "tournament.prizes"),
    ({"prizes": {}}, "tournament.prizes"),
    ({"buy_in_chips": 0}, "tournament.prizes"),
    ({"prizes": {1: 5000, 3: 5000}, "min_entrants": 2}, "tournament.prizes[1].place"),
    ({"min_entrants": 1}, "tournament.min_entrants"),
    ({"max_entrants": 1025}, "tournament.max_entrants"),
    ({"players": 4, "max_entrants": 513}, "tournament.max_entrants"),
    ({"no_show_seconds": 5}, "tournament.no_show_timeout"),
]


async def test_bad_definitions_name_the_field(service: TournamentService) -> None:
    for change, field in BAD_DEFINITIONS:
        request = tournament_pb2.CreateTournamentRequest(
            request_id="bad", tournament_id="bad", tournament=definition(service.clock.now, **change)
        )
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await service.stub.CreateTournament(request, metadata=service.as_admin())
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert (error.value.details() or "").startswith(f"{field}:"), error.value.details()


async def test_bad_times_and_ids(service: TournamentService) -> None:
    now = service.clock.now
    cases = [
        (
            {"closes": now - timedelta(minutes=1), "opens": now - timedelta(hours=1)},
            "tournament.registration_close_time",
        ),
        ({"closes": now, "opens": now}, "tournament.registration_close_time"),
        ({"starts": now + timedelta(minutes=30)}, "tournament.start_time"),
        ({"starts": now + timedelta(days=60), "closes": now + timedelta(days=59)}, "tournament.start_time"),
    ]
    for change, field in cases:
        request = tournament_pb2.CreateTournamentRequest(
            request_id="bad", tournament_id="bad", tournament=definition(now, **change)
        )
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await service.stub.CreateTournament(request, metadata=service.as_admin())
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (error.value.details() or "").startswith(f"{field}:"), (field, error.value.details())
    long_id = tournament_pb2.CreateTournamentRequest(request_id="x", tournament_id="t" * 41, tournament=definition(now))
    assert await call_code(service.stub.CreateTournament(long_id, metadata=service.as_admin())) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    for name in ("", "tables/x", "tournaments/UPPER", "tournaments/" + "t" * 41):
        get = tournament_pb2.GetTournamentRequest(name=name)
        assert await call_code(service.stub.GetTournament(get, metadata=service.as_admin())) == (
            grpc.StatusCode.INVALID_ARGUMENT
        )
    missing = tournament_pb2.GetTournamentRequest(name="tournaments/nope")
    assert await call_code(service.stub.GetTournament(missing, metadata=service.as_player("a"))) == (
        grpc.StatusCode.NOT_FOUND
    )


async def test_lists_page_through_everything(service: TournamentService, platform: Platform) -> None:
    for i in range(5):
        await service.create(f"cup{i}", display_name=f"Cup {i}")
        service.clock.advance(1)
    seen: list[str] = []
    token = ""
    while True:
        page = await service.stub.ListTournaments(
            tournament_pb2.ListTournamentsRequest(page_size=2, page_token=token), metadata=service.as_player("a")
        )
        seen += [t.name for t in page.tournaments]
        token = page.next_page_token
        if not token:
            break
    assert seen == [f"tournaments/cup{i}" for i in reversed(range(5))]  # newest first
    scheduled = await service.stub.ListTournaments(
        tournament_pb2.ListTournamentsRequest(state=T.STATE_CANCELLED), metadata=service.as_player("a")
    )
    assert not scheduled.tournaments
    for bad in ("garbage", "eyJhZnRlciI6LTF9", "eyJjIjoxfQ"):
        request = tournament_pb2.ListTournamentsRequest(page_token=bad)
        assert await call_code(service.stub.ListTournaments(request, metadata=service.as_admin())) == (
            grpc.StatusCode.INVALID_ARGUMENT
        )
    everyone = [f"pl{i}" for i in range(7)]
    await platform.fund(everyone, 1000)
    for player in everyone:  # cup0's registration is open from its creation on
        await service.register("cup0", player)
    names: list[str] = []
    token = ""
    while True:
        entrants = await service.stub.ListEntrants(
            tournament_pb2.ListEntrantsRequest(parent="tournaments/cup0", page_size=3, page_token=token),
            metadata=service.as_admin(),
        )
        names += [e.players[0] for e in entrants.entrants]
        token = entrants.next_page_token
        if not token:
            break
    assert names == [f"players/{p}" for p in everyone]
    standings = await service.stub.ListStandings(
        tournament_pb2.ListStandingsRequest(parent="tournaments/cup0", page_size=4), metadata=service.as_admin()
    )
    assert len(standings.standings) == 4 and standings.next_page_token and not standings.final


def test_the_readme_lists_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [s.name for s in SETTINGS if f"`{s.name}`" not in readme]
    assert not missing, f"README.md does not describe {missing}"

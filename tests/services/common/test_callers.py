"""Who may call a method that service identities call (`auth.Callers`): exactly the services
named (or any, `ANY_SERVICE`), admins only when allowed, players never; a refusal names the
caller, the method and who may; and each service's table names real methods and real callers."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FileDescriptor

from buraco.v1 import game_session_pb2, ranking_pb2, tournament_pb2, wallet_pb2
from services.common.auth import (
    ANY_SERVICE,
    Callers,
    Identity,
    Kind,
    allow,
    reset_current_identity,
    set_current_identity,
)
from services.common.config import DEFAULT_PORTS
from services.common.errors import PermissionDeniedError
from services.game_session import api as game_session_api
from services.ranking import api as ranking_api
from services.tournament import api as tournament_api
from services.wallet import api as wallet_api
from tests.services.harness import ROOT

MATCHMAKING = Identity(Kind.SERVICE, "matchmaking")
RANKING = Identity(Kind.SERVICE, "ranking")
ADMIN = Identity(Kind.ADMIN, "ops")
ALICE = Identity(Kind.PLAYER, "alice")


def test_a_method_admits_the_services_named_and_admins_only_when_allowed() -> None:
    hold = allow("matchmaking", "tournament", admins=True)
    assert hold.admits(MATCHMAKING) and hold.admits(Identity(Kind.SERVICE, "tournament")) and hold.admits(ADMIN)
    assert not hold.admits(RANKING) and not hold.admits(ALICE)
    record = allow("game-session")
    assert record.admits(Identity(Kind.SERVICE, "game-session"))
    assert not record.admits(ADMIN) and not record.admits(MATCHMAKING)
    # a player whose name is a service's is still a player
    assert not record.admits(Identity(Kind.PLAYER, "game-session"))
    anyone = allow(ANY_SERVICE)
    assert anyone.admits(MATCHMAKING) and anyone.admits(RANKING)
    assert not anyone.admits(ADMIN) and not anyone.admits(ALICE)
    admins = allow(admins=True)
    assert admins.admits(ADMIN) and not admins.admits(MATCHMAKING) and not admins.admits(ALICE)


def test_who_may_is_said_in_words() -> None:
    assert str(allow("tournament", "matchmaking", admins=True)) == (
        "services/matchmaking, services/tournament or admins")
    assert str(allow("game-session")) == "services/game-session"
    assert str(allow(ANY_SERVICE, admins=True)) == "any service or admins"
    assert str(allow(admins=True)) == "admins"
    assert str(allow()) == "no one"


def test_a_service_name_must_be_one() -> None:
    with pytest.raises(ValueError, match="'Game Session' is not a service name"):
        allow("Game Session")


def test_a_refusal_names_the_caller_the_method_and_who_may() -> None:
    callers = Callers("WalletService", {"Settle": allow("game-session", "tournament", admins=True)})
    with pytest.raises(PermissionDeniedError) as caught:
        callers.check(RANKING, "Settle")
    assert caught.value.message == (
        "services/ranking may not call WalletService.Settle: "
        "only services/game-session, services/tournament or admins may")
    callers.check(ADMIN, "Settle")
    token = set_current_identity(Identity(Kind.SERVICE, "tournament"))
    try:
        assert callers.require("Settle").name == "tournament"
        with pytest.raises(KeyError):  # a method left out of the table admits no one
            callers.require("Void")
    finally:
        reset_current_identity(token)
    token = set_current_identity(ALICE)
    try:
        with pytest.raises(PermissionDeniedError, match=r"^players/alice may not call WalletService\.Settle:"):
            callers.require("Settle")
    finally:
        reset_current_identity(token)


@pytest.mark.parametrize(
    ("callers", "file"),
    [
        (wallet_api.CALLERS, wallet_pb2.DESCRIPTOR),
        (ranking_api.CALLERS, ranking_pb2.DESCRIPTOR),
        (game_session_api.CALLERS, game_session_pb2.DESCRIPTOR),
        (tournament_api.CALLERS, tournament_pb2.DESCRIPTOR),
    ],
    ids=["wallet", "ranking", "game_session", "tournament"],
)
def test_each_table_names_the_services_methods_and_callers_that_exist(callers: Callers, file: FileDescriptor) -> None:
    service = file.services_by_name[callers.service]
    assert set(callers.methods) <= set(service.methods_by_name), set(callers.methods) - set(service.methods_by_name)
    # the names the services' own tokens carry (services.client.channels.ServiceTokens)
    services = {name.replace("_", "-") for name in DEFAULT_PORTS} | {ANY_SERVICE}
    for method, allowed in callers.methods.items():
        assert allowed.services <= services, (method, allowed.services - services)
        assert allowed.services or allowed.admins, method


def test_the_contracts_table_is_the_code() -> None:
    """docs/contracts.md, "Who may call what", lists every method of every table as the code has it."""
    text = (ROOT / "docs" / "contracts.md").read_text()
    section = text.split("## Who may call what", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, tuple[frozenset[str], bool]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        names = {"any": frozenset({ANY_SERVICE}), "none": frozenset()}.get(
            cells[1], frozenset(name.strip() for name in cells[1].split(",")))
        documented[cells[0].strip("`")] = (names, {"yes": True, "no": False}[cells[2]])
    coded = {
        f"{table.service}.{method}": (allowed.services, allowed.admins)
        for table in (wallet_api.CALLERS, ranking_api.CALLERS, game_session_api.CALLERS, tournament_api.CALLERS)
        for method, allowed in table.methods.items()
    }
    assert documented == coded

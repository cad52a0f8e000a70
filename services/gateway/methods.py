"""The unary calls a player may make through the gateway, and their JSON form.

Each is served at `POST /{package}.{Service}/{Method}` (the Connect protocol's unary path), with the
request message as JSON in the body and the response message as JSON in the answer, both in the
contracts' canonical proto3 JSON mapping (lowerCamelCase names, enums by name, int64 as strings,
fields at their default values written out). The list below is the player's surface of the
contracts; the calls only services or admins make (HoldBets, Settle, RecordMatch, CreateTable, ...)
are not offered (501), and every service still checks each call's caller itself: the gateway
adds, it does not grant.

A call is retried by the gateway (after a redirect to a table's owner, a replica that stops, a
service that does not answer) only when repeating it is safe: a read, or a change that carries a
`request_id` (the services apply it once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message

from buraco.v1 import game_session_pb2, matchmaking_pb2, ranking_pb2, tournament_pb2, wallet_pb2

#: service key (as in BURACO_<SERVICE>_ADDRESS) -> its gRPC service and the methods players call
PLAYER_METHODS: dict[str, tuple[Any, str, tuple[str, ...]]] = {
    "wallet": (wallet_pb2, "WalletService", ("GetAccount", "ListTransfers")),
    "ranking": (ranking_pb2, "RankingService", (
        "GetPlayer", "ListXpEvents", "GetRating", "BatchGetRatings", "ListRatingHistory",
        "ListLeaderboardEntries", "GetLeaderboardRank", "ListLeaderboardNeighbors")),
    "matchmaking": (matchmaking_pb2, "MatchmakingService", (
        "CreateTicket", "GetTicket", "CancelTicket", "ConfirmTicket",
        "CreateParty", "GetParty", "InviteToParty", "JoinParty", "LeaveParty",
        "CreateLobbyTable", "GetLobbyTable", "ListLobbyTables", "UpdateLobbyTable", "SitDown", "StandUp",
        "LeaveLobbyTable", "InviteToTable", "FillWithBots", "SetReady", "StartMatch", "RequestRematch")),
    "game_session": (game_session_pb2, "GameSessionService", (
        "GetTable", "ListTables", "GetTableSnapshot", "Draw", "TakeDiscard", "Meld", "AddToMeld", "Discard",
        "LeaveTable", "GetLegalMoves", "ExportRecords", "ProposeAnnulment", "VoteAnnulment", "SendChat",
        "MuteChat")),
    "tournament": (tournament_pb2, "TournamentService", (
        "GetTournament", "ListTournaments", "Register", "Unregister", "ListEntrants", "ListStandings",
        "GetBracket")),
}

#: Server streams a socket may subscribe to (besides a table's): stream name -> (service, method).
WATCHES: dict[str, tuple[str, str]] = {
    "ticket": ("matchmaking", "WatchTicket"),
    "lobby_table": ("matchmaking", "WatchLobbyTable"),
    "lobby": ("matchmaking", "WatchLobby"),
    "tournament": ("tournament", "WatchTournament"),
}

_READ_PREFIXES = ("Get", "List", "BatchGet", "Export")


@dataclass(frozen=True)
class Method:
    """One callable method: where it goes and how its messages are built and read."""

    service: str  # the key of the service's address: "wallet", "game_session", ...
    path: str  # "/buraco.v1.WalletService/GetAccount"
    name: str  # "GetAccount"
    request: type[Message]
    response: type[Message]
    read_only: bool

    def parse(self, body: bytes) -> Message:
        """The request from its JSON text; json_format.ParseError (its message names the field)
        for a body that is not this request."""
        request = self.request()
        json_format.Parse(body or b"{}", request, ignore_unknown_fields=False)
        return request

    def retry_safe(self, request: Message) -> bool:
        """Whether sending `request` again cannot apply it twice."""
        if self.read_only:
            return True
        return bool(getattr(request, "request_id", ""))


def to_json(message: Message) -> dict[str, Any]:
    """A message in the canonical proto3 JSON mapping, default values written out."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def _method(service: str, module: Any, service_name: str, descriptor: MethodDescriptor) -> Method:
    return Method(
        service=service,
        path=f"/{module.DESCRIPTOR.package}.{service_name}/{descriptor.name}",
        name=descriptor.name,
        request=message_factory.GetMessageClass(descriptor.input_type),
        response=message_factory.GetMessageClass(descriptor.output_type),
        read_only=descriptor.name.startswith(_READ_PREFIXES),
    )


def _build() -> dict[str, Method]:
    methods: dict[str, Method] = {}
    for service, (module, service_name, names) in PLAYER_METHODS.items():
        descriptors = module.DESCRIPTOR.services_by_name[service_name].methods_by_name
        for name in names:
            method = _method(service, module, service_name, descriptors[name])
            methods[method.path] = method
    return methods


#: Every method the gateway offers, by its path.
METHODS: dict[str, Method] = _build()


def watch(stream: str) -> Method:
    """The server-streaming method of a socket subscription (KeyError for an unknown stream)."""
    service, name = WATCHES[stream]
    module, service_name, _names = PLAYER_METHODS[service]
    descriptor = module.DESCRIPTOR.services_by_name[service_name].methods_by_name[name]
    return _method(service, module, service_name, descriptor)

"""`buraco` (or `python -m services.cli`): the bundled client.

    buraco token --player alice                  # a player token signed with the local dev key
    buraco token --service matchmaking --ttl 600
    buraco call wallet                           # list the wallet's methods
    buraco call wallet GetAccount '{"name": "accounts/player-alice"}' --player alice
    buraco call game_session Subscribe '{"table": "tables/t1"}' --player alice   # a stream: JSON lines
    buraco play                                  # a practice table against a bot, in the terminal
    buraco play --bot expert                     # ... against the expert bot (easy, medium, expert)
    buraco play --players 4 --preset fechado --target 1500 --player alice
    buraco play --table tables/t1 --player alice # play your seat at an existing table
    buraco watch tables/t1                       # spectate (where the table allows spectators)

Tokens are signed with BURACO_JWT_PRIVATE_KEY when it is set, else with the local dev key under
BURACO_DEV_KEYS_DIR (created when missing, as the services do in local mode). Addresses come from
BURACO_<SERVICE>_ADDRESS (default localhost:5005x) unless --address is given.
"""

from __future__ import annotations

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)
# ruff: noqa: E402  (the imports below come after that call on purpose)

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format, symbol_database
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

from buraco.v1 import game_session_pb2, matchmaking_pb2, ranking_pb2, tournament_pb2, wallet_pb2
from services.common import config as config_module
from services.common.auth import ACT_FOR_HEADER, Kind, Minter, ensure_dev_keys, load_private_key

SERVICES: dict[str, ServiceDescriptor] = {
    "matchmaking": matchmaking_pb2.DESCRIPTOR.services_by_name["MatchmakingService"],
    "game_session": game_session_pb2.DESCRIPTOR.services_by_name["GameSessionService"],
    "wallet": wallet_pb2.DESCRIPTOR.services_by_name["WalletService"],
    "ranking": ranking_pb2.DESCRIPTOR.services_by_name["RankingService"],
    "tournament": tournament_pb2.DESCRIPTOR.services_by_name["TournamentService"],
}


def _minter(audience: str) -> Minter:
    configured = os.environ.get("BURACO_JWT_PRIVATE_KEY")
    if configured:
        key_path = Path(configured)
    else:
        key_path, _ = ensure_dev_keys(Path(os.environ.get("BURACO_DEV_KEYS_DIR") or "var/dev-keys"))
    return Minter(load_private_key(key_path), audience=audience)


def _identity(args: argparse.Namespace) -> tuple[Kind, str] | None:
    for kind in Kind:
        name = getattr(args, kind.value, None)
        if name:
            return kind, name
    return None


def _add_identity_options(parser: argparse.ArgumentParser, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--player", metavar="NAME", help="a player identity")
    group.add_argument("--service", metavar="NAME", help="a service identity")
    group.add_argument("--admin", metavar="NAME", help="an admin identity")
    parser.add_argument("--ttl", type=float, default=3600.0, help="token lifetime in seconds (default 3600)")
    parser.add_argument("--ip", help="the client address claim (as a gateway would sign it)")
    parser.add_argument("--audience", default=os.environ.get("BURACO_JWT_AUDIENCE") or "buraco")


def _token(args: argparse.Namespace) -> str | None:
    if getattr(args, "token", None):
        return str(args.token)
    identity = _identity(args)
    if identity is None:
        return None
    kind, name = identity
    return _minter(args.audience).mint(kind, name, ttl=args.ttl, client_ip=args.ip)


def cmd_token(args: argparse.Namespace) -> int:
    print(_token(args))
    return 0


def _message_class(descriptor: Any) -> Any:
    return symbol_database.Default().GetSymbol(descriptor.full_name)


def cmd_call(args: argparse.Namespace) -> int:
    service_name = args.service_name.replace("-", "_")
    if service_name not in SERVICES:
        print(f"unknown service {args.service_name!r}; one of {', '.join(SERVICES)}", file=sys.stderr)
        return 2
    service = SERVICES[service_name]
    if args.method is None:
        for each in service.methods:
            kind = "stream" if each.server_streaming else "unary"
            print(f"{each.name}\t{kind}\t{each.input_type.name} -> {each.output_type.name}")
        return 0
    if args.method not in service.methods_by_name:
        print(f"{service.full_name} has no method {args.method!r}", file=sys.stderr)
        return 2
    method: MethodDescriptor = service.methods_by_name[args.method]
    request = _message_class(method.input_type)()
    try:
        json_format.Parse(args.request or "{}", request)
    except json_format.ParseError as error:
        print(f"request: {error}", file=sys.stderr)
        return 2
    address = args.address or config_module.load(service_name).addresses[service_name]
    metadata: list[tuple[str, str]] = []
    token = _token(args)
    if token is not None:
        metadata.append(("authorization", f"Bearer {token}"))
    if args.act_for:
        metadata.append((ACT_FOR_HEADER, f"players/{args.act_for}"))
    response_class = _message_class(method.output_type)
    path = f"/{service.full_name}/{method.name}"
    with grpc.insecure_channel(address) as channel:
        try:
            if method.server_streaming:
                stream = channel.unary_stream(
                    path,
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=response_class.FromString,
                )
                for item in stream(request, metadata=tuple(metadata), timeout=args.timeout):
                    print(json.dumps(json_format.MessageToDict(item)), flush=True)
            else:
                call = channel.unary_unary(
                    path,
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=response_class.FromString,
                )
                reply = call(request, metadata=tuple(metadata), timeout=args.timeout)
                print(json_format.MessageToJson(reply, indent=2))
        except grpc.RpcError as error:
            print(f"{error.code().name}: {error.details()}", file=sys.stderr)
            return 1
    return 0


def _game_address(args: argparse.Namespace) -> str:
    return str(args.address or config_module.load("game_session").addresses["game_session"])


def cmd_play(args: argparse.Namespace) -> int:
    from services.cli import play

    minter = _minter(args.audience)
    address = _game_address(args)
    player_token = args.token or minter.mint(Kind.PLAYER, args.player, ttl=args.ttl)
    color = sys.stdout.isatty() and not args.no_color

    async def run() -> int:
        table = args.table
        if table and not table.startswith("tables/"):
            table = f"tables/{table}"
        if not table:
            spec = play.PracticeTable(
                player=args.player, players=args.players, preset=args.preset, target_points=args.target,
                bot_level=args.bot_level, draw_seconds=args.draw_seconds, play_seconds=args.play_seconds,
            )
            service_token = minter.mint(Kind.SERVICE, play.TABLE_CREATOR, ttl=600)
            table = await play.create_practice_table(address, service_token, spec)
            print(f"created {table} (watch it with `buraco watch {table}`)")
        return await play.play(address, player_token, table, play.stdin_lines(), print, color)

    try:
        return asyncio.run(run())
    except grpc.RpcError as error:
        print(f"{error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def cmd_watch(args: argparse.Namespace) -> int:
    from services.cli import play

    token = args.token or _minter(args.audience).mint(Kind.PLAYER, args.player, ttl=args.ttl)
    table = args.table if args.table.startswith("tables/") else f"tables/{args.table}"
    try:
        return asyncio.run(play.watch(_game_address(args), token, table, print, sys.stdout.isatty()))
    except KeyboardInterrupt:
        return 130


#: `play --bot`: the levels and the engine's names of their bots (services/cli/play.py, BOT_LEVELS)
BOT_CHOICES = ("easy", "medium", "expert", "random", "heuristic", "hard")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="buraco", description="The Buraco services' bundled client.")
    commands = parser.add_subparsers(dest="command", required=True)

    token = commands.add_parser("token", help="mint a token (local dev key, or BURACO_JWT_PRIVATE_KEY)")
    _add_identity_options(token, required=True)
    token.set_defaults(run=cmd_token)

    call = commands.add_parser("call", help="call a service method with a JSON request")
    call.add_argument("service_name", metavar="SERVICE", help=", ".join(SERVICES))
    call.add_argument("method", metavar="METHOD", nargs="?", help="omit to list the methods")
    call.add_argument("request", metavar="JSON", nargs="?", help="the request as JSON (default {})")
    _add_identity_options(call, required=False)
    call.add_argument("--token", help="use this token instead of minting one")
    call.add_argument("--act-for", metavar="PLAYER", help="act for this player (service and admin only)")
    call.add_argument("--address", help="host:port (default: BURACO_<SERVICE>_ADDRESS)")
    call.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    call.set_defaults(run=cmd_call)

    default_player = os.environ.get("USER") or "me"
    play_parser = commands.add_parser("play", help="play a table in the terminal (a practice table against bots)")
    play_parser.add_argument("--player", default=default_player, help=f"your player name (default {default_player})")
    play_parser.add_argument("--table", help="join this table (tables/ID) instead of creating a practice table")
    play_parser.add_argument("--players", type=int, choices=(2, 4), default=2)
    play_parser.add_argument("--preset", default="aberto", help="the ruleset preset (default aberto)")
    play_parser.add_argument("--target", type=int, default=0, help="match target points (default 0: one hand)")
    play_parser.add_argument(
        "--bot", "--bot-level", dest="bot_level", choices=BOT_CHOICES, default="medium", metavar="LEVEL",
        help="the bots' level: easy, medium (default) or expert (or the engine's names random, heuristic, expert)",
    )
    play_parser.add_argument("--draw-seconds", type=int, default=120)
    play_parser.add_argument("--play-seconds", type=int, default=300)
    play_parser.add_argument("--no-color", action="store_true", help="no ANSI colours for red suits")
    play_parser.add_argument("--token", help="use this player token instead of minting one")
    play_parser.add_argument("--ttl", type=float, default=6 * 3600.0)
    play_parser.add_argument("--audience", default=os.environ.get("BURACO_JWT_AUDIENCE") or "buraco")
    play_parser.add_argument("--address", help="host:port (default: BURACO_GAME_SESSION_ADDRESS)")
    play_parser.set_defaults(run=cmd_play)

    watch_parser = commands.add_parser("watch", help="spectate a table")
    watch_parser.add_argument("table", metavar="TABLE", help="tables/ID or ID")
    watch_parser.add_argument("--player", default=default_player, help="the spectator's player name")
    watch_parser.add_argument("--token", help="use this player token instead of minting one")
    watch_parser.add_argument("--ttl", type=float, default=6 * 3600.0)
    watch_parser.add_argument("--audience", default=os.environ.get("BURACO_JWT_AUDIENCE") or "buraco")
    watch_parser.add_argument("--address", help="host:port (default: BURACO_GAME_SESSION_ADDRESS)")
    watch_parser.set_defaults(run=cmd_watch)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())

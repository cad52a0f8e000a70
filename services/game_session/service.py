"""How the game-session service is served: its gRPC services, servicer and migrations."""

from pathlib import Path

from buraco.v1 import game_session_pb2
from services.common.server import ServiceSpec
from services.game_session import api

SPEC = ServiceSpec(
    name="game_session",
    grpc_services=(game_session_pb2.DESCRIPTOR.services_by_name["GameSessionService"].full_name,),
    register=api.register,
    migrations=Path(__file__).parent / "migrations",
    calls_others=True,
)

"""How the matchmaking service is served: its gRPC services, servicer and migrations."""

from pathlib import Path

from buraco.v1 import matchmaking_pb2
from services.common.server import ServiceSpec
from services.matchmaking import api

SPEC = ServiceSpec(
    name="matchmaking",
    grpc_services=(matchmaking_pb2.DESCRIPTOR.services_by_name["MatchmakingService"].full_name,),
    register=api.register,
    migrations=Path(__file__).parent / "migrations",
    calls_others=True,
)

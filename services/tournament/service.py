"""How the tournament service is served: its gRPC services, servicer and migrations."""

from pathlib import Path

from buraco.v1 import tournament_pb2
from services.common.server import ServiceSpec
from services.tournament import api

SPEC = ServiceSpec(
    name="tournament",
    grpc_services=(tournament_pb2.DESCRIPTOR.services_by_name["TournamentService"].full_name,),
    register=api.register,
    migrations=Path(__file__).parent / "migrations",
    calls_others=True,
)

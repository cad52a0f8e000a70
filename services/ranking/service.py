"""How the ranking service is served: its gRPC services, servicer and migrations."""

from pathlib import Path

from buraco.v1 import ranking_pb2
from services.common.server import ServiceSpec
from services.ranking import api

SPEC = ServiceSpec(
    name="ranking",
    grpc_services=(ranking_pb2.DESCRIPTOR.services_by_name["RankingService"].full_name,),
    register=api.register,
    migrations=Path(__file__).parent / "migrations",
)

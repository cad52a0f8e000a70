"""How the wallet service is served: its gRPC services, servicer and migrations."""

from pathlib import Path

from buraco.v1 import wallet_pb2
from services.common.server import ServiceSpec
from services.wallet import api

SPEC = ServiceSpec(
    name="wallet",
    grpc_services=(wallet_pb2.DESCRIPTOR.services_by_name["WalletService"].full_name,),
    register=api.register,
    migrations=Path(__file__).parent / "migrations",
)

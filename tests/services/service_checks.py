"""Checks every service gets (called from tests/services/<service>/test_api.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.services.fuzzing import fuzz_service
from tests.services.harness import (
    dev_minter,
    health_status,
    service_process,
)


def check_service_process(
    name: str,
    service: ServiceDescriptor,
    tmp_path: Path,
    *,
    examples: int = 250,
    invariant: Callable[[], None] | None = None,
) -> None:
    """`python -m services.<name>` starts (migrating its SQLite database), reports SERVING,
    answers reflection, survives the fuzz harness, and exits 0 on SIGTERM."""
    with service_process(name, tmp_path) as process:
        assert health_status(process.address) == 1
        assert health_status(process.address, service.full_name) == 1
        with grpc.insecure_channel(process.address) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            replies = stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
            listed = {s.name for reply in replies for s in reply.list_services_response.service}
        assert service.full_name in listed
        seen = fuzz_service(
            process, service, dev_minter(tmp_path / "dev-keys"), examples=examples, invariant=invariant
        )
        assert "UNAUTHENTICATED" in seen and sum(seen.values()) == examples
        assert process.terminate() == 0
        process.wait_for_log("stopped")

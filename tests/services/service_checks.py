"""Checks every service gets (called from tests/services/<service>/test_api.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import symbol_database
from google.protobuf.descriptor import ServiceDescriptor
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.common.auth import Kind
from services.common.server import ServiceSpec
from tests.services.fuzzing import fuzz_service
from tests.services.harness import (
    bearer,
    dev_minter,
    health_status,
    make_config,
    running,
    service_process,
)


async def check_unbuilt_rpcs_are_unimplemented(
    spec: ServiceSpec, service: ServiceDescriptor, unbuilt: Iterable[str], issue: int, tmp_path: Path
) -> None:
    """Each RPC not built yet answers UNIMPLEMENTED, naming itself and the issue that builds it."""
    config = make_config(spec.name, tmp_path)
    async with running(spec, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        metadata = bearer(dev_minter(config.dev_keys_dir).mint(Kind.SERVICE, "probe"))
        for name in unbuilt:
            method = service.methods_by_name[name]
            request = symbol_database.Default().GetSymbol(method.input_type.full_name)()
            path = f"/{service.full_name}/{name}"
            factory: Any = channel.unary_stream if method.server_streaming else channel.unary_unary
            call = factory(path, lambda m: m.SerializeToString(), None)(
                request, metadata=metadata, timeout=10
            )
            try:
                if method.server_streaming:
                    async for _ in call:
                        pass
                else:
                    await call
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.UNIMPLEMENTED, (name, error.code())
                assert error.details() == f"{path[1:]} is not implemented yet (issue #{issue} builds it)"
            else:
                raise AssertionError(f"{name} answered; take it off the unbuilt list")


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

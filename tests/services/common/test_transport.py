"""gRPC's transport, chosen in `services/__init__.py` (GRPC_EXPERIMENTS) before grpc is imported:
set by default, an operator's own value kept, known to this grpcio, and in effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import services

ROOT = Path(__file__).resolve().parents[3]

# In a fresh interpreter (grpc reads the setting once, when first imported): unary echo calls in
# one process, then the CPU ticks of grpc's EventEngine threads against the whole process's.
PROBE = textwrap.dedent(
    """
    import asyncio, json, os, sys
    import services  # first, as in every entry point
    import grpc

    def ticks():
        out = {}
        for task in os.listdir("/proc/self/task"):
            name = open(f"/proc/self/task/{task}/comm").read().strip()
            fields = open(f"/proc/self/task/{task}/stat").read().rsplit(")", 1)[1].split()
            out[name] = out.get(name, 0) + int(fields[11]) + int(fields[12])
        return out

    async def main():
        server = grpc.aio.server()
        echo = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("probe", {"Echo": echo})])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary("/probe/Echo")
            before = ticks()
            for _ in range(int(sys.argv[1])):
                assert await call(b"ping") == b"ping"
            after = ticks()
        await server.stop(None)
        spent = {name: after[name] - before.get(name, 0) for name in after}
        print(json.dumps({"experiments": os.environ.get("GRPC_EXPERIMENTS"), "ticks": spent}))

    asyncio.run(main())
    """
)


def probe(calls: int, experiments: str | None) -> tuple[dict[str, object], str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    if experiments is not None:
        env["GRPC_EXPERIMENTS"] = experiments
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(calls)], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result, done.stderr


def test_the_suite_sets_the_transport_and_grpc_knows_it() -> None:
    result, stderr = probe(10, None)
    assert result["experiments"] == services.GRPC_EXPERIMENTS
    assert "Unknown experiment" not in stderr, stderr  # a grpcio that retired them: re-measure


def test_an_operators_own_setting_wins() -> None:
    result, _ = probe(10, "")
    assert result["experiments"] == ""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc for per-thread CPU")
def test_socket_work_stays_off_grpcs_event_engine_threads() -> None:
    """With grpc's default transport, EventEngine's threads carry the socket reads and writes
    (about 15% of this probe's CPU); with the suite's, next to none."""
    ours, _ = probe(3000, None)
    ticks = ours["ticks"]
    assert isinstance(ticks, dict)
    total = sum(ticks.values())
    assert total > 0
    assert ticks.get("event_engine", 0) <= 0.05 * total, ticks

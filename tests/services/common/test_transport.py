"""gRPC's transport, chosen by `services.common.transport.use_suite_transport()` (GRPC_EXPERIMENTS),
which every entry point calls before grpc is imported: set by default, an operator's own value
kept, known to this grpcio, and in effect; and importing the suite's packages changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from services.common import transport

ROOT = Path(__file__).resolve().parents[3]

# In a fresh interpreter (grpc reads the setting once, when first imported): unary echo calls in
# one process, then the CPU ticks of grpc's EventEngine threads against the whole process's.
PROBE = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from services.common.transport import use_suite_transport
    use_suite_transport()  # first, as in every entry point
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
    assert result["experiments"] == transport.GRPC_EXPERIMENTS
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


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_importing_the_suites_packages_changes_nothing() -> None:
    """Every library module of the suite imported (entry points aside: `__main__`, the benches):
    the environment is as it was."""
    code = textwrap.dedent(
        """
        import importlib, os, pkgutil
        import engine, loadtest, services
        for package in (services, loadtest, engine):
            for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                leaf = module.name.rsplit(".", 1)[-1]
                if leaf in ("__main__", "bench") or ".migrations" in module.name:
                    continue
                importlib.import_module(module.name)
        print(os.environ.get("GRPC_EXPERIMENTS"))
        """
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "None"


def test_the_choice_is_refused_once_grpc_is_imported() -> None:
    """Too late is said, not pretended: the variable stays unset (grpc runs its defaults)."""
    code = "import grpc, os\nfrom services.common.transport import use_suite_transport\n" \
        "print(use_suite_transport(), os.environ.get('GRPC_EXPERIMENTS'))"
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "None"]


#: A probe that records what GRPC_EXPERIMENTS held when grpc was first imported, then runs the
#: entry point given as a module name with the arguments that follow (`--help`: it stops early).
ENTRY_PROBE = textwrap.dedent(
    """
    import importlib.abc, os, runpy, sys

    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "grpc" and "seen" not in os.environ:
                os.environ["seen"] = "1"
                print("grpc imported with", os.environ.get("GRPC_EXPERIMENTS"), flush=True)
            return None

    sys.meta_path.insert(0, Watch())
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    """
)

ENTRY_POINTS = [
    ("services.matchmaking", "--help"),
    ("services.wallet", "--help"),
    ("services.ranking", "--help"),
    ("services.tournament", "--help"),
    ("services.cli", "--help"),
    ("loadtest", "--help"),
    ("services.game_session", "--help"),
    ("bench.wallet", "--help"),
    ("bench.matchmaking", "--help"),
    ("bench.ranking", "--help"),
    ("bench.game_sessions", "--help"),
]


@pytest.mark.parametrize(("module", "argument"), ENTRY_POINTS, ids=[m for m, _ in ENTRY_POINTS])
def test_every_entry_point_chooses_the_transport_before_grpc_is_imported(module: str, argument: str) -> None:
    done = _run(ENTRY_PROBE, module, argument)
    lines = [line for line in done.stdout.splitlines() if line.startswith("grpc imported with")]
    assert lines == [f"grpc imported with {transport.GRPC_EXPERIMENTS}"], done.stdout + done.stderr

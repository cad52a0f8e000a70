"""`python -m services.local` (what `make run` starts): every service on localhost, one process each.

Each service gets its own port (matchmaking 50051, game sessions 50052, wallet 50053, ranking
50054, tournaments 50055; metrics 9101..9105), its own SQLite database under `var/` (migrated at
start, as local mode does), and the addresses of the others; the gateway (the web table, the JSON
API and the socket) listens on 8080 (metrics 9106) with the development sign-in. When all of them
listen, the addresses are printed, the web address first. Their JSON logs are shown one line
each, prefixed with the service's name. Ctrl-C (SIGINT) or SIGTERM stops them all gracefully; if
one dies, the others are stopped too and the exit status is 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.common.auth import ensure_dev_keys
from services.common.config import DEFAULT_PORTS
from services.common.transport import GRPC_EXPERIMENTS

STOP_TIMEOUT = 30.0
GATEWAY = "gateway"
#: what `--only` may name: the gRPC services, then the gateway
PROCESSES = [*DEFAULT_PORTS, GATEWAY]


def _render(service: str, line: str) -> str:
    try:
        entry = json.loads(line)
    except ValueError:
        return f"[{service}] {line}"
    if not isinstance(entry, dict):
        return f"[{service}] {line}"
    skip = {"time", "level", "service", "logger", "message"}
    extra = " ".join(f"{k}={v}" for k, v in entry.items() if k not in skip and k != "traceback")
    text = f"[{service}] {entry.get('level', '')} {entry.get('message', '')} {extra}".rstrip()
    if "traceback" in entry:
        text += "\n" + str(entry["traceback"])
    return text


class Supervisor:
    def __init__(self, *, port_base: int, metrics_base: int, var: Path, services: Sequence[str],
                 gateway_port: int = 8080) -> None:
        self.var = var
        self.services = list(services)
        order = list(DEFAULT_PORTS)
        self.ports = {name: port_base + order.index(name) for name in order}
        self.metrics_ports = {name: metrics_base + PROCESSES.index(name) for name in PROCESSES}
        self.gateway_port = gateway_port
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        self.ready: dict[str, asyncio.Event] = {name: asyncio.Event() for name in self.services}
        self.stopping = False

    def environment(self, service: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            BURACO_ENV="local",
            BURACO_METRICS_PORT=str(self.metrics_ports[service]),
            BURACO_HEALTH_PORT="0",  # the probe port is for the kubelet: any free one here
            BURACO_DEV_KEYS_DIR=str(self.var / "dev-keys"),
        )
        if service == GATEWAY:
            env["BURACO_GATEWAY_PORT"] = str(self.gateway_port)
        else:
            env["BURACO_PORT"] = str(self.ports[service])
            env.setdefault("BURACO_DATABASE_URL", f"sqlite+aiosqlite:///{self.var / service}.db")
        # The suite's gRPC transport (services/common/transport.py), chosen before the service's
        # process imports grpc; an operator's own GRPC_EXPERIMENTS wins.
        env.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
        for name, port in self.ports.items():
            env[f"BURACO_{name.upper()}_ADDRESS"] = f"localhost:{port}"
        return env

    async def _pump(self, service: str, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            if '"listening"' in text:
                self.ready[service].set()
            print(_render(service, text), flush=True)

    async def run(self) -> int:
        ensure_dev_keys(self.var / "dev-keys")
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        pumps = []
        for service in self.services:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                f"services.{service}",
                env=self.environment(service),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            self.processes[service] = process
            assert process.stdout is not None
            pumps.append(asyncio.create_task(self._pump(service, process.stdout)))
        exits: dict[asyncio.Future[Any], str] = {
            asyncio.create_task(p.wait()): name for name, p in self.processes.items()
        }
        all_ready: asyncio.Future[Any] = asyncio.gather(*(e.wait() for e in self.ready.values()))
        stop_wait: asyncio.Future[Any] = asyncio.create_task(stop.wait())
        status = 0
        done, _ = await asyncio.wait({all_ready, stop_wait, *exits}, return_when=asyncio.FIRST_COMPLETED)
        if all_ready in done:
            self._print_ready()
            done, _ = await asyncio.wait({stop_wait, *exits}, return_when=asyncio.FIRST_COMPLETED)
        died = [exits[t] for t in done if t in exits]
        if died:
            print(f"[local] {', '.join(died)} stopped unexpectedly; stopping the others", flush=True)
            status = 1
        await self._stop_all()
        all_ready.cancel()
        stop_wait.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        print("[local] stopped", flush=True)
        return status

    def _print_ready(self) -> None:
        lines = ["", "[local] every service is listening:"]
        if GATEWAY in self.services:
            lines.append(f"  web table     http://localhost:{self.gateway_port}/   (sign in with any name)")
        for name in self.services:
            if name == GATEWAY:
                lines.append(
                    f"  {name:<13} localhost:{self.gateway_port}    metrics http://localhost:{self.metrics_ports[name]}/metrics"
                )
                continue
            lines.append(
                f"  {name:<13} localhost:{self.ports[name]}   metrics http://localhost:{self.metrics_ports[name]}/metrics"
            )
        lines += [
            "",
            "  mint a token:   buraco token --player alice",
            "  list methods:   buraco call wallet",
            '  call a service: buraco call ranking GetPlayer \'{"name": "players/alice"}\' --player alice',
            "  stop:           Ctrl-C",
            "",
        ]
        print("\n".join(lines), flush=True)

    async def _stop_all(self) -> None:
        for process in self.processes.values():
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT)
            except TimeoutError:
                print(f"[local] {name} did not stop in {STOP_TIMEOUT:g} s; killing it", flush=True)
                process.kill()
                await process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.local", description=__doc__.splitlines()[0])
    parser.add_argument("--port-base", type=int, default=50051, help="matchmaking's port; the others follow")
    parser.add_argument("--metrics-base", type=int, default=9101, help="matchmaking's metrics port")
    parser.add_argument("--var", type=Path, default=Path("var"), help="folder for databases and dev keys")
    parser.add_argument("--gateway-port", type=int, default=8080, help="the gateway's HTTP port (the web table)")
    parser.add_argument("--only", nargs="+", choices=PROCESSES, help="start only these services")
    args = parser.parse_args(argv)
    supervisor = Supervisor(
        port_base=args.port_base,
        metrics_base=args.metrics_base,
        var=args.var,
        services=args.only or PROCESSES,
        gateway_port=args.gateway_port,
    )
    return asyncio.run(supervisor.run())


if __name__ == "__main__":
    sys.exit(main())

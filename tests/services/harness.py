"""Helpers to run services in tests: in-process servers, real service processes, tokens."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.auth import Minter, ensure_dev_keys, load_private_key
from services.common.config import Config
from services.common.server import Server, ServiceSpec

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0


def make_config(service: str, tmp_path: Path, **overrides: Any) -> Config:
    """A local-mode config for an in-process server: free ports, SQLite in tmp_path, own dev keys."""
    base = Config(
        service=service,
        env="local",
        host="127.0.0.1",
        port=0,
        metrics_port=0,
        metrics_enabled=False,
        database_url=f"sqlite+aiosqlite:///{tmp_path / service}.db",
        dev_keys_dir=tmp_path / "dev-keys",
        rate_limit_per_second=1000.0,
        rate_limit_burst=1000,
        shutdown_grace_seconds=5.0,
    )
    return replace(base, **overrides)


def _test_ports() -> range:
    """This test process's ports: some the kernel never hands out by itself (those below its
    ephemeral range, which it draws from for `bind(("", 0))` and for every outgoing connection's
    local port, PostgreSQL's included), a slice of them per pytest-xdist worker of the run."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    ports = range(max(1024, low - 12000), low)
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")) % workers
    size = len(ports) // workers
    return range(ports.start + worker * size, ports.start + (worker + 1) * size)


_PORTS = _test_ports()
#: the next candidate: spread by process id, so that two test runs at once likely start far apart
_next_port = _PORTS.start + (os.getpid() * 2654435761) % len(_PORTS)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a process that must know its port
    before it starts (a fixed address to restart at, the suite's addresses, a pooler's
    configuration)."""
    return free_ports(1)


def free_ports(count: int) -> int:
    """The first of `count` consecutive free TCP ports on 127.0.0.1 (`make run`'s layout).

    A port the kernel chose for `bind(0)` would be free only until the kernel handed it out again
    (to another process's outgoing connection, say) before the process that was given it bound it:
    these come from below the kernel's ephemeral range instead, in turn through this process's
    slice of them, so a port is handed out again only after the whole slice has been."""
    global _next_port
    for _ in range(len(_PORTS)):
        base = _next_port
        _next_port = base + count
        if _next_port >= _PORTS.stop:
            base, _next_port = _PORTS.start, _PORTS.start + count
        probes: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise RuntimeError(f"no {count} consecutive free ports in {_PORTS}")


def dev_minter(keys_dir: Path, audience: str = "buraco") -> Minter:
    """Mints tokens with the dev key pair in `keys_dir` (made if missing), as local mode trusts."""
    private_path, _ = ensure_dev_keys(keys_dir)
    return Minter(load_private_key(private_path), audience=audience)


@contextlib.asynccontextmanager
async def running(spec: ServiceSpec, config: Config) -> AsyncIterator[Server]:
    """An in-process server on the test's event loop, stopped at the end."""
    server = Server(spec, config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(0)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@dataclass
class ServiceProcess:
    """A real `python -m services.<name>` process, its log lines, its address."""

    name: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    listening: dict[str, Any] = field(default_factory=dict)
    #: The settings it was started with (on top of the inherited environment).
    env: dict[str, str] = field(default_factory=dict)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)

    @property
    def address(self) -> str:
        return str(self.listening["address"])

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line)
        self._queue.put(None)

    def wait_for_log(self, message: str, timeout: float = START_TIMEOUT) -> dict[str, Any]:
        """The first JSON log entry (from now on) whose message is `message`."""
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"{self.name}: no {message!r} log line in {timeout} s") from None
            if line is None:
                raise AssertionError(f"{self.name} exited ({self.process.wait()}):\n" + "\n".join(self.lines))
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("message") == message:
                return entry

    def terminate(self, timeout: float = 30.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)


@contextlib.contextmanager
def service_process(
    name: str, tmp_path: Path, env: Mapping[str, str] | None = None, label: str | None = None
) -> Iterator[ServiceProcess]:
    """Start `python -m services.<name>` on free ports with its own SQLite file and dev keys
    (`env` overrides any of it); `label` names it in failures (default: `name`)."""
    environment = {
        **os.environ,
        "BURACO_ENV": "local",
        "BURACO_PORT": "0",
        "BURACO_HEALTH_PORT": "0",
        "BURACO_METRICS_PORT": "0",
        "BURACO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / name}.db",
        "BURACO_DEV_KEYS_DIR": str(tmp_path / "dev-keys"),
        "BURACO_RATE_LIMIT_PER_SECOND": "100000",
        "BURACO_RATE_LIMIT_BURST": "100000",
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", f"services.{name}"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    own_settings = {k: v for k, v in environment.items() if k.startswith("BURACO_")}
    running_process = ServiceProcess(label or name, process, env=own_settings)
    threading.Thread(target=running_process._pump, daemon=True).start()
    try:
        running_process.listening = running_process.wait_for_log("listening")
        yield running_process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def health_status(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=10
        )
        return int(reply.status)

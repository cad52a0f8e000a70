"""`python -m loadtest.smoke` (`make loadtest-smoke`, CI): the kit at a tiny size, start to end.

Starts the suite as `make run` does (`services.local`, its own ports and a fresh folder, SQLite),
waits until every service listens, runs `python -m loadtest` with the arguments given after `--`
(or the defaults below) against it, stops the suite, and exits with the load test's status.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from services.common.config import DEFAULT_PORTS

READY_LINE = "every service is listening"
#: A tiny run: four players, one whole journey each (queued, matched in pairs, played through the
#: game sessions, settled and ranked); any error fails it.
DEFAULT_ARGS = ("--scenario", "journey", "--players", "4", "--journeys", "1", "--max-error-rate", "0")
#: The services a journey calls, in `--targets` order.
JOURNEY_SERVICES = ("matchmaking", "game_session", "wallet", "ranking")


class LocalSuite:
    """`python -m services.local` in a folder of its own (`var`) and a process group of its own,
    on consecutive ports from `port_base`; its output kept (the last lines, for a failure's report)."""

    def __init__(self, var: Path, port_base: int, metrics_base: int, env: dict[str, str],
                 cwd: Path | None = None, only: Sequence[str] = ()) -> None:
        self.var = var
        self.port_base = port_base
        self.log: deque[str] = deque(maxlen=200)
        self.ready = threading.Event()
        command = [sys.executable, "-m", "services.local", "--port-base", str(port_base),
                   "--metrics-base", str(metrics_base), "--var", str(var)]
        if only:
            command += ["--only", *only]
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line)
            if READY_LINE in line:
                self.ready.set()

    def wait_ready(self, timeout: float) -> bool:
        """Whether every service listens within `timeout` seconds (False once the suite has exited)."""
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                return False
        return True

    def targets(self, services: Sequence[str] = JOURNEY_SERVICES) -> str:
        """`--targets` for the load-test kit: `name=localhost:port,...`."""
        order = list(DEFAULT_PORTS)
        return ",".join(f"{name}=localhost:{self.port_base + order.index(name)}" for name in services)

    def token_key(self) -> Path:
        return self.var / "dev-keys" / "dev-private.pem"

    def stop(self, timeout: float = 60.0) -> None:
        """Ctrl-C to the suite (it stops every service); the whole group killed if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.smoke", description=__doc__.splitlines()[0])
    # below Linux's ephemeral range (32768-60999): an outgoing connection of any process on the machine
    # (the services' own, to each other, as they start) cannot be holding one of these ports when the
    # suite binds it
    parser.add_argument("--port-base", type=int, default=26051, help="the suite's first port (default 26051)")
    parser.add_argument("--metrics-base", type=int, default=9201, help="the suite's first metrics port")
    parser.add_argument("--start-timeout", type=float, default=90.0, help="seconds to wait for the suite")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then arguments for python -m loadtest")
    options = parser.parse_args(argv)
    extra = [a for a in options.args if a != "--"] or list(DEFAULT_ARGS)
    with tempfile.TemporaryDirectory(prefix="loadtest-smoke-") as folder:
        # players without think time act faster than a person: lift the per-player rate limit
        env = {**os.environ, "BURACO_RATE_LIMIT_PER_SECOND": "100000", "BURACO_RATE_LIMIT_BURST": "100000"}
        suite = LocalSuite(Path(folder), options.port_base, options.metrics_base, env)
        try:
            if not suite.wait_ready(options.start_timeout):
                sys.stderr.write("".join(list(suite.log)[-50:]))
                print("loadtest.smoke: the suite did not start", file=sys.stderr)
                return 2
            command = [sys.executable, "-m", "loadtest", "--targets", suite.targets()]
            command += ["--token-key", str(suite.token_key()), *extra]
            return subprocess.run(command, env=os.environ, check=False).returncode
        finally:
            suite.stop(timeout=30)


if __name__ == "__main__":
    sys.exit(main())

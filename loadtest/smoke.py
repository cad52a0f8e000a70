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
from collections.abc import Sequence
from pathlib import Path

from services.common.config import DEFAULT_PORTS

READY_LINE = "every service is listening"
#: A tiny run: four players, one whole journey each (queued, matched in pairs, played through the
#: game sessions, settled and ranked); any error fails it.
DEFAULT_ARGS = ("--scenario", "journey", "--players", "4", "--journeys", "1", "--max-error-rate", "0")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--port-base", type=int, default=56051, help="the suite's first port (default 56051)")
    parser.add_argument("--metrics-base", type=int, default=9201, help="the suite's first metrics port")
    parser.add_argument("--start-timeout", type=float, default=90.0, help="seconds to wait for the suite")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then arguments for python -m loadtest")
    options = parser.parse_args(argv)
    extra = [a for a in options.args if a != "--"] or list(DEFAULT_ARGS)
    with tempfile.TemporaryDirectory(prefix="loadtest-smoke-") as folder:
        var = Path(folder)
        suite = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.local",
                "--port-base",
                str(options.port_base),
                "--metrics-base",
                str(options.metrics_base),
                "--var",
                str(var),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            # players without think time act faster than a person: lift the per-player rate limit
            env={**os.environ, "BURACO_RATE_LIMIT_PER_SECOND": "100000", "BURACO_RATE_LIMIT_BURST": "100000"},
        )
        ready = threading.Event()
        log: list[str] = []

        def pump() -> None:
            assert suite.stdout is not None
            for line in suite.stdout:
                log.append(line)
                if READY_LINE in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        try:
            deadline = time.monotonic() + options.start_timeout
            while not ready.wait(0.2):
                if suite.poll() is not None or time.monotonic() > deadline:
                    sys.stderr.write("".join(log[-50:]))
                    print("loadtest.smoke: the suite did not start", file=sys.stderr)
                    return 2
            order = list(DEFAULT_PORTS)
            targets = ",".join(
                f"{name}=localhost:{options.port_base + order.index(name)}"
                for name in ("matchmaking", "game_session", "wallet", "ranking")
            )
            command = [sys.executable, "-m", "loadtest", "--targets", targets]
            command += ["--token-key", str(var / "dev-keys" / "dev-private.pem"), *extra]
            return subprocess.run(command, env=os.environ, check=False).returncode
        finally:
            if suite.poll() is None:
                suite.send_signal(signal.SIGINT)
                try:
                    suite.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(suite.pid, signal.SIGKILL)
                    suite.wait()


if __name__ == "__main__":
    sys.exit(main())

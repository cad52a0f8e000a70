"""`python -m services.local` (make run): every service up on its port, then a clean Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from buraco.v1 import wallet_pb2
from services.common.config import DEFAULT_PORTS
from tests.services.harness import ROOT, free_ports, health_status


def test_make_run_starts_everything_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    base, metrics, gateway = free_ports(5), free_ports(6), free_ports(1)
    env = {key: value for key, value in os.environ.items() if not key.startswith("BURACO_")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.local",
            "--port-base",
            str(base),
            "--metrics-base",
            str(metrics),
            "--var",
            str(tmp_path / "var"),
            "--gateway-port",
            str(gateway),
        ],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            if "every service is listening" in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert ready.wait(120) and process.poll() is None, "\n".join(lines)
        for offset, name in enumerate(DEFAULT_PORTS):
            assert health_status(f"127.0.0.1:{base + offset}") == 1, name
            assert any(f"localhost:{base + offset}" in line and name in line for line in lines)
        assert (
            health_status(
                f"127.0.0.1:{base + 2}", wallet_pb2.DESCRIPTOR.services_by_name["WalletService"].full_name
            )
            == 1
        )
        for name in DEFAULT_PORTS:
            assert (tmp_path / "var" / f"{name}.db").exists()  # migrated at start
        # the gateway: the web address printed first, the page and the API served
        assert any(f"web table     http://localhost:{gateway}/" in line for line in lines)
        page = urllib.request.urlopen(f"http://127.0.0.1:{gateway}/", timeout=10)
        assert page.status == 200 and b"<html" in page.read().lower()
        with urllib.request.urlopen(f"http://127.0.0.1:{gateway}/v1/config", timeout=10) as answer:
            assert json.loads(answer.read()) == {"signIn": "dev"}
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(10)
    assert lines[-1] == "[local] stopped"
    assert sum("stopped streams_ended=0" in line for line in lines) == len(DEFAULT_PORTS)
    assert any("[gateway]" in line and "stopped" in line for line in lines)

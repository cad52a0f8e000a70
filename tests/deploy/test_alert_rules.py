"""The alert rules, evaluated: promtool checks every rule of the PrometheusRule (as rendered by the
overlays) and runs the unit tests of tests/deploy/alert_rules_test.yaml against them, where series
as the services export them must fire exactly the alerts each case names.

promtool comes from Debian's package prometheus (scripts/install-promtool.sh, which CI runs).
Without it these tests are skipped, except with CI=true, where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.k8s import ROOT, one, render

TESTS = ROOT / "tests" / "deploy" / "alert_rules_test.yaml"
#: alerts every one of which the unit tests must make fire at least once
TESTED_GROUPS = ("buraco.targets", "buraco.slo")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is not installed (scripts/install-promtool.sh)")
        pytest.skip("promtool is not installed (scripts/install-promtool.sh)")
    return found


def _groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = one(render("prod"), "PrometheusRule", "buraco")["spec"]["groups"]
    return groups


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_accepts_every_rule(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _groups()}))
    result = _run("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in _groups())
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_the_alerts_fire_as_their_unit_tests_say(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _groups()}))
    shutil.copy(TESTS, tmp_path / "tests.yaml")
    result = _run("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_slo_and_target_alert_has_a_case_that_fires_it() -> None:
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {test["alertname"] for case in cases for test in case.get("alert_rule_test", []) if test["exp_alerts"]}
    silent = {test["alertname"] for case in cases for test in case.get("alert_rule_test", []) if not test["exp_alerts"]}
    for group in _groups():
        if group["name"] in TESTED_GROUPS:
            for rule in group["rules"]:
                if "alert" in rule:
                    assert rule["alert"] in fired, f"no case makes {rule['alert']} fire"
                    assert rule["alert"] in silent, f"no case keeps {rule['alert']} quiet"


def test_the_objectives_read_the_metrics_the_services_export() -> None:
    """The SLO rules' selectors name the move methods and the outbox target the code defines."""
    from services.common import metrics
    from services.game_session import outbox, requests

    rules = {r["record"]: r["expr"] for g in _groups() for r in g["rules"] if "record" in r}
    moves = [e for name, e in rules.items() if name.startswith("buraco:move_latency")]
    settlements = [e for name, e in rules.items() if name.startswith("buraco:settlement_delay")]
    assert len(moves) == len(settlements) == 4
    pattern = re.search(r'method=~"([^"]+)"', moves[0])
    assert pattern is not None
    moved = {name for name in requests.METHOD_NAMES.values() if not name.endswith("/LeaveTable")}
    played = {name for name in requests.PLAY_METRIC_NAMES.values() if not name.endswith("/LeaveTable")}
    for method in moved | played:
        assert re.fullmatch(pattern.group(1), "/" + method.lstrip("/")), method
    assert not re.fullmatch(pattern.group(1), "/buraco.v1.GameSessionService/GetLegalMoves")
    assert all('le="0.1"' in e for e in moves) and 0.1 in metrics.BUCKETS
    assert all('target="wallet.Settle"' in e and 'le="30.0"' in e for e in settlements)
    assert "wallet.Settle" in outbox.TARGETS and 30.0 in outbox.DELAY_BUCKETS

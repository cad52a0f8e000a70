"""The container image definition (deploy/Dockerfile) and its build context (.dockerignore). No
Docker engine runs here: hadolint lints the Dockerfile (make deploy-check); this checks what the
manifests and the project rely on."""

from __future__ import annotations

import re
import tomllib

from tests.deploy.k8s import ROOT

DOCKERFILE = (ROOT / "deploy" / "Dockerfile").read_text()


def _instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def _copied() -> set[str]:
    """What the image copies from the build context (every source of every COPY but --from)."""
    sources: set[str] = set()
    for instruction, value in _instructions():
        if instruction == "COPY" and not value.startswith("--from"):
            sources |= {word.rstrip("/") for word in value.split()[:-1]}
    return sources


def test_the_base_image_is_pinned_and_shared_by_both_stages() -> None:
    (base,) = [v for k, v in _instructions() if k == "ARG" and v.startswith("PYTHON_IMAGE=")]
    image = base.split("=", 1)[1]
    # An exact patch release of Python 3.11 (the project's), slim, or a digest.
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", image), image
    froms = [v for k, v in _instructions() if k == "FROM"]
    # the services' image is the default (last) target; the load-test kit's shares its runtime
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE} AS runtime", "runtime AS loadtest",
                     "runtime AS run"]


def test_it_installs_the_pinned_dependencies_and_the_project() -> None:
    runs = " ".join(v for k, v in _instructions() if k == "RUN")
    assert "-c constraints.txt -r requirements.txt" in runs
    assert "--only-binary=:all:" in runs
    # What pyproject packages is what the image copies.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= _copied(), packages - _copied()
    # Every service is importable in the image (checked at build time).
    services = sorted(p.parent.name for p in (ROOT / "services").glob("*/service.py"))
    for service in services:
        assert f"services.{service}.service" in runs, service


def test_it_runs_as_a_non_root_user_on_a_read_only_root() -> None:
    users = [v for k, v in _instructions() if k == "USER"]
    # numeric, so runAsNonRoot can verify it; the manifests use 10001. The loadtest target installs
    # its clients as root and switches back before its command.
    assert users == ["10001:10001", "0", "10001:10001"]
    env = " ".join(v for k, v in _instructions() if k == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "TMPDIR=/tmp" in env and "BURACO_ENV=production" in env
    assert "compileall" in " ".join(v for k, v in _instructions() if k == "RUN")


def test_the_build_context_holds_what_the_image_copies_and_nothing_else() -> None:
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignore[0] == "*"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert _copied() == allowed, _copied() ^ allowed


def test_it_installs_the_engine_compiled_by_mypyc_and_checks_it_loads_compiled() -> None:
    runs = [v for k, v in _instructions() if k == "RUN"]
    build = next(r for r in runs if "BURACO_NATIVE=1" in r)
    assert "pip wheel" in build and "/opt/venv/bin/pip install --no-deps /wheels/buraco-" in build
    # the compiled-engine check reads the same listing setup.py compiles
    assert "engine/native.txt" in build and "endswith('.so')" in build and "python -I -c" in build
    # mypy and setuptools come pinned into a build-only environment, at the versions the checkout uses
    tools = next(r for r in runs if "/opt/build/bin/pip install" in r)
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for package in ("mypy", "setuptools"):
        assert f"{package}=={pins[package]}" in tools, package
    assert "-c constraints.txt" in tools
    # the run stage takes the service's environment only, not the build tools
    copies = [v for k, v in _instructions() if k == "COPY" and v.startswith("--from=build")]
    assert copies[0] == "--from=build /opt/venv /opt/venv"
    assert all("/opt/build" not in c and "/wheels" not in c for c in copies)


def test_the_loadtest_target_adds_the_kit_and_its_clients_to_the_runtime_only() -> None:
    stages: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for instruction, value in _instructions():
        if instruction == "FROM":
            current = value.rsplit(" AS ", 1)[1]
        stages.setdefault(current, []).append((instruction, value))
    loadtest = stages["loadtest"]
    assert ("COPY", "loadtest /opt/loadtest/loadtest") in loadtest
    assert any(k == "RUN" and "-c /opt/loadtest/constraints.txt httpx websockets" in v for k, v in loadtest)
    assert loadtest[-1] == ("CMD", '["python", "-m", "loadtest", "--help"]')
    assert [v for k, v in loadtest if k == "USER"][-1] == "10001:10001"
    # the services' image (the default, last target) is the runtime with nothing added
    assert list(stages)[-1] == "run" and stages["run"] == [("FROM", "runtime AS run")]

"""The benchmarks are tools: they live in bench/, outside the packages that ship, and the service
packages stay independent of each other (a bench may import several services; a service may not)."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("engine", "services", "buraco")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_benchmark_in_the_packages_that_ship() -> None:
    assert (ROOT / "bench" / "engine.py").is_file()  # the folder this test is about is where it should be
    for package in SHIPPED:
        for path in (ROOT / package).rglob("*.py"):
            assert not path.name.startswith("bench"), f"{path.relative_to(ROOT)}: benchmarks belong in bench/"
            assert not any(name == "bench" or name.startswith("bench.") for name in _imports(path)), (
                f"{path.relative_to(ROOT)} imports the benchmarks"
            )


def test_no_service_imports_another_service() -> None:
    services = sorted(p.parent.name for p in (ROOT / "services").glob("*/service.py"))
    assert {"matchmaking", "game_session", "wallet", "ranking", "tournament"} <= set(services)
    for service in services:
        others = [s for s in services if s != service]
        for path in (ROOT / "services" / service).rglob("*.py"):
            for name in _imports(path):
                parts = name.split(".")
                assert not (parts[0] == "services" and len(parts) > 1 and parts[1] in others), (
                    f"{path.relative_to(ROOT)} imports {name}: services call each other through their contracts"
                )


def test_neither_the_package_nor_the_image_carries_the_benchmarks() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(fnmatch.fnmatch(name, p) for p in patterns for name in ("bench", "bench.engine")), patterns
    ignore = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignore[0] == "*"  # the build context holds only what is allowed below
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    assert not any(a.startswith("bench") for a in allowed), allowed
    copies = [line.split() for line in (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") and "--from" not in line]
    assert not any(word.rstrip("/").startswith("bench") for words in copies for word in words[1:-1]), copies

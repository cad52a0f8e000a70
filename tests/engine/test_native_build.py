"""Which build of the engine the tests run on, checked rather than assumed.

`make test-engine-native` runs the engine's tests against the compiled wheel installed in a fresh
virtual environment, with ``BURACO_EXPECT_NATIVE_ENGINE=1``: there, every module of
engine/native.txt must come from its extension module (a test run that silently fell back on the
sources would prove nothing about the build). Everywhere else the sources are tested, and a mixed
engine (some modules compiled, some not: a stale build on the path) is refused either way.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
from pathlib import Path

LISTING = Path(__file__).resolve().parents[2] / "engine" / "native.txt"


def native_modules() -> list[str]:
    lines = (line.strip() for line in LISTING.read_text().splitlines())
    return [line.removesuffix(".py").replace("/", ".") for line in lines if line and not line.startswith("#")]


def compiled(module: str) -> bool:
    origin = importlib.import_module(module).__file__ or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_the_listing_names_engine_modules_that_exist() -> None:
    modules = native_modules()
    assert modules and len(set(modules)) == len(modules)
    assert {"engine.state", "engine.movegen", "engine.bots.heuristic", "engine.bots.expert"} <= set(modules)
    for module in modules:
        assert module.startswith("engine.") and importlib.import_module(module) is not None


def test_the_engine_runs_as_the_build_this_run_expects() -> None:
    loaded = {module: compiled(module) for module in native_modules()}
    if os.environ.get("BURACO_EXPECT_NATIVE_ENGINE") == "1":
        assert all(loaded.values()), f"not compiled: {[m for m, c in loaded.items() if not c]}"
        # the installed package, not the checkout's sources
        assert "site-packages" in (importlib.import_module("engine").__file__ or "")
    else:
        assert len(set(loaded.values())) == 1, f"a mixed engine: compiled {[m for m, c in loaded.items() if c]}"

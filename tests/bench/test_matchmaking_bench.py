"""bench/matchmaking.py's comparison with a baseline: the children of a baseline run import the
baseline's packages and this benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.matchmaking import mixed_checkout


def test_a_baseline_run_imports_the_baselines_services_and_this_benchmark(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline"
    for package in ("services", "buraco", "bench"):
        (baseline / package).mkdir(parents=True)
        (baseline / package / "__init__.py").write_text(f"WHO = 'baseline {package}'\n")
    (baseline / "docs").mkdir()  # not a package: left out
    (tmp_path / "mixed").mkdir()
    mixed = mixed_checkout(baseline, tmp_path / "mixed")
    assert sorted(p.name for p in mixed.iterdir()) == ["bench", "buraco", "services"]
    probe = "import bench, services; print(services.WHO); print(bench.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=mixed, capture_output=True, text=True, check=True).stdout
    who, bench_file = out.splitlines()
    assert who == "baseline services"
    assert Path(bench_file).resolve() == (Path(__file__).parents[2] / "bench" / "__init__.py").resolve()

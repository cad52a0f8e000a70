"""bench/evaluation.py: the fit of the expert's learned evaluation, at a tiny size."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

import bench.evaluation as tool
from engine.bots.evaluation import N_FEATURES
from engine.bots.evaluation_weights import STAGES, WEIGHTS


def test_solve_recovers_a_known_system() -> None:
    a = [[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]]
    x = [1.5, -2.0, 0.25]
    b = [sum(a[i][j] * x[j] for j in range(3)) for i in range(3)]
    assert tool.solve(a, b) == pytest.approx(x)


def test_a_stage_fit_recovers_a_linear_utility() -> None:
    truth = [float(i + 1) for i in range(N_FEATURES)]
    rng = random.Random(1)
    shots = []
    for _ in range(200):
        features = [rng.gauss(0.0, 3.0) for _ in range(N_FEATURES)]
        shots.append(tool.Snapshot(0, 0, features, 0.0, 0, 0, sum(w * x for w, x in zip(truth, features, strict=True))))
    assert tool.fit_stage(shots) == pytest.approx(truth, rel=0.02, abs=0.05)


def test_a_tiny_fit_reports_and_writes_the_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "evaluation_weights.py"
    target.write_text(tool.WEIGHTS_FILE.read_text())
    monkeypatch.setattr(tool, "WEIGHTS_FILE", target)
    assert tool.main(["--presets", "fechado", "--players", "2", "--hands", "6", "--holdout", "4", "--write"]) == 0
    out = capsys.readouterr().out
    bench = {line.split()[1]: line.split()[2] for line in out.splitlines() if line.startswith("bench: ")}
    for label in ("static", "learned"):
        for fifth in range(1, 6):
            value = bench[f"evaluation_corr_{label}_fechado_2p_fifth{fifth}"]
            assert value == "nan" or -1.0 <= float(value) <= 1.0
    tree = ast.parse(target.read_text())
    written = next(n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "WEIGHTS")
    assert written.value is not None
    weights = ast.literal_eval(written.value)
    assert set(weights) == set(WEIGHTS) | {"fechado/2"}  # merged with those already there
    turns_per_draw, rows = weights["fechado/2"]
    assert turns_per_draw > 0 and len(rows) == STAGES and all(len(r) == N_FEATURES for r in rows)
    for key in set(WEIGHTS) - {"fechado/2"}:
        assert weights[key] == WEIGHTS[key]


def test_the_tool_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        tool.main(["--players", "3"])
    assert exc.value.code == 2
    assert "--players takes 2 and/or 4" in capsys.readouterr().err

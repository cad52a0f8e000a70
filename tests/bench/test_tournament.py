"""bench.tournament: the tournament service's pure parts timed at a small size."""

import pytest

from bench import tournament


def test_the_benchmark_runs_and_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert tournament.main(["--entrants", "33", "--rounds", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 7 and all(line.startswith("bench: ") and len(line.split()) == 4 for line in lines)
    assert "bench: swiss_rematches_4_rounds 0 pairs" in lines

"""bench/decisions.py: the expert's decisions measured offline, at a tiny size."""

from __future__ import annotations

import math

import pytest

import bench.decisions as tool


def test_an_arms_worth_is_the_truths_gain_of_its_pick() -> None:
    d = tool.Decision(0, 3, [0.0, 12.5, -4.0], picks=[0, 1, 2])
    assert [d.worth(arm) for arm in range(3)] == [0.0, 12.5, -4.0]


def test_the_half_search_is_valued_on_the_worlds_it_did_not_see() -> None:
    # sums of the gains over the first 2 worlds, then over all 4: candidate 2 looks best on the first
    # half (+30 over 2 worlds) and gains -10 over the other two: -5 a world
    assert tool.half_best([0.0, 10.0, 30.0], [0.0, 40.0, 20.0], 2) == -5.0
    assert tool.half_best([0.0, -10.0, -3.0], [0.0, 5.0, 8.0], 2) == 0.0  # the heuristic's choice kept
    assert tool.half_best([0.0, 6.0, 6.0], [0.0, 6.0, 10.0], 2) == 0.0  # a tie goes to the first


def test_arms_parse_into_typed_knobs() -> None:
    knobs = {"cut_worlds": int, "pick_z": float, "search_all_plays": bool}
    assert tool.parse_arm("", knobs) == {}
    assert tool.parse_arm("cut_worlds=8, pick_z=1.5,search_all_plays=true", knobs) == {
        "cut_worlds": 8, "pick_z": 1.5, "search_all_plays": True}
    with pytest.raises(ValueError, match="unknown expert knob 'nope'"):
        tool.parse_arm("nope=1", knobs)


@pytest.mark.parametrize("truth", ["players", "real", "sampled"])
def test_a_tiny_run_measures_every_arm_on_the_same_decisions(truth: str, capsys: pytest.CaptureFixture[str]) -> None:
    records = tool.play("fechado", 2, 1, [{}, {"cut_worlds": 0}], truth_worlds=2, every=8, seed="t",
                        budget_ms=2.0, truth=truth)
    assert records
    for r in records:
        assert len(r.truth) == r.candidates >= 2 and r.truth[0] == 0.0  # gains over the heuristic's choice
        assert len(r.picks) == len(r.worlds) == len(r.cut) == 2
        assert all(0 <= p < r.candidates for p in r.picks)
        assert 0 <= r.stage <= 4
        assert math.isfinite(r.half_best)
    assert tool.main(["--preset", "fechado", "--hands", "1", "--truth-worlds", "2", "--every", "8", "--truth", truth,
                      "--budget-ms", "2", "--arm", "cut_worlds=0", "--arm", "cut_worlds=8"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fechado, 2 players: ")
    bench = {line.split()[1] for line in out.splitlines() if line.startswith("bench: ")}
    assert bench == {"decisions_worth_fechado_2p_arm0", "decisions_worth_fechado_2p_arm1",
                     "decisions_worth_diff_fechado_2p_arm1", "decisions_worth_fechado_2p_half_best"}


def test_the_tool_refuses_an_unknown_knob(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        tool.main(["--arm", "nope=1"])
    assert exc.value.code == 2
    assert "unknown expert knob 'nope'" in capsys.readouterr().err

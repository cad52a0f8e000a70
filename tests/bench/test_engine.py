"""bench.engine (`make bench-engine`) at a tiny size: every figure printed, in its unit."""

import re

import pytest

from bench import engine as engine_bench


def test_the_engine_bench_prints_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    engine_bench.main(["--seconds", "0.05", "--samples", "5"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# ruleset fechado; CPU time of one core; ")
    figures = {}
    for line in out[1:]:
        if line.startswith("#") or line.startswith("digest: "):
            continue
        assert re.fullmatch(r"bench: \w+ \d+\.\d \S+", line), line
        _, name, value, unit = line.split()
        figures[name] = (float(value), unit)
    for kind in ("random", "heuristic"):
        for players in (2, 4):
            assert figures[f"{kind}_hands_per_s_{players}p"][1] == "hands/s"
            assert figures[f"{kind}_turns_per_s_{players}p"][1] == "turns/s"
        assert figures[f"{kind}_hands_per_s_2p_service_gc"][1] == "hands/s"
    assert figures["python_baseline"][1] == "Mops/s"
    assert figures["legal_actions_22_cards_median"][1] == figures["legal_actions_22_cards_p99"][1] == "us"
    assert figures["legal_actions_22_cards_median"][0] <= figures["legal_actions_22_cards_p99"][0]


def test_positions_after_the_morto_hold_22_cards() -> None:
    from engine.rules import PRESETS

    for state in engine_bench.positions_after_morto(PRESETS["fechado"], 3):
        assert state.phase == "play" and state.sizes[state.to_act] == 22
        assert state.morto_taken[state.to_act & 1]


def test_the_play_digest_is_a_fixed_function_of_the_play(capsys: pytest.CaptureFixture[str]) -> None:
    first = engine_bench.play_digest("random", 2, 1, ("fechado", "aberto"))
    assert first == engine_bench.play_digest("random", 2, 1, ("fechado", "aberto"))
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert first != engine_bench.play_digest("random", 4, 1, ("fechado", "aberto"))
    engine_bench.main(["--digest-only"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == [
        f"play_digest_{kind}_{players}p" for kind in ("random", "heuristic") for players in (2, 4)]

"""The game-record contract: ``python -m engine.replay``, its output and exit codes."""

import copy
import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from engine.deal import deal_from_seed
from engine.replay import EXIT_ILLEGAL, EXIT_MALFORMED, EXIT_OK, main
from engine.rules import preset

EXAMPLES = sorted(pathlib.Path(__file__).resolve().parents[3].joinpath("shared/spec/examples").glob("*.json"))
if not EXAMPLES:  # CI checks out the project alone: the examples are mirrored in the tests
    EXAMPLES = sorted(pathlib.Path(__file__).with_name("records").glob("*.json"))


def subset(expected: Any, actual: Any, path: str = "") -> None:
    """Every key of ``expected`` is in ``actual`` with an equal value (lists compared whole)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        for k, v in expected.items():
            assert k in actual, f"{path}.{k} missing"
            subset(v, actual[k], f"{path}.{k}")
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict | list):
        assert isinstance(actual, list) and len(actual) == len(expected), path
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            subset(e, a, f"{path}[{i}]")
    else:
        assert expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


def run(record: object, tmp_path: pathlib.Path, raw: str | None = None) -> tuple[int, str, str]:
    f = tmp_path / "record.json"
    f.write_text(raw if raw is not None else json.dumps(record))
    p = subprocess.run([sys.executable, "-m", "engine.replay", str(f)], capture_output=True, text=True,
                       cwd=pathlib.Path(__file__).resolve().parents[2])
    return p.returncode, p.stdout, p.stderr


def test_the_examples_are_mirrored() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_shared_examples(path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = json.loads(path.read_text())
    status = main([str(path)])
    out = json.loads(capsys.readouterr().out)
    subset(record["expect"], out)
    assert status == (EXIT_OK if record["expect"]["ok"] else EXIT_ILLEGAL)


def simple_record() -> dict[str, Any]:
    deal = deal_from_seed(preset("fechado"), 2, "replay-test")
    return {"ruleset": "fechado", "players": 2, "deal": deal.to_json(), "actions": [{"seat": 0, "do": "draw"}]}


def test_a_legal_record_through_the_real_command(tmp_path: pathlib.Path) -> None:
    rec = simple_record()
    first = rec["deal"]["stock"][0]
    hand = sorted(rec["deal"]["hands"][0] + [first])
    rec["actions"].append({"seat": 0, "do": "discard", "card": first.lower()})
    status, out, err = run(rec, tmp_path)
    assert status == EXIT_OK and err == ""
    data = json.loads(out)
    assert data["ok"] is True and data["error"] is None
    assert data["state"]["phase"] == "draw" and data["state"]["to_act"] == 1
    assert data["state"]["discard"] == [first]
    assert data["state"]["stock_count"] == 108 - 22 - 22 - 1
    assert data["state"]["mortos_taken"] == [False, False]
    assert len(data["state"]["hands"][0]) == 11
    assert data["state"]["hands"][0].count(first) == hand.count(first) - 1
    assert data["score"] == {"sides": [{"cards": 0, "bonus": 0, "going_out": 0, "hand": 0, "morto": 0, "total": 0}] * 2}


def test_an_illegal_action_exits_3_with_the_state_before_it(tmp_path: pathlib.Path) -> None:
    rec = simple_record()
    rec["actions"].append({"seat": 1, "do": "draw"})
    status, out, _ = run(rec, tmp_path)
    assert status == EXIT_ILLEGAL
    data = json.loads(out)
    assert data["ok"] is False
    assert data["error"]["index"] == 1 and data["error"]["code"] == "NOT_YOUR_TURN"
    assert data["error"]["message"]
    assert data["state"]["phase"] == "play" and data["state"]["to_act"] == 0
    assert len(data["state"]["hands"][0]) == 12


def test_actions_after_the_first_illegal_one_are_not_applied(tmp_path: pathlib.Path) -> None:
    rec = simple_record()
    rec["actions"] = [{"seat": 0, "do": "discard", "card": rec["deal"]["hands"][0][0]}, {"seat": 0, "do": "draw"}]
    status, out, _ = run(rec, tmp_path)
    data = json.loads(out)
    assert status == EXIT_ILLEGAL and data["error"]["index"] == 0 and data["error"]["code"] == "WRONG_PHASE"
    assert data["state"]["stock_count"] == 64


def malformed_cases() -> list[tuple[str, Any]]:
    base = simple_record()
    cases: list[tuple[str, Any]] = []

    def variant(name: str, change: Any) -> None:
        rec = copy.deepcopy(base)
        change(rec)
        cases.append((name, rec))

    variant("unknown ruleset", lambda r: r.__setitem__("ruleset", "canasta"))
    variant("bad override", lambda r: r.__setitem__("ruleset", {"preset": "fechado", "wat": 1}))
    variant("three players", lambda r: r.__setitem__("players", 3))
    variant("no deal", lambda r: r.pop("deal"))
    variant("no actions", lambda r: r.pop("actions"))
    variant("unknown card in deal", lambda r: r["deal"]["stock"].__setitem__(0, "ZZ"))
    variant("unknown card in action", lambda r: r["actions"].append({"seat": 0, "do": "discard", "card": "1H"}))
    variant("unknown action", lambda r: r["actions"].append({"seat": 0, "do": "pass"}))
    variant("seat out of range", lambda r: r["actions"].append({"seat": 2, "do": "draw"}))
    variant("short hand", lambda r: r["deal"]["hands"][0].pop())
    variant("wrong deck", lambda r: r["deal"]["stock"].__setitem__(0, r["deal"]["stock"][1]))
    variant("104-card ruleset with jokers", lambda r: r.__setitem__("ruleset", "aberto"))
    variant("hands for 4 with 2 players", lambda r: r.__setitem__("players", 4))
    variant("bad dealer", lambda r: r.__setitem__("dealer", 5))
    variant("one morto", lambda r: r["deal"]["mortos"].pop())
    variant("not an object", lambda r: r.clear() or r.update({"x": 1}))
    return cases


@pytest.mark.parametrize("name,record", malformed_cases(), ids=[n for n, _ in malformed_cases()])
def test_malformed_records_exit_2_with_one_line_on_stderr(name: str, record: Any, tmp_path: pathlib.Path) -> None:
    status, out, err = run(record, tmp_path)
    assert status == EXIT_MALFORMED, (name, out, err)
    assert out == ""
    assert err.strip() and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("raw", ["{not json", "", "[1, 2", "\xff"])
def test_not_json_exits_2(raw: str, tmp_path: pathlib.Path) -> None:
    status, out, err = run(None, tmp_path, raw=raw)
    assert status == EXIT_MALFORMED and out == "" and err.strip()


def test_missing_file_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["/nonexistent/record.json"]) == EXIT_MALFORMED
    assert main([]) == EXIT_MALFORMED
    captured = capsys.readouterr()
    assert captured.out == ""

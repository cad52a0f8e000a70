"""The report: rows, CSV, JSON and text from known recordings; gates that pass and fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.recorder import Recorder
from loadtest.report import COLUMNS, GateError, Report, check_gates, max_error_rate_gate, parse_gate


def known_recorder() -> Recorder:
    recorder = Recorder()
    for ms in range(1, 101):  # 1..100 ms
        recorder.ok("rpc", "wallet.GetAccount", ms / 1000)
    recorder.error("rpc", "wallet.GetAccount", "UNAVAILABLE")
    recorder.error("rpc", "wallet.GetAccount", "DEADLINE_EXCEEDED")
    recorder.error("rpc", "wallet.GetAccount", "UNAVAILABLE")
    for ms in (10, 20, 30, 40):
        recorder.ok("rpc", "matchmaking.WatchTicket", ms / 1000)
        recorder.first_event("rpc", "matchmaking.WatchTicket", ms / 1000)
    recorder.error("rpc", "matchmaking.CreateTicket", "UNIMPLEMENTED")
    recorder.ok("step", "settle", 1.5)
    recorder.ok("step", "settle", 2.5)
    recorder.counters["journeys_started"] = 4
    return recorder


def test_rows_have_known_percentiles_and_errors() -> None:
    report = Report.build(known_recorder(), elapsed_s=10.0)
    rows = {(r["kind"], r["name"]): r for r in report.rows}
    get = rows[("rpc", "wallet.GetAccount")]
    assert (get["calls"], get["ok"], get["errors"]) == (103, 100, 3)
    assert get["error_rate"] == pytest.approx(3 / 103, abs=1e-6)
    assert get["throughput_per_s"] == 10.0
    # above 2 ms a percentile is the top of its bucket: at most 0.1 % over the exact value
    percentiles = (get["p50_ms"], get["p95_ms"], get["p99_ms"], get["p999_ms"], get["max_ms"])
    assert percentiles == pytest.approx((50, 95, 99, 100, 100), rel=1e-3)
    assert all(got >= exact for got, exact in zip(percentiles, (50, 95, 99, 100, 100), strict=True))
    assert get["mean_ms"] == 50.5
    assert get["errors_by_code"] == "DEADLINE_EXCEEDED:1;UNAVAILABLE:2"
    assert get["first_event_count"] == 0 and get["first_event_p50_ms"] is None
    watch = rows[("rpc", "matchmaking.WatchTicket")]
    assert watch["first_event_count"] == 4
    assert (watch["first_event_p50_ms"], watch["first_event_p99_ms"]) == pytest.approx((20, 40), rel=1e-3)
    create = rows[("rpc", "matchmaking.CreateTicket")]
    assert (create["calls"], create["ok"], create["error_rate"], create["p99_ms"]) == (1, 0, 1.0, None)
    settle = rows[("step", "settle")]
    assert (settle["p50_ms"], settle["max_ms"], settle["mean_ms"]) == pytest.approx((1500, 2500, 2000), rel=1e-3)
    assert [r["kind"] for r in report.rows] == ["rpc", "rpc", "rpc", "step"]
    assert report.summary["rpc_calls"] == 108
    assert report.summary["rpc_errors"] == 4
    assert report.summary["counters"] == {"journeys_started": 4}


def test_csv_rows_are_exact() -> None:
    recorder = Recorder()
    recorder.ok("rpc", "ranking.GetPlayer", 0.002)
    recorder.ok("rpc", "ranking.GetPlayer", 0.004)
    recorder.error("rpc", "ranking.GetPlayer", "NOT_FOUND")
    lines = Report.build(recorder, elapsed_s=2.0).csv().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    assert lines[1] == "rpc,ranking.GetPlayer,3,2,1,0.333333,1.0,2.0,4.0,4.0,4.0,4.0,3.0,0,,,NOT_FOUND:1"
    assert len(lines) == 2


def test_json_and_files(tmp_path: Path) -> None:
    report = Report.build(known_recorder(), elapsed_s=10.0, settings={"players": 4})
    results = check_gates(report, [parse_gate("p99<100ms")])
    csv_path, json_path = report.write(tmp_path / "out", results)
    document = json.loads(json_path.read_text())
    assert document["summary"]["settings"] == {"players": 4}
    assert document["rows"] == report.rows
    assert document["gates"] == [{"gate": "p99<100ms", "passed": True, "failures": []}]
    assert csv_path.read_text() == report.csv()
    text = report.text()
    assert "wallet.GetAccount" in text and "DEADLINE_EXCEEDED:1;UNAVAILABLE:2" in text
    assert "108 RPC calls, 4 errors" in text


@pytest.mark.parametrize(
    ("text", "kind", "name", "column", "op", "threshold"),
    [
        ("p99<100ms", None, None, "p99_ms", "<", 100.0),
        ("p99.9<=0.25s", None, None, "p999_ms", "<=", 250.0),
        ("rpc:wallet.GetAccount:p999<250ms", "rpc", "wallet.GetAccount", "p999_ms", "<", 250.0),
        ("step:settle:p95<2s", "step", "settle", "p95_ms", "<", 2000.0),
        ("step:p99<30", "step", None, "p99_ms", "<", 30.0),
        ("all:error_rate<=1%", "all", None, "error_rate", "<=", 0.01),
        ("rpc:ranking.GetPlayer:throughput>=50", "rpc", "ranking.GetPlayer", "throughput_per_s", ">=", 50.0),
        ("first_event_p99<500us", None, None, "first_event_p99_ms", "<", 0.5),
    ],
)
def test_gates_parse(text: str, kind: str | None, name: str | None, column: str, op: str, threshold: float) -> None:
    gate = parse_gate(text)
    assert (gate.kind, gate.name, gate.column, gate.op) == (kind, name, column, op)
    assert gate.threshold == pytest.approx(threshold)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("p99", "expected"),
        ("p98<100ms", "unknown metric"),
        ("p99<100h", "duration unit"),
        ("errors<3ms", "takes no unit"),
        ("tables:p99<1s", "scope must start"),
        ("all:x:p99<1s", "`all` takes no name"),
    ],
)
def test_bad_gates_are_refused(text: str, message: str) -> None:
    with pytest.raises(GateError, match=message):
        parse_gate(text)


def test_gates_pass_and_fail_on_known_rows() -> None:
    report = Report.build(known_recorder(), elapsed_s=10.0)

    def passed(text: str) -> bool:
        [result] = check_gates(report, [parse_gate(text)])
        return result.passed

    # default scope: RPC rows with data (CreateTicket has none, the settle step is not an RPC)
    assert passed("p99<100ms")
    assert not passed("p99<99ms")
    assert passed("rpc:wallet.GetAccount:p50<=50.1ms")
    assert not passed("rpc:wallet.GetAccount:p50<50ms")
    assert passed("step:settle:p95<3s")
    assert not passed("step:p95<2s")
    assert not passed("rpc:matchmaking.CreateTicket:p99<1s")  # no successful call: no latency
    assert not passed("rpc:wallet.Settle:p99<1s")  # no such row
    assert not passed("all:error_rate<1%")
    assert passed("rpc:matchmaking.WatchTicket:error_rate<1%")
    assert passed("rpc:wallet.GetAccount:throughput>=10")
    assert passed("first_event_p99<=40ms")
    [failed] = check_gates(report, [parse_gate("p99<50ms")])
    assert failed.failures == ["rpc:wallet.GetAccount: p99_ms=99.007 fails < 50"]


def test_max_error_rate_gate() -> None:
    report = Report.build(known_recorder(), elapsed_s=10.0)
    [ok] = check_gates(report, [max_error_rate_gate(0.05)])
    [bad] = check_gates(report, [max_error_rate_gate(0.01)])
    assert ok.passed
    assert not bad.passed and "of 108 calls" in bad.failures[0]
    [empty] = check_gates(Report.build(Recorder(), elapsed_s=1.0), [max_error_rate_gate(1.0)])
    assert not empty.passed  # a run that made no call proves nothing


def test_sweep_level_reads_one_service_from_a_report() -> None:
    from loadtest.sweep import level_of

    recorder = known_recorder()
    recorder.ok("rpc", "ranking.GetPlayer", 0.5)
    document = json.loads(Report.build(recorder, elapsed_s=10.0).json())
    wallet = level_of(8, document, "wallet", 100.0)
    assert (wallet.players, wallet.calls_per_s, wallet.error_rate) == (8, 10.0, round(3 / 103, 6))
    assert wallet.worst_p99_ms == pytest.approx(99, rel=1e-3)
    assert not wallet.within  # errors
    ranking = level_of(8, document, "ranking", 100.0)
    assert ranking.worst_p99_ms == pytest.approx(500, rel=1e-3)
    assert not ranking.within
    assert level_of(8, document, "ranking", 600.0).within
    assert not level_of(8, document, "game_session", 100.0).within  # no call: no evidence


def test_sweep_level_over_every_rpc_takes_the_worst_service() -> None:
    from loadtest.sweep import ALL, level_of

    recorder = Recorder()
    for ms in range(1, 101):
        recorder.ok("rpc", "wallet.GetAccount", ms / 1000)
        recorder.ok("rpc", "game_session.Draw", ms / 2000)
    recorder.ok("step", "journey", 30.0)  # steps are not RPCs: never under the bound
    document = json.loads(Report.build(recorder, elapsed_s=10.0).json())
    level = level_of(2, document, ALL, 100.0)
    assert level.calls_per_s == 20.0
    assert level.worst_p99_ms == pytest.approx(99, rel=1e-3)  # the wallet's, not the game session's 49.5
    assert level.within
    assert not level_of(2, document, ALL, 90.0).within


def test_sweep_pid_arguments() -> None:
    import argparse

    from loadtest.sweep import parse_pid

    assert parse_pid("123") == ("service", 123)
    assert parse_pid("driver=77") == ("driver", 77)
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=PID"):
        parse_pid("driver=x")


def test_sweep_finds_a_suites_service_processes() -> None:
    """`--suite PID` names each child by its `services.NAME` module, and ignores other children."""
    import subprocess
    import sys

    from loadtest.sweep import process_meters, suite_processes

    # A parent that starts two children the way services.local does, plus one that is no service.
    script = (
        "import subprocess, sys\n"
        "cmd = [sys.executable, '-c', 'import sys; sys.stdin.read()']\n"
        "kids = [subprocess.Popen([*cmd, 'services.wallet'], stdin=subprocess.PIPE),\n"
        "        subprocess.Popen([*cmd, 'services.ranking'], stdin=subprocess.PIPE),\n"
        "        subprocess.Popen([*cmd, 'other'], stdin=subprocess.PIPE)]\n"
        "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
        "sys.stdin.read()\n"
        "for k in kids: k.stdin.close(); k.wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        wallet, ranking, _other = (int(p) for p in parent.stdout.readline().split())
        assert suite_processes(parent.pid) == {"wallet": wallet, "ranking": ranking}
        meters = process_meters({"wallet": wallet}, postgres=True)
        assert set(meters) == {"wallet", "postgres"}
        assert meters["wallet"]() >= 0.0
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(timeout=30)

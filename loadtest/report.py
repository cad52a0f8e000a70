"""The run's report: one row per RPC and per journey step, as text, CSV and JSON; and the gates.

Columns (the CSV header, the JSON row keys, the text table):

    kind, name          `rpc` (service.Method) or `step` (a journey step, or `journey` itself)
    calls, ok, errors   calls made, succeeded, failed; error_rate = errors / calls
    throughput_per_s    successful calls per second of the run's measured time
    p50_ms .. p999_ms   latency percentiles of the successful calls (p999 is p99.9), and max, mean
    first_event_*       streams: the time from the call to its first message (count, p50, p99)
    errors_by_code      `CODE:n` pairs separated by `;` (gRPC status names, or the driver's own
                        codes such as `SETTLE_MISMATCH`, `TIMEOUT`)

A gate (`--fail-if`) reads `[SCOPE:]METRIC OP VALUE[UNIT]`:

    p99<100ms                    every RPC row with successful calls: p99 under 100 ms
    rpc:wallet.GetAccount:p999<250ms
    step:settle:p95<2s
    step:p99<30s                 every step row
    all:error_rate<=1%           every row (RPCs and steps)
    rpc:ranking.GetPlayer:throughput>=50

Metrics: p50 p95 p99 p999 (or p99.9) max mean (durations: us, ms, s; default ms), first_event_p50,
first_event_p99, error_rate (a fraction, or with %), errors, calls, ok, throughput (per second).
A gate that names one row fails when that row has no data; a gate over many rows checks the rows
that have data and fails when none has.
"""

from __future__ import annotations

import csv
import io
import json
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.recorder import Histogram, Recorder, Series

COLUMNS = (
    "kind",
    "name",
    "calls",
    "ok",
    "errors",
    "error_rate",
    "throughput_per_s",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "mean_ms",
    "first_event_count",
    "first_event_p50_ms",
    "first_event_p99_ms",
    "errors_by_code",
)


def _ms(us: float | None) -> float | None:
    return None if us is None else round(us / 1000, 3)


def _percentile_ms(histogram: Histogram, percent: float) -> float | None:
    return _ms(histogram.percentile_us(percent))


def row_of(series: Series, elapsed_s: float) -> dict[str, Any]:
    """A series as a report row (None where a value is undefined, e.g. no successful call)."""
    latency = series.latency
    return {
        "kind": series.kind,
        "name": series.name,
        "calls": series.calls,
        "ok": series.ok,
        "errors": series.error_count,
        "error_rate": round(series.error_count / series.calls, 6) if series.calls else 0.0,
        "throughput_per_s": round(series.ok / elapsed_s, 3) if elapsed_s > 0 else None,
        "p50_ms": _percentile_ms(latency, 50),
        "p95_ms": _percentile_ms(latency, 95),
        "p99_ms": _percentile_ms(latency, 99),
        "p999_ms": _percentile_ms(latency, 99.9),
        "max_ms": _ms(latency.max_us) if latency.count else None,
        "mean_ms": _ms(latency.mean_us),
        "first_event_count": series.first_event.count,
        "first_event_p50_ms": _percentile_ms(series.first_event, 50),
        "first_event_p99_ms": _percentile_ms(series.first_event, 99),
        "errors_by_code": ";".join(f"{code}:{n}" for code, n in sorted(series.errors.items())),
    }


@dataclass
class Report:
    rows: list[dict[str, Any]]
    summary: dict[str, Any]

    @classmethod
    def build(cls, recorder: Recorder, elapsed_s: float, settings: dict[str, Any] | None = None) -> Report:
        rows = [row_of(series, elapsed_s) for series in recorder]
        rpc_calls = sum(r["calls"] for r in rows if r["kind"] == "rpc")
        rpc_errors = sum(r["errors"] for r in rows if r["kind"] == "rpc")
        driver_cpu_ms = recorder.counters.get("driver_cpu_ms", 0)
        summary: dict[str, Any] = {
            "elapsed_s": round(elapsed_s, 3),
            "rpc_calls": rpc_calls,
            # driver CPU per call (stream messages and the bots' thinking included)
            "driver_cpu_us_per_call": round(1000 * driver_cpu_ms / rpc_calls, 1) if rpc_calls else None,
            "rpc_errors": rpc_errors,
            "rpc_error_rate": round(rpc_errors / rpc_calls, 6) if rpc_calls else 0.0,
            "counters": dict(sorted(recorder.counters.items())),
            "settings": settings or {},
        }
        return cls(rows, summary)

    def csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: "" if row[k] is None else row[k] for k in COLUMNS})
        return out.getvalue()

    def json(self, gates: Sequence[GateResult] = ()) -> str:
        document = {
            "summary": self.summary,
            "rows": self.rows,
            "gates": [
                {"gate": g.gate.text, "passed": g.passed, "failures": g.failures} for g in gates
            ],
        }
        return json.dumps(document, indent=2, sort_keys=False) + "\n"

    def text(self) -> str:
        headers = ("kind", "name", "calls", "err", "ok/s", "p50", "p95", "p99", "p99.9", "max", "1st-event", "errors")
        lines: list[list[str]] = []
        for r in self.rows:
            first = _fmt(r["first_event_p50_ms"]) if r["first_event_count"] else ""
            lines.append(
                [
                    r["kind"],
                    r["name"],
                    str(r["calls"]),
                    str(r["errors"]),
                    _fmt(r["throughput_per_s"], unit=""),
                    _fmt(r["p50_ms"]),
                    _fmt(r["p95_ms"]),
                    _fmt(r["p99_ms"]),
                    _fmt(r["p999_ms"]),
                    _fmt(r["max_ms"]),
                    first,
                    r["errors_by_code"],
                ]
            )
        widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(headers)]
        out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
        for line in lines:
            out.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        s = self.summary
        counters = " ".join(f"{k}={v}" for k, v in s["counters"].items())
        out.append(
            f"elapsed {s['elapsed_s']} s; {s['rpc_calls']} RPC calls, {s['rpc_errors']} errors "
            f"({s['rpc_error_rate'] * 100:.2f} %); {counters}".rstrip("; ")
        )
        return "\n".join(out) + "\n"

    def write(self, directory: Path, gates: Sequence[GateResult] = ()) -> tuple[Path, Path]:
        """Write report.csv and report.json into `directory` (created); their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        csv_path, json_path = directory / "report.csv", directory / "report.json"
        csv_path.write_text(self.csv())
        json_path.write_text(self.json(gates))
        return csv_path, json_path


def _fmt(value: float | None, unit: str = "ms") -> str:
    if value is None:
        return "-"
    if unit == "ms" and value >= 10_000:
        return f"{value / 1000:.1f}s"
    if value >= 100:
        return f"{value:.0f}{unit}"
    return f"{value:.2f}{unit}" if value < 10 else f"{value:.1f}{unit}"


# --- gates -----------------------------------------------------------------------------------------


class GateError(ValueError):
    """A gate expression that cannot be read."""


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_DURATION_METRICS = {
    "p50": "p50_ms",
    "p95": "p95_ms",
    "p99": "p99_ms",
    "p999": "p999_ms",
    "p99.9": "p999_ms",
    "max": "max_ms",
    "mean": "mean_ms",
    "first_event_p50": "first_event_p50_ms",
    "first_event_p99": "first_event_p99_ms",
}
_COUNT_METRICS = {
    "error_rate": "error_rate",
    "errors": "errors",
    "calls": "calls",
    "ok": "ok",
    "throughput": "throughput_per_s",
}
_UNITS_MS = {"": 1.0, "ms": 1.0, "us": 0.001, "µs": 0.001, "s": 1000.0}
_GATE = re.compile(
    r"^(?:(?P<scope>[^<>=]+):)?(?P<metric>[a-z0-9_.]+)\s*(?P<op><=|>=|<|>)\s*(?P<value>[0-9.]+)\s*(?P<unit>[a-zµ%]*)$"
)


@dataclass(frozen=True)
class Gate:
    text: str
    kind: str | None  # None: RPC rows by default; "all": every row
    name: str | None
    column: str
    op: str
    threshold: float

    def matches(self, row: dict[str, Any]) -> bool:
        if self.kind == "all":
            return True
        if row["kind"] != (self.kind or "rpc"):
            return False
        return self.name is None or row["name"] == self.name


def parse_gate(text: str) -> Gate:
    """`[SCOPE:]METRIC OP VALUE[UNIT]`, SCOPE one of `rpc`, `step`, `all`, `rpc:NAME`, `step:NAME`."""
    match = _GATE.match(text.strip())
    if match is None:
        raise GateError(f"gate {text!r}: expected [SCOPE:]METRIC<VALUE[UNIT], e.g. p99<100ms or step:settle:p95<2s")
    scope, metric, op, raw_value, unit = match.group("scope", "metric", "op", "value", "unit")
    try:
        value = float(raw_value)
    except ValueError:
        raise GateError(f"gate {text!r}: {raw_value!r} is not a number") from None
    kind: str | None = None
    name: str | None = None
    if scope:
        head, _, rest = scope.partition(":")
        if head not in ("rpc", "step", "all"):
            raise GateError(f"gate {text!r}: scope must start with rpc, step or all, not {head!r}")
        if head == "all" and rest:
            raise GateError(f"gate {text!r}: `all` takes no name")
        kind, name = head, rest or None
    if metric in _DURATION_METRICS:
        if unit not in _UNITS_MS:
            raise GateError(f"gate {text!r}: duration unit must be us, ms or s, not {unit!r}")
        return Gate(text, kind, name, _DURATION_METRICS[metric], op, value * _UNITS_MS[unit])
    if metric in _COUNT_METRICS:
        if metric == "error_rate" and unit == "%":
            value /= 100
        elif unit:
            raise GateError(f"gate {text!r}: {metric} takes no unit {unit!r}")
        return Gate(text, kind, name, _COUNT_METRICS[metric], op, value)
    known = ", ".join([*_DURATION_METRICS, *_COUNT_METRICS])
    raise GateError(f"gate {text!r}: unknown metric {metric!r}; one of {known}")


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    passed: bool
    failures: list[str]


def check_gate(gate: Gate, rows: Iterable[dict[str, Any]]) -> GateResult:
    failures: list[str] = []
    checked = 0
    for row in rows:
        if not gate.matches(row):
            continue
        value = row[gate.column]
        if value is None:
            if gate.name is not None:
                failures.append(f"{row['kind']}:{row['name']}: no {gate.column} (no successful call)")
            continue
        checked += 1
        if not _OPS[gate.op](float(value), gate.threshold):
            failures.append(f"{row['kind']}:{row['name']}: {gate.column}={value} fails {gate.op} {gate.threshold:g}")
    if checked == 0 and not failures:
        failures.append(f"no row with data matches {gate.text!r}")
    return GateResult(gate, not failures, failures)


def max_error_rate_gate(rate: float) -> Gate:
    """`--max-error-rate`: the run's RPC error rate over every call (a summary-level gate)."""
    return Gate(f"rpc_error_rate<={rate:g}", "summary", None, "rpc_error_rate", "<=", rate)


def check_gates(report: Report, gates: Sequence[Gate]) -> list[GateResult]:
    results: list[GateResult] = []
    for gate in gates:
        if gate.kind == "summary":
            value = float(report.summary[gate.column])
            passed = _OPS[gate.op](value, gate.threshold) and report.summary["rpc_calls"] > 0
            calls = report.summary["rpc_calls"]
            failures = [] if passed else [f"{gate.column}={value} (of {calls} calls) fails {gate.text}"]
            results.append(GateResult(gate, passed, failures))
        else:
            results.append(check_gate(gate, report.rows))
    return results

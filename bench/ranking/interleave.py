"""``python -m bench.ranking.interleave --baseline DIR [--rounds N] [--out FILE] -- ARGS``: the
ranking benchmark (``python -m bench.ranking ARGS``) of another checkout (DIR, with its own
``.venv``: the baseline) and of this one, run one after the other, alternating (baseline, this,
baseline, this, ...), so that the shared machine's load falls on both alike. Prints each run's
``bench:`` lines prefixed with its label and round, the load average before each run, then per
figure both medians and their ratio (this / baseline) as ``bench: NAME_ratio VALUE ratio``, and the
batch path's figures (``record_matches_*``, which only this checkout prints) against the baseline's
single-call ones (``record_match_*``): ``bench: record_matches_vs_baseline_NAME_ratio``. With
``--out FILE`` the same lines are written to FILE too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The figures compared (for times and CPU less is better, for rates more).
COMPARED = (
    "record_match_4p_per_s",
    "record_match_4p_p50",
    "record_match_4p_p99",
    "record_match_4p_server_cpu_per_match",
    "record_match_4p_per_core_s",
    "record_match_4p_postgres_cpu_per_match",
    "record_match_4p_sql_round_trips_per_match",
    "record_match_4p_paced_p50",
    "record_match_4p_paced_p99",
    "record_match_replayed_per_s",
    "get_player_per_s_baseline",
)
#: Batch figures of this checkout -> the baseline's single-call figure they replace.
BATCH_AGAINST = {
    "record_matches_4p_per_s": "record_match_4p_per_s",
    "record_matches_4p_server_cpu_per_match": "record_match_4p_server_cpu_per_match",
    "record_matches_4p_per_core_s": "record_match_4p_per_core_s",
    "record_matches_4p_postgres_cpu_per_match": "record_match_4p_postgres_cpu_per_match",
    "record_matches_4p_paced_p99": "record_match_4p_paced_p99",
}


def run(root: Path, args: list[str]) -> dict[str, float]:
    """One benchmark run in checkout `root`: its figures by name (its lines echoed)."""
    completed = subprocess.run(
        [str(root / ".venv" / "bin" / "python"), "-m", "bench.ranking", *args],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, check=False,
    )
    figures: dict[str, float] = {}
    for line in completed.stdout.splitlines():
        if line.startswith("bench: "):
            _, name, value, *_ = line.split()
            figures[name] = float(value)
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-3000:] + completed.stderr[-3000:])
        raise SystemExit(f"the benchmark failed in {root} (exit {completed.returncode})")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ranking.interleave")
    parser.add_argument("--baseline", type=Path, required=True, help="the baseline checkout (with .venv)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then python -m bench.ranking's options")
    options = parser.parse_args()
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    say(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC: python -m bench.ranking {' '.join(args)}; "
        f"baseline {options.baseline}, new {ROOT}")
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "new": []}
    for round_ in range(1, options.rounds + 1):
        for label, root in (("baseline", options.baseline.resolve()), ("new", ROOT)):
            load = os.getloadavg()
            started = time.strftime("%H:%M:%S", time.gmtime())
            figures = run(root, args)
            say(f"# {label} round {round_}: started {started} UTC, load average {load[0]:.2f} {load[1]:.2f} "
                f"{load[2]:.2f}")
            for name, value in figures.items():
                say(f"{label}-{round_} {name} {value}")
            runs[label].append(figures)

    def median(label: str, name: str) -> float | None:
        values = [figures[name] for figures in runs[label] if name in figures]
        return statistics.median(values) if values else None

    for name in COMPARED:
        base, new = median("baseline", name), median("new", name)
        if base is None or new is None or base == 0:
            continue
        say(f"bench: {name}_baseline {base:.3f} median")
        say(f"bench: {name}_new {new:.3f} median")
        say(f"bench: {name}_ratio {new / base:.3f} ratio")
    for name, against in BATCH_AGAINST.items():
        new, base = median("new", name), median("baseline", against)
        if base is None or new is None or base == 0:
            continue
        say(f"bench: {name}_new {new:.3f} median")
        say(f"bench: record_matches_vs_baseline_{against}_ratio {new / base:.3f} ratio")
    if options.out is not None:
        options.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""``python -m bench.ranking``: the options, then the two parts (bench/ranking/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import os

from bench.ranking.accuracy import bench_accuracy, heuristic_available
from bench.ranking.scale import bench_database

DEFAULT_URL = os.environ.get("BURACO_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ranking")
    parser.add_argument("--players", type=int, default=1_000_000)
    parser.add_argument("--selfplay", type=int, default=1600)
    parser.add_argument("--record", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=6, help="seed of the self-play matches")
    parser.add_argument("--postgres", default=DEFAULT_URL)
    parser.add_argument("--skip-selfplay", action="store_true")
    parser.add_argument("--skip-database", action="store_true")
    parser.add_argument("--skip-reads", action="store_true", help="at scale, only RecordMatch (no leaderboard reads)")
    parser.add_argument("--paced", type=float, default=50.0, help="RecordMatch's open-loop rate, matches/s")
    parser.add_argument("--batch-records", type=int, default=50, help="records per RecordMatches call")
    parser.add_argument("--batch-callers", type=int, default=4, help="RecordMatches calls at once")
    args = parser.parse_args()
    if not args.skip_selfplay:
        if not heuristic_available():
            print("# the heuristic bot is not available: strengths come from the weakened random bot", flush=True)
        bench_accuracy(args.selfplay, args.seed)
    if not args.skip_database:
        asyncio.run(bench_database(
            args.postgres, args.players, args.record, reads=not args.skip_reads, paced_rate=args.paced,
            batch_records=args.batch_records, batch_callers=args.batch_callers,
        ))


if __name__ == "__main__":
    main()

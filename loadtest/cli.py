"""`python -m loadtest` (`make loadtest`): drive simulated players against a running suite.

    python -m loadtest --players 40 --ramp 10 --duration 60 --fail-if 'p99<100ms' --out var/loadtest
    python -m loadtest --scenario backend --players 200 --processes 2 --journeys 3
    python -m loadtest --scenario web --gateway http://localhost:8080 --players 40 --think-time 1
    python -m loadtest cleanup --run-id lt1a2b3c4d    # erase what a run created (loadtest.cleanup)

Prints the report (per RPC and per journey step: throughput, p50/p95/p99/p99.9 latency, time to
the first stream event, errors by status code), writes report.csv and report.json into --out, and
exits 1 when a gate (--fail-if, --max-error-rate) fails, 2 on bad arguments or when the suite
cannot be reached. docs/performance.md describes every knob.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from loadtest.client import TargetsError, Tokens, TokensError, needed_identities, parse_targets
from loadtest.recorder import Recorder
from loadtest.report import Gate, GateError, Report, check_gates, max_error_rate_gate, parse_gate
from loadtest.settings import BOTS, SCENARIOS, Settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__.splitlines()[0])
    add = parser.add_argument
    add(
        "--scenario",
        choices=SCENARIOS,
        default="journey",
        help="journey (every service), tables (no matchmaking), backend (wallet, ranking) or web (as browsers,"
        " through the gateway: --gateway)",
    )
    add("--only", choices=("wallet", "ranking"), help="backend scenario: load this service alone")
    add("--players", type=int, default=4, help="simulated players at once (a multiple of --seats; default 4)")
    add("--ramp", type=float, default=0.0, metavar="S", help="seconds over which the players start (default 0)")
    add("--duration", type=float, default=60.0, metavar="S", help="seconds players keep starting journeys (default 60)")
    add("--journeys", type=int, default=0, help="journeys per player, then stop (default 0: until --duration)")
    add("--seats", type=int, choices=(2, 4), default=2, help="players per table (default 2)")
    add("--preset", default="aberto", help="the ruleset preset (default aberto)")
    add("--target-points", type=int, default=0, help="0: express (one hand, default); else 505..3005")
    add("--bet", type=int, default=None, help="stake per player in chips (default 10; 0 with --practice)")
    add("--practice", action="store_true", help="practice tables: no chips, no XP")
    add("--bot", choices=BOTS, default="heuristic", help="how the simulated players play (default heuristic)")
    add("--think-time", type=float, default=0.0, metavar="S", help="mean pause before each game action (default 0)")
    add("--play-stream", action="store_true",
        help="players act on their Play stream (one bidirectional stream each) instead of unary calls")
    add("--targets", help="service=host:port,..., a bare host (each service on its default port there), or one "
        "host:port for every service (an ingress); default: BURACO_<SERVICE>_ADDRESS, localhost")
    add("--tls-ca", default="", metavar="PEM",
        help="CA bundle the services' certificates chain to: TLS (default: plaintext)")
    add("--tls-cert", default="", metavar="PEM", help="client certificate, for services that require one (mutual TLS)")
    add("--tls-key", default="", metavar="PEM", help="the client certificate's private key")
    add("--tls-server-name", default="", metavar="NAME",
        help="the name the certificates carry, when not the host dialled (default: the target's host)")
    add("--gateway", default="", metavar="URL", help="web scenario: the gateway's address (http://host:port)")
    add("--token-key", type=Path, default=None, help="PEM private key tokens are signed with (default: local dev key)")
    add("--tokens", default="", metavar="JSON",
        help="tokens issued beforehand, {\"kind:name\": token} (player:<run id>-<n>, admin:loadtest, ...), "
        "instead of signing them with --token-key (needs --run-id; the run says which identities it needs)")
    add("--audience", default=os.environ.get("BURACO_JWT_AUDIENCE") or "buraco", help="the tokens' audience")
    add("--seed", default="loadtest", help="seed of the bots (backend scenario: and the deals); default loadtest")
    add("--run-id", default="",
        help="prefix of player and match ids, 3 to 40 of [a-z0-9-] (default: random, unique per run); "
        "`python -m loadtest cleanup --run-id` erases the run")
    add("--processes", type=int, default=1, help="driver processes (default 1)")
    add("--connections", type=int, default=4, help="gRPC connections per service per process (default 4)")
    add("--rpc-timeout", type=float, default=10.0, metavar="S", help="deadline of each call (default 10)")
    add("--wait-timeout", type=float, default=60.0, metavar="S", help="longest wait for a match, settlement, ranking")
    add("--drain", type=float, default=120.0, metavar="S", help="after --duration, time left to journeys in flight")
    add("--house-cut", type=int, default=20, metavar="PERCENT", help="the wallet's house cut (default 20)")
    add("--out", type=Path, default=Path("var/loadtest"), help="folder for report.csv and report.json")
    add("--fail-if", action="append", default=[], metavar="GATE", help="e.g. 'p99<100ms', 'step:settle:p95<2s'")
    add("--max-error-rate", type=float, default=None, metavar="FRACTION", help="fail above this RPC error rate")
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    bet = args.bet if args.bet is not None else (0 if args.practice else 10)
    key = args.token_key
    if key is None:
        dev_keys = Path(os.environ.get("BURACO_DEV_KEYS_DIR") or "var/dev-keys")
        key = Path(os.environ.get("BURACO_JWT_PRIVATE_KEY") or dev_keys / "dev-private.pem")
    settings = Settings(
        scenario=args.scenario,
        only=(args.only,) if args.only else ("wallet", "ranking"),
        players=args.players,
        ramp_s=args.ramp,
        duration_s=args.duration,
        journeys=args.journeys,
        seats=args.seats,
        preset=args.preset,
        target_points=args.target_points,
        bet=bet,
        practice=args.practice,
        bot=args.bot,
        think_time_s=args.think_time,
        play_stream=args.play_stream,
        targets=parse_targets(args.targets, os.environ),
        gateway=args.gateway.rstrip("/"),
        token_key=key,
        tokens_file=args.tokens,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_server_name=args.tls_server_name,
        audience=args.audience,
        seed=args.seed,
        run_id=args.run_id or f"lt{uuid.uuid4().hex[:8]}",
        processes=args.processes,
        connections=args.connections,
        rpc_timeout_s=args.rpc_timeout,
        wait_timeout_s=args.wait_timeout,
        drain_s=args.drain,
        house_cut_percent=args.house_cut,
    )
    settings.check()
    return settings


def shards(settings: Settings) -> list[list[int]]:
    """Player indices per process: whole tables each, as even as can be."""
    tables = settings.players // settings.seats
    out: list[list[int]] = []
    first = 0
    for n in range(settings.processes):
        count = (tables // settings.processes + (1 if n < tables % settings.processes else 0)) * settings.seats
        out.append(list(range(first, first + count)))
        first += count
    return out


def event_loop() -> asyncio.AbstractEventLoop:
    """The driver's event loop: uvloop's when installed (requirements.txt), as the game sessions
    run: the driver's CPU goes to gRPC calls, stream messages and the callbacks that schedule
    them, and the less it spends per call, the more players one driver core simulates."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the plain asyncio loop works too
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_shard(settings: Settings, indices: list[int]) -> tuple[Recorder, float]:
    """One driver process's players, run to the end: the scenario's own driver."""
    with asyncio.Runner(loop_factory=event_loop) as runner:
        if settings.scenario == "web":
            from loadtest import web

            return runner.run(web.run_shard(settings, indices))
        from loadtest import journey

        return runner.run(journey.run_shard(settings, indices))


def _run_shard(settings_json: dict[str, Any], indices: list[int]) -> tuple[dict[str, Any], float]:
    """A driver process's work (top level, so the spawn start method can pickle it)."""
    recorder, elapsed = run_shard(Settings.from_json(settings_json), indices)
    return recorder.to_json(), elapsed


def run(settings: Settings) -> tuple[Recorder, float]:
    parts = shards(settings)
    if settings.processes == 1:
        return run_shard(settings, parts[0])
    started = time.perf_counter()
    # spawn: gRPC's C core does not survive fork once a channel exists.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=settings.processes, mp_context=context) as pool:
        futures = [pool.submit(_run_shard, settings.to_json(), part) for part in parts]
        results = [future.result() for future in futures]
    recorder = Recorder.merged(Recorder.from_json(data) for data, _ in results)
    return recorder, max([elapsed for _, elapsed in results] + [0.0]) or time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["cleanup"]:
        from loadtest import cleanup

        return cleanup.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from(args)
        gates: list[Gate] = [parse_gate(text) for text in args.fail_if]
    except (ValueError, TargetsError, GateError) as error:
        parser.error(str(error))  # exits 2
    if args.max_error_rate is not None:
        if not 0 <= args.max_error_rate <= 1:
            parser.error("--max-error-rate is a fraction, 0 to 1")
        gates.append(max_error_rate_gate(args.max_error_rate))
    if args.tokens and not args.run_id:
        parser.error("--tokens needs --run-id: the players' tokens name their ids (<run id>-<n>)")
    if settings.tokens_file:
        needed = needed_identities(settings.scenario, settings.run_id, settings.players,
                                   "wallet" in settings.only or settings.scenario != "backend")
        try:
            Tokens.from_file(Path(settings.tokens_file), needed)
        except TokensError as error:
            print(f"loadtest: {error}; this run needs {', '.join(needed[:3])}, ... ({len(needed)} in all)",
                  file=sys.stderr)
            return 2
    elif settings.scenario != "web" and not settings.token_key.is_file():  # web: players sign in at the gateway
        print(
            f"loadtest: no signing key at {settings.token_key}: start the suite first (`make run` creates "
            "var/dev-keys) or pass --token-key",
            file=sys.stderr,
        )
        return 2
    targets = (f"gateway={settings.gateway}" if settings.scenario == "web"
               else " ".join(f"{k}={v}" for k, v in settings.targets.items()))
    print(
        f"loadtest: run {settings.run_id}, scenario {settings.scenario}, {settings.players} players "
        f"({settings.seats} per table) in {settings.processes} process(es), targets {targets}",
        flush=True,
    )
    recorder, elapsed = run(settings)
    report = Report.build(recorder, elapsed, settings.to_json())
    results = check_gates(report, gates)
    csv_path, json_path = report.write(args.out, results)
    print(report.text(), end="")
    print(f"loadtest: wrote {csv_path} and {json_path}")
    failed = [r for r in results if not r.passed]
    for result in results:
        print(f"gate {'PASS' if result.passed else 'FAIL'}: {result.gate.text}")
        for failure in result.failures:
            print(f"    {failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

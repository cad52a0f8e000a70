"""Ranking benchmark: ``python -m bench.ranking`` (``make bench-ranking``); runs outside CI.

Its two parts are independent: ``accuracy.py`` (1. below) and ``scale.py`` (2.); ``__main__.py``
reads the options and runs them.

Prints one figure per line as ``bench: NAME VALUE UNIT``:

1. The rating model's predictive accuracy on engine self-play. Bot players of five strengths (the
   random-legal bot, made weaker by skipping its melds and additions with a probability: 0, 0.5,
   0.7, 0.8, 0.9; the heuristic bot as a sixth, strongest level when the engine has it) play express
   matches, 2 players and pairs. Ratings are learned match by match per table size, as the service
   does; over the second half of the matches (held out: each is predicted before the model learns
   from it) it reports how often the higher-rated side wins, the log-loss and the Brier score of the
   predicted win probability, next to a coin flip and to an oracle that knows each bot's strength.
   The same for OpenSkill's other models on the same results.
2. At 1,000,000 players on PostgreSQL, in a schema of its own (dropped at the end): players,
   ratings and two all-time leaderboards (XP with many ties; ratings) are loaded with COPY; then
   the p50/p99 of top-100, rank-of-player and players-around-a-player reads (through the
   service's `leaderboards` module, a transaction each, as the service runs them), with a plain
   index count of the entries ahead as the baseline; then RecordMatch of 4-player matches through
   gRPC against the service in a process of its own (``served.py``, which counts the SQL round
   trips and statements it sends): matches per second, p50/p99, the server process's CPU per match
   (client excluded) and the matches per second one core would serve, PostgreSQL's CPU per match,
   with GetPlayer calls per second (and CPU per call) in the same run as the baseline; then the same
   kind of matches through RecordMatches, 50 records per call (as the game-session outbox sends
   them) and 4 calls at once (``record_matches_*``: matches per second, each call's p50/p99, server
   and PostgreSQL CPU per match, SQL per match, and an open-loop p50/p99 in calls of a tenth of the
   paced rate). Ranks are checked against the plain count. ``interleave.py`` runs this benchmark of
   a baseline checkout and of this one alternately and prints the ratios.

Options: ``--players N`` (default 1,000,000), ``--selfplay N`` matches (default 1,600),
``--record N`` matches (default 1,500), ``--seed S`` of the self-play (default 6),
``--postgres URL`` (default BURACO_BENCH_POSTGRES_URL or postgresql://postgres@127.0.0.1:5432/test),
``--skip-selfplay``, ``--skip-database``, ``--skip-reads`` (at scale, RecordMatch only),
``--paced R`` (the open-loop rate, default 50/s), ``--batch-records N`` and ``--batch-callers N``
(RecordMatches: records per call, default 50; calls at once, default 4).
"""

from __future__ import annotations

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)


def emit(name: str, value: float, unit: str, digits: int = 3) -> None:
    print(f"bench: {name} {value:.{digits}f} {unit}", flush=True)


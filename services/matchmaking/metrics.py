"""The matchmaking service's own Prometheus metrics (docs/metrics.md lists them; the dashboard and
the alerts of deploy/ use them).

The queue's gauges are read off the matching loop's last pass (one query over every searching
ticket, which the pass makes anyway), so a scrape costs nothing; with several replicas each one
reports what its own pass saw, and the dashboard takes the largest.
"""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

SERVICE = "matchmaking"


class MatchmakingMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # A registry of its own when none is given (tests): never the process-wide default, on
        # which a second instance would collide.
        registry = registry if registry is not None else CollectorRegistry()
        self.searching = Gauge(
            "buraco_matchmaking_tickets_searching",
            "Tickets searching for a match at this replica's last matching pass.",
            ["service"],
            registry=registry,
        ).labels(SERVICE)
        self.oldest_wait = Gauge(
            "buraco_matchmaking_oldest_wait_seconds",
            "The longest wait among the tickets searching at this replica's last matching pass (0: none).",
            ["service"],
            registry=registry,
        ).labels(SERVICE)
        self.passes = Counter(
            "buraco_matchmaking_passes",
            "Matching passes this replica's loop completed.",
            ["service"],
            registry=registry,
        ).labels(SERVICE)
        self.pass_duration = Histogram(
            "buraco_matchmaking_pass_duration_seconds",
            "Time the matcher took to form tables in one pass (the database reads and writes excluded).",
            ["service"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        ).labels(SERVICE)
        matches = Counter(
            "buraco_matchmaking_matches",
            "Matches by how far their start got: proposed to the players, started (a table exists and "
            "the players were told), failed (compensated: holds released, tickets requeued or failed).",
            ["service", "result"],
            registry=registry,
        )
        self.proposed = matches.labels(SERVICE, "proposed")
        self.started = matches.labels(SERVICE, "started")
        self.failed = matches.labels(SERVICE, "failed")

    def observe_pass(self, waited: Collection[float], matcher_seconds: float) -> None:
        """What one matching pass saw: each searching ticket's wait so far, and the matcher's time."""
        self.searching.set(len(waited))
        self.oldest_wait.set(max(waited, default=0.0))
        self.pass_duration.observe(matcher_seconds)
        self.passes.inc()

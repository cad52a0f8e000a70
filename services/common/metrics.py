"""Prometheus metrics of a service: calls, latency and errors per method and status code.

    buraco_rpc_calls_total{service,method,code}          counter    finished calls
    buraco_rpc_errors_total{service,method,code}         counter    finished calls whose code is not OK
    buraco_rpc_duration_seconds{service,method}          histogram  call latency (a stream: its lifetime)
    buraco_rpc_in_flight{service,method}                 gauge      calls being handled
    buraco_rpc_streams_open{service}                     gauge      open server streams
    buraco_event_loop_lag_seconds{service}               histogram  how late the event loop runs
    buraco_database_connections{service,pool}            gauge      PostgreSQL connections open, by pool
    buraco_database_connection_budget{service,pool}      gauge      the most each pool may open

Each server has its own registry (so several servers can live in one test process), served on
its metrics port at `/metrics`.

The loop lag is the first sign of a replica short of CPU: every call and stream of a replica waits
on its one event loop, so a loop that wakes a timer 50 ms late delays every reply by as much,
while the calls' own durations only show it mixed with the database's. (A replica's tail latency
follows its loop lag as its core fills: docs/game-session.md.)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: seconds between two loop-lag samples: cheap (one timer), and often enough to see short stalls
LAG_INTERVAL = 0.1


class Metrics:
    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "buraco_rpc_calls", "Finished calls.", ["service", "method", "code"], registry=self.registry
        )
        self.errors = Counter(
            "buraco_rpc_errors",
            "Finished calls that did not end OK.",
            ["service", "method", "code"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "buraco_rpc_duration_seconds",
            "Call latency; a stream's lifetime.",
            ["service", "method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "buraco_rpc_in_flight", "Calls being handled.", ["service", "method"], registry=self.registry
        )
        self.streams = Gauge(
            "buraco_rpc_streams_open", "Open server streams.", ["service"], registry=self.registry
        )
        self.loop_lag = Histogram(
            "buraco_event_loop_lag_seconds",
            "How late the event loop ran a timer (sampled): CPU saturation or a blocking call.",
            ["service"],
            buckets=LAG_BUCKETS,
            registry=self.registry,
        ).labels(service)
        self._http: object | None = None
        self.port: int | None = None
        self._children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self._lag_task: asyncio.Task[None] | None = None
        #: loop-lag samples taken (tests wait on it)
        self.lag_samples = 0
        self._lag_sampled = asyncio.Event()

    def watch_database(self, db: Any) -> None:
        """Export `db`'s open connections and budget by pool, read at each scrape."""
        self.registry.register(_DatabaseCollector(self.service, db))

    def observe(self, method: str, code: str, seconds: float) -> None:
        # the labelled children found once per (method, code): `labels()` takes a lock and builds
        # its key at every call, and a game-session replica observes every action of a Play stream
        children = self._children.get((method, code))
        if children is None:
            children = self._children[(method, code)] = (
                self.calls.labels(self.service, method, code),
                self.duration.labels(self.service, method),
                None if code == "OK" else self.errors.labels(self.service, method, code),
            )
        calls, duration, errors = children
        calls.inc()
        if errors is not None:
            errors.inc()
        duration.observe(seconds)

    def watch_loop(self, interval: float = LAG_INTERVAL) -> None:
        """Sample the running loop's lag every `interval` seconds, until `close()`."""
        if self._lag_task is None:
            self._lag_task = asyncio.get_running_loop().create_task(self._watch(interval), name="loop-lag")

    async def _watch(self, interval: float) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, time.perf_counter() - before - interval))
            self.lag_samples += 1
            self._lag_sampled.set()

    async def next_lag_sample(self) -> None:
        """Wait for the loop-lag watcher's next sample."""
        self._lag_sampled.clear()
        await self._lag_sampled.wait()

    def serve(self, host: str, port: int) -> int:
        """Serve `/metrics` on host:port (0: a free port); returns the port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = server
        self.port = int(server.server_port)
        return self.port

    def close(self) -> None:
        if self._lag_task is not None:
            self._lag_task.cancel()
            self._lag_task = None
        server = self._http
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
            self._http = None


class _DatabaseCollector(Collector):
    """A `services.common.db.Database`'s connections, counted when scraped."""

    def __init__(self, service: str, db: Any) -> None:
        self.service = service
        self.db = db

    def collect(self) -> Any:
        open_now = GaugeMetricFamily("buraco_database_connections", "PostgreSQL connections open, by pool.",
                                     labels=["service", "pool"])
        budget = GaugeMetricFamily("buraco_database_connection_budget",
                                   "The most PostgreSQL connections each pool may open.", labels=["service", "pool"])
        for pool, count in self.db.open_connections().items():
            open_now.add_metric([self.service, pool], count)
        for pool, size in self.db.connection_budget().items():
            budget.add_metric([self.service, pool], size)
        yield open_now
        yield budget

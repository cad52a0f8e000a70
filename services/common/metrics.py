"""Prometheus metrics of a service: calls, latency and errors per method and status code.

    buraco_rpc_calls_total{service,method,code}          counter    finished calls
    buraco_rpc_errors_total{service,method,code}         counter    finished calls whose code is not OK
    buraco_rpc_duration_seconds{service,method}          histogram  call latency (a stream: its lifetime)
    buraco_rpc_in_flight{service,method}                 gauge      calls being handled
    buraco_rpc_streams_open{service}                     gauge      open server streams

Each server has its own registry (so several servers can live in one test process), served on
its metrics port at `/metrics`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


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
        self._http: object | None = None
        self.port: int | None = None

    def observe(self, method: str, code: str, seconds: float) -> None:
        self.calls.labels(self.service, method, code).inc()
        if code != "OK":
            self.errors.labels(self.service, method, code).inc()
        self.duration.labels(self.service, method).observe(seconds)

    def serve(self, host: str, port: int) -> int:
        """Serve `/metrics` on host:port (0: a free port); returns the port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._http = server
        self.port = int(server.server_port)
        return self.port

    def close(self) -> None:
        server = self._http
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
            self._http = None

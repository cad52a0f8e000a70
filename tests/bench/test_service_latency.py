"""bench/service_latency.py: the services' histograms read from a `/metrics` page as the services
write it (prometheus_client), streams left out, p99 bounds and shares over a bound exact."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench import service_latency

BUCKETS = (0.01, 0.05, 0.1, 0.25)


def page() -> str:
    registry = CollectorRegistry()
    duration = Histogram("buraco_rpc_duration_seconds", "", ["service", "method"], buckets=BUCKETS, registry=registry)
    lag = Histogram("buraco_event_loop_lag_seconds", "", ["service"], buckets=BUCKETS, registry=registry)
    move = "/buraco.v1.GameSessionService/Play/Discard"
    for _ in range(97):
        duration.labels("game_session", move).observe(0.004)
    for seconds in (0.07, 0.2, 0.2):  # 3 % over 50 ms, 2 % over 100 ms
        duration.labels("game_session", move).observe(seconds)
    duration.labels("game_session", "/buraco.v1.GameSessionService/Play").observe(400.0)  # a stream's lifetime
    lag.labels("game_session").observe(0.002)
    return generate_latest(registry).decode()


def test_moves_are_read_and_streams_left_out() -> None:
    histograms = service_latency.parse(page())
    calls = service_latency.calls(histograms)
    assert [(h.service, h.name) for h in calls] == [("game_session", "/buraco.v1.GameSessionService/Play/Discard")]
    move = calls[0]
    assert move.count == 100
    assert move.quantile_bound(0.99) == 0.25  # the 99th observation is a 200 ms one
    assert move.quantile_bound(0.97) == 0.01
    assert move.share_over(0.05) == pytest.approx(0.03)
    assert move.share_over(0.1) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="not a bound"):
        move.share_over(0.2)
    (loop,) = service_latency.loops(histograms)
    assert loop.count == 1 and loop.quantile_bound(0.99) == 0.01


def test_a_quantile_in_the_open_bucket_is_infinite() -> None:
    histogram = service_latency.Histogram("s", "m", {0.1: 0.0, math.inf: 5.0})
    assert histogram.quantile_bound(0.99) == math.inf
    assert math.isnan(service_latency.Histogram("s", "m").quantile_bound(0.99))

"""What the services themselves measured of a run: each unary call's (and each `Play` move's)
latency histogram and each event loop's lag, read from their Prometheus `/metrics`.

A driver on the same machine sees a call's latency plus its own queueing (its event loop, its
share of the cores); the service's histogram (`buraco_rpc_duration_seconds`, from the moment
its handler takes the call up to its answer; a call's wait in grpc's own queue before that, and
the network, are not in it) tells how much of a tail is the service's. The histograms'
buckets are coarse (10, 25, 50, 100, 250 ms...), so a p99 is given as the bucket bound it falls
under, and the share of calls over a bound exactly.
"""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from google.protobuf import descriptor as descriptor_module
from prometheus_client.parser import text_string_to_metric_families

from buraco.v1 import game_session_pb2, matchmaking_pb2, ranking_pb2, tournament_pb2, wallet_pb2

DURATION = "buraco_rpc_duration_seconds"
LOOP_LAG = "buraco_event_loop_lag_seconds"


def _streaming_methods() -> frozenset[str]:
    """The full names of the streaming RPCs: their histograms hold a stream's lifetime."""
    names: set[str] = set()
    for module in (game_session_pb2, matchmaking_pb2, ranking_pb2, tournament_pb2, wallet_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                assert isinstance(method, descriptor_module.MethodDescriptor)
                if method.server_streaming or method.client_streaming:
                    names.add(f"/{service.full_name}/{method.name}")
    return frozenset(names)


STREAMING = _streaming_methods()


@dataclass
class Histogram:
    """One labelled histogram: cumulative counts per upper bound (seconds), +Inf last."""

    service: str
    name: str  # the method, or "event loop"
    buckets: dict[float, float] = field(default_factory=dict)

    @property
    def count(self) -> float:
        return self.buckets.get(math.inf, 0.0)

    def quantile_bound(self, share: float) -> float:
        """The smallest bucket bound (seconds) that at least `share` of the observations are under
        (inf when the quantile lies in the last, open bucket; nan with no observation)."""
        if self.count == 0:
            return math.nan
        for bound in sorted(self.buckets):
            if self.buckets[bound] >= share * self.count:
                return bound
        return math.inf

    def share_over(self, bound: float) -> float:
        """The share of observations over `bound` seconds, which must be a bucket's bound."""
        if bound not in self.buckets:
            raise ValueError(f"{bound} s is not a bound of {self.name}'s buckets: {sorted(self.buckets)}")
        return 1.0 - self.buckets[bound] / self.count if self.count else math.nan


def parse(text: str) -> list[Histogram]:
    """The unary calls' duration histograms and the event loop's lag histogram in one `/metrics` page."""
    found: dict[tuple[str, str], Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in (DURATION, LOOP_LAG):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            service = sample.labels.get("service", "")
            name = sample.labels.get("method", "") if family.name == DURATION else "event loop"
            if name in STREAMING:
                continue
            histogram = found.setdefault((service, name), Histogram(service, name))
            bound = float(sample.labels["le"])
            histogram.buckets[bound] = histogram.buckets.get(bound, 0.0) + sample.value
    return list(found.values())


def scrape(ports: Mapping[str, int], host: str = "127.0.0.1", timeout: float = 10.0) -> list[Histogram]:
    """Every histogram of the services whose metrics listen at `ports` (service -> port)."""
    histograms: list[Histogram] = []
    for port in ports.values():
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as response:
            histograms += parse(response.read().decode())
    return histograms


def calls(histograms: Iterable[Histogram]) -> list[Histogram]:
    return [h for h in histograms if h.name != "event loop" and h.count > 0]


def loops(histograms: Iterable[Histogram]) -> list[Histogram]:
    return [h for h in histograms if h.name == "event loop" and h.count > 0]

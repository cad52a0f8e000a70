"""The latency recorder: known inputs give known percentiles; merging and JSON lose nothing."""

from __future__ import annotations

import math
import random

import pytest

from loadtest.recorder import SUB_BITS, Histogram, Recorder, bucket_bounds, bucket_of


def exact_percentile(values: list[int], percent: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(round(percent * len(ordered) / 100, 9))) - 1]


def test_values_below_two_milliseconds_are_exact() -> None:
    histogram = Histogram()
    for us in range(1, 1001):
        histogram.record_us(us)
    assert histogram.percentile_us(50) == 500
    assert histogram.percentile_us(95) == 950
    assert histogram.percentile_us(99) == 990
    assert histogram.percentile_us(99.9) == 999
    assert histogram.percentile_us(100) == 1000
    assert histogram.percentile_us(0) == 1
    assert (histogram.count, histogram.min_us, histogram.max_us) == (1000, 1, 1000)
    assert histogram.mean_us == 500.5


def test_seconds_are_recorded_in_microseconds() -> None:
    histogram = Histogram()
    histogram.record_seconds(0.0015)
    histogram.record_seconds(0.25)
    assert histogram.percentile_us(50) == 1500
    assert histogram.max_us == 250_000
    assert histogram.percentile_us(100) == 250_000  # capped at the largest value recorded


def test_bucket_holds_its_value_and_is_narrow() -> None:
    for value in [0, 1, 2047, 2048, 2049, 4095, 4096, 123_456, 10**9, 2**40 + 12345]:
        low, high = bucket_bounds(bucket_of(value))
        assert low <= value <= high
        assert high - low <= max(0, value) / 2 ** (SUB_BITS - 1)


def test_percentiles_within_a_tenth_of_a_percent_of_exact() -> None:
    rng = random.Random(7)
    values = [int(rng.lognormvariate(9, 1.5)) for _ in range(20_000)]  # about 8 ms, long tail
    histogram = Histogram()
    for value in values:
        histogram.record_us(value)
    for percent in (50, 90, 95, 99, 99.9, 99.99):
        exact = exact_percentile(values, percent)
        got = histogram.percentile_us(percent)
        assert got is not None
        assert exact <= got <= exact * 1.001 + 1, (percent, exact, got)


def test_merge_equals_recording_everything_in_one() -> None:
    rng = random.Random(3)
    values = [rng.randrange(1, 5_000_000) for _ in range(3000)]
    whole, first, second = Histogram(), Histogram(), Histogram()
    for i, value in enumerate(values):
        whole.record_us(value)
        (first if i % 3 else second).record_us(value)
    first.merge(second)
    assert first == whole
    empty = Histogram()
    empty.merge(whole)
    assert empty == whole


def test_empty_histogram_has_no_percentile_and_bad_percent_is_refused() -> None:
    histogram = Histogram()
    assert histogram.percentile_us(99) is None
    assert histogram.mean_us is None
    with pytest.raises(ValueError, match=r"not in 0\.\.100"):
        histogram.percentile_us(101)


def test_recorder_series_json_round_trip_and_merge() -> None:
    recorder = Recorder()
    recorder.ok("rpc", "wallet.GetAccount", 0.004)
    recorder.ok("rpc", "wallet.GetAccount", 0.006)
    recorder.error("rpc", "wallet.GetAccount", "UNAVAILABLE")
    recorder.error("step", "queue", "UNIMPLEMENTED")
    recorder.first_event("rpc", "matchmaking.WatchTicket", 0.02)
    recorder.counters["journeys_started"] += 2
    copy = Recorder.from_json(recorder.to_json())
    assert copy == recorder
    series = copy.get("rpc", "wallet.GetAccount")
    assert (series.ok, series.error_count, series.calls) == (2, 1, 3)
    assert [(s.kind, s.name) for s in copy] == [
        ("rpc", "matchmaking.WatchTicket"),
        ("rpc", "wallet.GetAccount"),
        ("step", "queue"),
    ]
    total = Recorder.merged([recorder, copy])
    assert total.get("rpc", "wallet.GetAccount").calls == 6
    assert total.get("step", "queue").errors == {"UNIMPLEMENTED": 2}
    assert total.counters["journeys_started"] == 4
    with pytest.raises(ValueError, match="series kind"):
        recorder.get("thing", "x")

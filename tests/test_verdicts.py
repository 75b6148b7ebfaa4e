"""labkit.verdicts: the self-checks every point carries.  The table holds rows as
measure.point fills them; the two runs at the end provoke the failures for real (a server
that cannot keep up with the rate offered, a run too short for its tail) and read them
back from the rows measure.point wrote."""

import pytest

from labkit import verdicts


def spread(low_us: float, samples: int) -> list:
    """A half's histogram as the load generator reports it ([upper bound µs, count]): `samples`
    latencies spread evenly over 20 buckets from `low_us` up (1% apart)."""
    return [[round(low_us * 1.01 ** i, 3), samples // 20] for i in range(1, 21)]


VERDICTS = [
    # the row's measured columns -> the checks it fails (their names)
    ({"rate": 3000, "completed_rps": 2990.0}, set()),                        # within 2%
    ({"rate": 3000, "completed_rps": 2400.0}, {"rate_not_reached"}),          # the server fell behind
    ({"rate": 3000, "completed_rps": 3200.0}, {"rate_not_reached"}),          # more than offered: not the load asked
    ({"rate": None, "completed_rps": 2400.0}, set()),                         # a closed loop offers no rate
    ({"client_saturated": True}, {"generator_saturated"}),                    # an over-driven generator
    ({"lat_p99_confidence": 0.97, "lat_p999_confidence": 0.61, "lat_samples": 1000}, {"too_few_for_p999"}),
    ({"lat_p50_confidence": float("nan")}, set()),                            # nothing measured: nothing judged
    # the run's two halves: the same spread agrees; a median three times higher later drifted;
    # 20 requests a half cannot bound a p99, and their medians still agree
    ({"lat_histogram_halves": [spread(100, 2000), spread(100, 2000)]}, set()),
    ({"lat_histogram_halves": [spread(100, 2000), spread(300, 2000)]}, {"not_steady"}),
    ({"lat_histogram_halves": [spread(100, 20), spread(100, 20)]}, set()),
    # 20% apart, their intervals far apart too: a difference no figure turns on
    ({"lat_histogram_halves": [spread(100, 2000), spread(120, 2000)]}, set()),
    ({"lat_histogram_halves": [spread(100, 2000), []]}, set()),               # a half with nothing: no comparison
]


@pytest.mark.parametrize("row, failing", VERDICTS)
def test_each_self_check_fails_where_its_quantity_says_and_only_there(row, failing):
    judged = verdicts.judge(row)
    assert set(judged) == failing
    assert all(isinstance(why, str) and why for why in judged.values())


def test_a_reason_names_the_numbers():
    judged = verdicts.judge({"rate": 3000, "completed_rps": 2400.0, "lat_p999_confidence": 0.61, "lat_samples": 1000})
    assert judged["rate_not_reached"] == "offered rate not reached: completed 2,400/s of the 3,000/s offered (80%)"
    assert judged["too_few_for_p999"] == "too few requests for p999: 1,000 bound it with 61% confidence, not 95%"
    assert verdicts.title(judged["too_few_for_p999"]) == "too few requests for p999"
    drift = verdicts.judge({"lat_histogram_halves": [spread(100, 2000), spread(300, 2000)]})["not_steady"]
    assert drift.startswith("not steady: p50 was 11") and "in its second (95% intervals)" in drift, drift


def test_a_metric_hears_only_the_verdicts_that_bear_on_it():
    judged = {"rate_not_reached": "r", "too_few_for_p999": "t9", "too_few_for_p99": "t"}
    assert verdicts.relevant(judged, "lat_p999_us") == {"rate_not_reached": "r", "too_few_for_p999": "t9"}
    assert verdicts.relevant(judged, "throughput_rps") == {"rate_not_reached": "r"}


@pytest.mark.measuring
def test_a_rate_the_server_cannot_keep_up_with_and_a_run_too_short_for_its_tail_are_flagged():
    from labkit import measure
    from labkit.procs import LoadSpec, Pinning, ServerSpec

    pinning = Pinning.resolve(None, None, allow_overlap=True)
    # 1 ms a request is 1,000 requests/s at most; 3,000/s offered for half a second
    over = LoadSpec(10, 1, "spin", {"rate": 3000, "duration": 0.5, "spin-us": 1000, "engine": "events"}, timeout=5)
    row = measure.point(measure.Run(ServerSpec("epoll", "spin"), over, pinning))
    assert "rate_not_reached" in row["verdicts"], (row["verdicts"], row["completed_rps"], row["error"])
    assert row["completed_rps"] < 0.5 * 3000
    # ... and its queue grew all along: its second half waited longer than its first
    assert "not_steady" in row["verdicts"], row["verdicts"]
    # 50 requests: no interval can hold p99 or p99.9 at 95%, however fast the server
    short = LoadSpec(1, 50, "spin", {"engine": "events"}, timeout=5)
    row = measure.point(measure.Run(ServerSpec("epoll", "spin"), short, pinning))
    assert row["status"] == "ok", row["error"]
    assert {"too_few_for_p99", "too_few_for_p999"} <= set(row["verdicts"]) and "too_few_for_p50" not in row["verdicts"]

"""labkit.verdicts: the self-checks every point carries.  The table holds rows as
measure.point fills them; the two runs at the end provoke the failures for real (a server
that cannot keep up with the rate offered, a run too short for its tail) and read them
back from the rows measure.point wrote."""

import pytest

from labkit import verdicts


def batched(first: float, second: float, m: int = 500, wobble: float = 0.02) -> dict:
    """A run's 20 batches as the load generator reports them: each of `m` samples, the first
    ten with a share `first` at or below the run's median, the last ten `second` (each batch
    `wobble` off its half's share, a pair of batches up, the next down: the batches' own noise)."""
    shares = [(first if b < 10 else second) + (wobble if b // 2 % 2 else -wobble) for b in range(20)]
    return {"lat_batch_below": {"p50": [round(share * m) for share in shares]},
            "lat_batches": [[m, 100.0] for _ in range(20)]}


VERDICTS = [
    # the row's measured columns -> the checks it fails (their names)
    ({"rate": 3000, "completed_rps": 2990.0}, set()),                        # within 2% (no schedule's count)
    ({"rate": 3000, "completed_rps": 2400.0}, {"rate_not_reached"}),          # the server fell behind
    ({"rate": 3000, "completed_rps": 3200.0}, {"rate_not_reached"}),          # more than offered: not the load asked
    ({"rate": None, "completed_rps": 2400.0}, set()),                         # a closed loop offers no rate
    # the schedule's own count: a Poisson schedule's 2,950 due in the window, all done
    ({"rate": 3000, "completed_rps": 2950.0, "requests_due_in_window": 2950, "requests_measured": 2950}, set()),
    ({"rate": 3000, "requests_due_in_window": 2950, "requests_measured": 2000}, {"rate_not_reached"}),
    ({"client_saturated": True}, {"generator_saturated"}),                    # an over-driven generator
    ({"lat_p99_confidence": 0.97, "lat_p999_confidence": 0.61, "lat_samples": 1000}, {"too_few_for_p999"}),
    ({"lat_p50_confidence": float("nan")}, set()),                            # nothing measured: nothing judged
    # the run's two halves: the same shares agree; 80% of the first half at or below the run's
    # median and 20% of the second drifted; 10 points apart within the batches' noise do not
    (batched(0.5, 0.5), set()),
    (batched(0.8, 0.2), {"not_steady"}),
    (batched(0.55, 0.45, wobble=0.15), set()),
    ({**batched(0.8, 0.2), "lat_batch_below": {}}, set()),                   # no batches: no comparison
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
    drift = verdicts.judge({**batched(0.8, 0.2), "lat_p50_us": 812.0})["not_steady"]
    assert drift == ("not steady: 80% of the first half's requests were at or below the run's median (812 µs), "
                     "20% of the second half's (the run's batches allow about 50% each)"), drift


def test_a_metric_hears_only_the_verdicts_that_bear_on_it():
    judged = {"rate_not_reached": "r", "too_few_for_p999": "t9", "too_few_for_p99": "t"}
    assert verdicts.relevant(judged, "lat_p999_us") == {"rate_not_reached": "r", "too_few_for_p999": "t9"}
    assert verdicts.relevant(judged, "throughput_rps") == {"rate_not_reached": "r"}


@pytest.mark.measuring
def test_overload_and_short_runs_flagged():
    """A rate the server cannot keep up with and a run too short for its tail are flagged."""
    from labkit import measure
    from labkit.procs import LoadSpec, Pinning, ServerSpec

    pinning = Pinning.resolve(None, None, allow_overlap=True)
    # 1 ms a request is 1,000 requests/s at most; 3,000/s offered for half a second
    over = LoadSpec(10, 1, "spin", {"rate": 3000, "duration": 0.5, "spin-us": 1000, "engine": "events"}, timeout=5)
    row = measure.point(measure.Run(ServerSpec("epoll", "spin"), over, pinning))
    assert "rate_not_reached" in row["verdicts"], (row["verdicts"], row["completed_rps"], row["error"])
    assert row["completed_rps"] < 0.5 * 3000
    # every request due was answered in the end (the window ran on past the schedule): the
    # completed rate is what says the server fell behind
    assert row["requests_measured"] == row["requests_due_in_window"] == 1500
    # 50 requests: no interval can hold p99 or p99.9 at 95%, however fast the server
    short = LoadSpec(1, 50, "spin", {"engine": "events"}, timeout=5)
    row = measure.point(measure.Run(ServerSpec("epoll", "spin"), short, pinning))
    assert row["status"] == "ok", row["error"]
    assert {"too_few_for_p99", "too_few_for_p999"} <= set(row["verdicts"])
    assert row["lat_p99_low_us"] != row["lat_p99_low_us"]  # no interval: NaN, never one labelled 95%

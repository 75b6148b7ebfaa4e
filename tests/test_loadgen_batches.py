"""What the load generator reports for a queue's intervals and self-checks
(csrc/loadgen/batches.c): the percentiles of consecutive batches of the plan at three
levels, the schedule's own count of exchanges due in the measured window, and how late the
generator itself started the exchanges it could start on time.

Counts are exact: the plan's batches are fixed before the run (exchange g of planned N in
batch g x 20 / N), and the count due in the window is held against the schedule computed
here (labkit.schedule) from the window the generator reports.  Latencies are only bounded
where the service bounds them: the spin service answers no sooner than the time asked.
"""

import pytest

import serverproc
from labkit import schedule
from test_loadgen import ENGINES, Loadgen, build_loadgen, run_loadgen, serve_spin, server  # noqa: F401 (fixture)

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

LEVELS = {"20": 20, "10": 10, "5": 5}
PRECISION = 1 / 256  # a histogram percentile's relative error (histogram.h)
SPIN_US = 200


@pytest.fixture(scope="module", params=ENGINES)
def loadgen(request):
    return Loadgen(build_loadgen(), request.param)


@pytest.fixture(scope="module")
def events():
    return Loadgen(build_loadgen(), "events")


def assert_between(value, values, what):
    low, high = min(values), max(values)
    assert low * (1 - PRECISION) <= value <= high * (1 + PRECISION), f"{what}: {value} outside {low}..{high}"


def test_batch_quantiles_count_the_plan_and_merge_level_by_level(loadgen):
    """4 clients x 50 SPIN 200 us on the epoll server: 200 exchanges, 10 in each of 20 batches,
    20 in each of 10, 40 in each of 5; each level's batch is its finer batches merged; every
    percentile of every batch is at least the 200 us the server spun, in order, and at most the
    run's longest latency."""
    with serverproc.running("epoll", service="spin") as srv:
        code, report, err = run_loadgen(loadgen, "--port", srv.port, "--clients", 4, "--requests", 50,
                                        "--service", "spin", "--spin-us", SPIN_US)
    assert code == 0, err
    levels, whole = report["latency_batch_quantiles"], report["latency_us"]
    assert levels.keys() == LEVELS.keys()
    for name, k in LEVELS.items():
        batches = levels[name]
        assert [samples for samples, *_ in batches] == [200 // k] * k
        assert sum(samples for samples, *_ in batches) == whole["samples"] == 200
        for _, p50, p90, p99, p999 in batches:
            assert SPIN_US <= p50 <= p90 <= p99 <= p999 <= whole["max"]
    for coarse, fine in (("10", "20"), ("5", "10")):
        for i, merged in enumerate(levels[coarse]):
            parts = levels[fine][2 * i:2 * i + 2]
            assert merged[0] == sum(part[0] for part in parts)
            for column in range(1, 5):  # the merge's percentile lies between its parts' own
                assert_between(merged[column], [part[column] for part in parts], f"{coarse}[{i}] column {column}")
    assert_between(whole["p50"], [p50 for _, p50, *_ in levels["5"]], "the run's p50 against the batches'")
    # closed loop: nothing is due on a schedule, and the generator is never late for one
    assert report["requests_measured"] == report["requests_ok"] == 200
    assert report["requests_due_in_window"] is None and report["measured_window_ns"] is None
    assert report["send_lateness_us"] is None


def test_a_batch_with_no_sample_has_null_percentiles(loadgen, server):
    """One client, 3 exchanges: batches 0, 6 and 13 of 20 (g x 20 / 3) hold one each; the rest
    are [0, null ...]; a batch of one sample has it as every percentile."""
    srv = server(serve_spin)
    code, report, err = run_loadgen(loadgen, "--port", srv.port, "--clients", 1, "--requests", 3,
                                    "--service", "spin")
    assert code == 0, err
    levels = report["latency_batch_quantiles"]
    held = {"20": (0, 6, 13), "10": (0, 3, 6), "5": (0, 1, 3)}
    for name, k in LEVELS.items():
        for i, (samples, *percentiles) in enumerate(levels[name]):
            if i in held[name]:
                assert samples == 1 and len(set(percentiles)) == 1 and percentiles[0] > 0
            else:
                assert (samples, percentiles) == (0, [None] * 4)
    assert max(levels["20"][i][1] for i in held["20"]) == report["latency_us"]["max"]


@pytest.mark.parametrize("arrivals", ["poisson", "even"])
def test_requests_due_in_the_window_are_the_schedules_own(events, server, arrivals):
    """Open loop, 1,000/s for 1 s with a 0.2 s warm-up, to a server that answers at once: the
    count due in the window is the schedule's (labkit.schedule) between the bounds reported;
    a server that keeps up completes exactly that many; the generator's own lateness is
    measured for the exchanges whose connection was free when they fell due."""
    srv = server(serve_spin)
    code, report, err = run_loadgen(events, "--port", srv.port, "--clients", 4, "--service", "spin",
                                    "--rate", 1000, "--duration", 1, "--arrivals", arrivals, "--seed", 5,
                                    "--warmup", "0.2s")
    assert code == 0, err
    start, end = report["measured_window_ns"]
    assert start == 200_000_000 and (end - start) / 1e9 == pytest.approx(report["measured_window_s"], abs=1e-9)
    due = schedule.due_times_ns(arrivals, 1000, 1000, seed=5)
    assert report["requests_due_in_window"] == sum(start <= at <= end for at in due)
    assert report["requests_ok"] == report["requests_planned"] == 1000  # it kept up: every one answered
    assert report["requests_measured"] == report["requests_due_in_window"] == sum(at >= start for at in due)
    lateness = report["send_lateness_us"]
    assert 0 < lateness["samples"] <= report["requests_sent"]
    assert 0 <= lateness["p50"] <= lateness["p99"] <= lateness["max"]


def test_a_server_that_cannot_keep_up_falls_short_of_the_due_count(events):
    """2,000/s to a server that spins 2 ms a request (at most 500/s): over the window the
    schedule had far more exchanges due than the server completed."""
    with serverproc.running("epoll", service="spin") as srv:
        code, report, err = run_loadgen(events, "--port", srv.port, "--clients", 8, "--service", "spin",
                                        "--spin-us", 2000, "--rate", 2000, "--duration", 1, "--timeout", 0.3)
    assert code == 1, err  # exchanges still due at the deadline were never sent
    assert report["requests_not_sent"] > 0
    # completed by the deadline (1.3 s) at 500/s at most: 650; due by the last reply: about 2,000
    assert report["requests_measured"] <= 650
    assert report["requests_due_in_window"] >= 2 * report["requests_measured"], report

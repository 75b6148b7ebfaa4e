"""What the load generator reports for a queue's intervals and self-checks
(csrc/loadgen/batches.c): 20 consecutive batches of the plan's measured part, their counts
at or below the run's percentiles, the schedule's own count of exchanges due in the measured window, and how late the
generator itself started the exchanges it could start on time.

Counts are exact: the plan's batches are fixed before the run (exchange g of planned N in
batch g x 20 / N, the warm-up left out), and the count due in the window is held against the schedule computed
here (labkit.schedule) from the window the generator reports.  Latencies are only bounded
where the service bounds them: the spin service answers no sooner than the time asked.
"""

import pytest

import loadgenproc
import serverproc
from labkit import schedule
from loadgenproc import ENGINES, Loadgen
from test_loadgen import serve_spin, server  # noqa: F401 (fixture)

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

BATCHES = 20
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p999": 0.999}
SPIN_US = 200


@pytest.fixture(scope="module", params=ENGINES)
def loadgen(request):
    return Loadgen(loadgenproc.binary(), request.param)


@pytest.fixture(scope="module")
def events():
    return Loadgen(loadgenproc.binary(), "events")


def test_batches_split_the_plan_and_count_below_the_runs_percentiles(loadgen):
    """4 clients x 50 SPIN 200 us on the epoll server: 200 exchanges, 10 in each of 20 batches,
    each batch's mean at least the 200 us the server spun; the batches' counts at or below the
    run's percentile add up to the run's own count there (at least its share of 200), and
    strictly below to fewer."""
    with serverproc.running("epoll", service="spin") as srv:
        code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 4, "--requests", 50,
                                            "--service", "spin", "--spin-us", SPIN_US)
    assert code == 0, err
    batches, whole = report["latency_batches"], report["latency_us"]
    assert [samples for samples, _ in batches] == [10] * BATCHES
    assert all(SPIN_US <= mean <= whole["max"] for _, mean in batches)
    assert sum(n * mean for n, mean in batches) / 200 == pytest.approx(whole["mean"], rel=1e-3)
    for name, q in QUANTILES.items():
        below, under = report["latency_batch_below"][name], report["latency_batch_under"][name]
        assert len(below) == len(under) == BATCHES
        assert all(0 <= u <= b <= 10 for u, b in zip(under, below))
        assert sum(below) >= q * 200 and sum(under) < sum(below), (name, below, under)
    assert "latency_batch_quantiles" not in report  # no figure the lab does not read
    # closed loop: nothing is due on a schedule, and the generator is never late for one
    assert report["requests_measured"] == report["requests_ok"] == 200
    assert report["requests_due_in_window"] is None and report["measured_window_ns"] is None
    assert report["send_lateness_us"] is None


def test_a_batch_with_no_sample_is_empty(loadgen, server):
    """One client, 3 exchanges: batches 0, 6 and 13 of 20 (g x 20 / 3) hold one each; the rest
    are [0, null]."""
    srv = server(serve_spin)
    code, report, err = loadgenproc.run(loadgen, "--port", srv.port, "--clients", 1, "--requests", 3,
                                        "--service", "spin")
    assert code == 0, err
    held = [i for i, (samples, _) in enumerate(report["latency_batches"]) if samples]
    assert held == [0, 6, 13], report["latency_batches"]
    assert all(mean is None for samples, mean in report["latency_batches"] if not samples)
    assert max(mean for samples, mean in report["latency_batches"] if samples) * 1.01 >= report["latency_us"]["max"]


@pytest.mark.parametrize("warmup", ["0.25s", "250"])
def test_the_batches_divide_what_the_warm_up_leaves(events, server, warmup):
    """1,000/s for 1 s, evenly, with a quarter of it as warm-up (in seconds, or as a count):
    the 750 measured exchanges fill all 20 batches, 37 or 38 each, rather than leaving the
    warm-up's five empty (a run's intervals need every batch: labkit/batches.py)."""
    srv = server(serve_spin)
    code, report, err = loadgenproc.run(events, "--port", srv.port, "--clients", 4, "--service", "spin",
                                        "--rate", 1000, "--duration", 1, "--arrivals", "even", "--warmup", warmup)
    assert code == 0, err
    counts = [samples for samples, _ in report["latency_batches"]]
    assert sum(counts) == report["requests_measured"] == 750, counts
    assert min(counts) >= 35 and max(counts) <= 40, counts  # completion order may move a few across the edge


@pytest.mark.parametrize("arrivals", ["poisson", "even"])
def test_requests_due_in_the_window_are_the_schedules_own(events, server, arrivals):
    """Open loop, 1,000/s for 1 s with a 0.2 s warm-up, to a server that answers at once: the
    count due in the window is the schedule's (labkit.schedule) between the bounds reported;
    a server that keeps up completes exactly that many; the generator's own lateness is
    measured for the exchanges whose connection was free when they fell due."""
    srv = server(serve_spin)
    code, report, err = loadgenproc.run(events, "--port", srv.port, "--clients", 4, "--service", "spin",
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
        code, report, err = loadgenproc.run(events, "--port", srv.port, "--clients", 8, "--service", "spin",
                                            "--spin-us", 2000, "--rate", 2000, "--duration", 1, "--timeout", 0.3)
    assert code == 1, err  # exchanges still due at the deadline were never sent
    assert report["requests_not_sent"] > 0
    # completed by the deadline (1.3 s) at 500/s at most: 650; due by the last reply: about 2,000
    assert report["requests_measured"] <= 650
    assert report["requests_due_in_window"] >= 2 * report["requests_measured"], report

"""The queueing calibration's prediction (labkit.calibration): the textbook's queue replayed on
a run's own draws.  Lindley's recursion on the generator's own schedule and spin draws holds
against the closed forms of M/M/1 and M/D/1 (seeded, 200,000 requests: within 3%); the
draws it replays are the ones a real generator run sends (count, connection and order); the
floor is added as a distribution (a floor of one value shifts every response by it); a
point's replications give a median ratio whose interval states its level; the bench's table
prints every ratio with its interval and every verdict its runs carry."""

import math

import numpy as np
import pandas as pd
import pytest

from labkit import calibration, ground_truth, queue_theory, schedule, spin_draws
import loadgenproc
from loadgenproc import Loadgen
from test_loadgen import read_line, server  # noqa: F401 (fixture)

SPIN = 200.0
LONG = 200_000  # requests: the closed forms' mean within 1% and p99 within 4% for seeds 1 to 5


def replayed_queue(arrivals: str, dist: str, rho: float, seed: int = 1) -> np.ndarray:
    rate = rho * 1e6 / SPIN
    due = np.asarray(schedule.due_times_s(arrivals, rate, LONG, seed)) * 1e6
    response = queue_theory.lindley(due, spin_draws.spin_us(dist, int(SPIN), seed, 20, LONG))
    return response[LONG // 10:]  # the queue starts empty: its first tenth left out


@pytest.mark.parametrize("rho", [0.5, 0.7])
def test_lindley_on_the_generators_draws_holds_against_m_m_1(rho):
    """M/M/1: the response is exponential of rate 1/E[S] - rate: mean 1 / (1/E[S] - rate),
    p99 ln(100) times that."""
    response = replayed_queue("poisson", "exp", rho)
    mean = 1 / (1 / SPIN - rho / SPIN)
    assert response.mean() == pytest.approx(mean, rel=0.03)
    assert np.quantile(response, 0.99) == pytest.approx(math.log(100) * mean, rel=0.03)


@pytest.mark.parametrize("rho", [0.5, 0.7])
def test_lindley_on_the_generators_draws_holds_against_m_d_1(rho):
    """M/D/1: Pollaczek-Khinchine, E[W] = rho S / (2 (1 - rho)), plus S; even arrivals of a
    fixed service never wait (D/D/1)."""
    response = replayed_queue("poisson", "fixed", rho)
    assert response.mean() == pytest.approx(SPIN + rho * SPIN / (2 * (1 - rho)), rel=0.03)
    assert np.ptp(replayed_queue("even", "fixed", rho)[:1000]) == pytest.approx(0.0, abs=1e-6)


def test_the_spin_draws_are_the_generators_count_connection_and_order(server):
    """A short real run (Poisson, exponential spins, 4 connections, seed 11) against a server
    that records what each connection asked for: the generator planned rate x duration
    requests, the server got each of them once, and each connection's requests came in the
    order, and with the spins, that spin_draws gives request g = j x clients + c."""
    import threading

    clients, rate, duration, seed = 4, 400, 0.5, 11
    seen, lock = [], threading.Lock()

    def serve(conn):
        mine, pending = [], b""
        with lock:
            seen.append(mine)
        while True:
            line, pending = read_line(conn, pending)
            if line is None:
                return
            mine.append(int(line.split()[1]))
            conn.sendall(b"OK %s\n" % line.split()[1])

    srv = server(serve)
    code, report, err = loadgenproc.run(Loadgen(loadgenproc.binary(), "events"), "--port", srv.port,
                                        "--clients", clients, "--service", "spin", "--spin-us", int(SPIN),
                                        "--spin-dist", "exp", "--rate", rate, "--duration", duration,
                                        "--arrivals", "poisson", "--seed", seed)
    assert code == 0, err
    planned = calibration.planned({"rate": rate, "duration": duration})
    assert report["requests_planned"] == planned == sum(map(len, seen)) == report["requests_ok"]
    draws = spin_draws.spin_us("exp", int(SPIN), seed, clients, planned)
    expected = sorted(tuple(int(us) for us in draws[c::clients]) for c in range(clients))
    assert sorted(map(tuple, seen)) == expected
    other = spin_draws.spin_us("exp", int(SPIN), seed + 1, clients, planned)  # another seed: other draws
    assert sorted(tuple(int(us) for us in other[c::clients]) for c in range(clients)) != expected
    due = schedule.due_times_s("poisson", rate, planned, seed)
    assert due[0] == 0 and all(a <= b for a, b in zip(due, due[1:]))


def constant_floor(outside_us: float, overhead_us: float = 0.0) -> ground_truth.Floor:
    """A floor whose SPIN 0 run answered every request in one bucket at outside + overhead."""
    row = {"lat_histogram": [[outside_us + overhead_us, 5000]]}
    return ground_truth.Floor(overhead_us, outside_us, row)


def spin_row(**changes) -> dict:
    row = {"status": "ok", "arrivals": "poisson", "rate": 3500, "duration": 2.0, "warmup": "0.5s", "seed": 7,
           "clients": 20, "spin-dist": "exp", "spin-us": int(SPIN), "requests_ok": 7000, "requests_planned": 7000}
    spins = spin_draws.spin_us(row["spin-dist"], row["spin-us"], row["seed"], row["clients"], 7000)
    row["server_cpu_us_per_request"] = float(spins.mean()) + 15.0  # a loop cost of 15 µs a request
    row.update(changes)
    return row


def test_a_floor_of_one_value_shifts_every_response_by_it():
    """The floor convolved, not added to a percentile: with every SPIN 0 response the same,
    the prediction is the queue's own response shifted by that value (within the bucket's
    width, 1/128), at the mean and at p99 alike; the loop's cost is the row's CPU per request
    less its mean spin, and the warm-up's requests are left out."""
    row = spin_row()
    queue_only = calibration.replay(row, constant_floor(1e-9))
    shifted = calibration.replay(row, constant_floor(300.0, overhead_us=25.0))
    assert queue_only.overhead_us == pytest.approx(15.0)
    assert queue_only.requests == shifted.requests == 7000 - sum(
        t < 0.5 for t in schedule.due_times_s("poisson", 3500, 7000, 7))
    for figure in ("mean_us", "p99_us"):
        gap = getattr(shifted, figure) - getattr(queue_only, figure)
        assert 325 / (1 + 1 / 128) - 25 - 1e-6 <= gap <= 300 + 1e-6


def test_a_floor_with_a_spread_raises_p99_by_less_than_its_own_p99():
    """The p99 of a sum is not the sum of p99s: a floor of 100 µs in 99.5% of requests and
    10 ms in the rest adds its mean to the prediction's mean, and far less than 10 ms to p99."""
    row = spin_row()
    floor = ground_truth.Floor(0.0, 149.5, {"lat_histogram": [[100.0, 9950], [10000.0, 50]]})
    alone, convolved = calibration.replay(row, constant_floor(1e-9)), calibration.replay(row, floor, seed=3)
    assert convolved.mean_us - alone.mean_us == pytest.approx(149.5, rel=0.15)
    assert 100 <= convolved.p99_us - alone.p99_us < 5000


def test_a_run_not_measured_is_predicted_as_nan_never_0():
    assert math.isnan(calibration.replay(spin_row(server_cpu_us_per_request=math.nan), constant_floor(1.0)).mean_us)
    assert math.isnan(calibration.replay(spin_row(status="failed"), constant_floor(1.0)).p99_us)
    unmeasured = ground_truth.Floor(math.nan, math.nan, {}, "no perf")
    assert math.isnan(calibration.replay(spin_row(), unmeasured).mean_us)


def test_the_median_ratio_says_the_level_its_replications_reach():
    """5 replications: [min, max] at 94%; 6: 97%; one bounds nothing; NaN ones left out."""
    median, interval = calibration.ratio_interval([1.1, 0.9, 1.0, 1.2, 0.95])
    assert median == 1.0 and (interval.low, interval.high) == (0.9, 1.2)
    assert round(interval.confidence, 4) == 0.9375
    assert round(calibration.ratio_interval([1, 2, 3, 4, 5, 6])[1].confidence, 4) == 0.9688
    assert calibration.ratio_interval([1.0, math.nan]) == (1.0, None)
    assert math.isnan(calibration.ratio_interval([math.nan])[0])


def test_the_table_prints_each_ratio_with_its_interval_and_every_verdict():
    """summarise over a point's replications, then the text: each ratio with its interval and
    level, a run not measured said so (never 0), each verdict with how many runs carry it."""
    from labkit.bench import known_answer

    runs = []
    for replication, ratio in enumerate([1.0, 1.1, 0.9, 1.05, 0.95]):
        runs.append(dict(point=0, arrivals="poisson", **{"spin-dist": "exp"}, utilisation=0.5, rate=2300,
                         overhead_us=17.0, floor_us=70.0, lat_mean_us=400 * ratio, replay_mean_us=400.0,
                         mean_ratio=ratio, lat_p99_us=2000 * ratio, replay_p99_us=2000.0, p99_ratio=ratio,
                         verdicts={"cpu_shared": "server's CPU shared: others ran 40%"} if replication else {}))
        runs.append(dict(runs[-1], point=1, utilisation=0.7, rate=3200, lat_p99_us=math.nan, p99_ratio=math.nan,
                         verdicts={}))
    frame = known_answer.summarise(runs)
    frame.attrs.update(spin_us=200, duration=2.0, replications=5, runs=runs, floor_us=[70.0], server_cpus=[0],
                       client_cpus=[1], pinning_note="")
    text = known_answer.format_calibration(frame)
    assert "1.00 (0.90-1.10)" in text and "94%" in text
    assert "cpu_shared 4/5" in text and "server's CPU shared: others ran 40%" in text
    assert "not measured" in text and " 0.00" not in text
    assert frame.loc[0, "theory_mean_us"] == pytest.approx(
        queue_theory.predict("poisson", "exp", 2300, 200, 17.0, 70.0).mean_us)
    assert pd.isna(frame.loc[1, "p99_ratio"])

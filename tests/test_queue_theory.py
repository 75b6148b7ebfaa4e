"""labkit.queue_theory against the formulas it stands on: Lindley's recursion, run over
the same declared distributions, must give what the closed forms give where they exist
(M/M/1's whole response time, the Pollaczek-Khinchine mean of M/D/1 and M/G/1), and the
cases that need no queue at all (D/D/1 below saturation never waits)."""

import math

import numpy as np
import pytest

from labkit import queue_theory as qt

SPIN = 100.0  # microseconds


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.7])
def test_lindley_gives_mm1s_mean_and_p99(rho):
    rate = rho / SPIN * 1e6
    times = qt._lindley("poisson", "exp", rate, SPIN, 0.0, seed=3)
    exact = qt.predict("poisson", "exp", rate, SPIN)
    assert exact.mean_how.startswith("Pollaczek") and exact.p99_how == "M/M/1 (exact)"
    assert exact.mean_us == pytest.approx(SPIN / (1 - rho))  # M/M/1: E[T] = E[S] / (1 - rho)
    assert exact.p99_us == pytest.approx(math.log(100) * SPIN / (1 - rho))
    assert times.mean() == pytest.approx(exact.mean_us, rel=0.05)
    assert np.quantile(times, 0.99) == pytest.approx(exact.p99_us, rel=0.06)


@pytest.mark.parametrize("dist, overhead, second_moment", [
    ("fixed", 0.0, SPIN ** 2),                      # M/D/1
    ("fixed", 20.0, (SPIN + 20) ** 2),              # M/D/1, the loop's cost added
    ("exp", 20.0, SPIN ** 2 + (SPIN + 20) ** 2),    # M/G/1: a shifted exponential
])
@pytest.mark.parametrize("rho", [0.3, 0.7])
def test_the_pollaczek_khinchine_mean_is_lindleys(dist, overhead, second_moment, rho):
    rate = rho / (SPIN + overhead) * 1e6
    predicted = qt.predict("poisson", dist, rate, SPIN, overhead, floor_us=15.0)
    wait = rate / 1e6 * second_moment / (2 * (1 - rho))
    assert predicted.rho == pytest.approx(rho)
    assert predicted.mean_us == pytest.approx(15.0 + wait + SPIN + overhead)
    simulated = qt._lindley("poisson", dist, rate, SPIN, overhead, seed=5).mean() + 15.0
    assert simulated == pytest.approx(predicted.mean_us, rel=0.04)


def test_even_arrivals_and_fixed_times_never_queue_below_saturation():
    predicted = qt.predict("even", "fixed", 7000, SPIN, 10.0, floor_us=30.0)
    assert predicted.mean_us == pytest.approx(30 + SPIN + 10) and predicted.p99_us == pytest.approx(30 + SPIN + 10)


def test_even_arrivals_queue_less_than_poisson_ones():
    for dist in qt.SERVICE_DISTS:
        even, poisson = qt.predict("even", dist, 5000, SPIN), qt.predict("poisson", dist, 5000, SPIN)
        assert even.mean_us < poisson.mean_us and even.p99_us < poisson.p99_us


def test_at_or_past_saturation_there_is_no_steady_state():
    predicted = qt.predict("poisson", "exp", 10_000, SPIN)
    assert predicted.rho == 1 and not predicted.stable and math.isinf(predicted.mean_us)


def test_an_unknown_process_is_refused():
    with pytest.raises(ValueError, match="arrivals must be one of"):
        qt.predict("bursty", "exp", 1000, SPIN)

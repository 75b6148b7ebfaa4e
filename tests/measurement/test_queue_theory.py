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


def test_points_beside_predictions():
    """Each point is set beside its prediction and each figure draws its interval."""
    import pandas as pd

    from labkit import figure_lint, ground_truth

    rows = [dict(model="epoll", arrivals=a, spin_dist="exp", spin_us=100, rate=rate, status="ok", lat_mean_us=mean,
                 lat_p99_us=9 * mean, requests_ok=1000, lat_p99_low_us=8 * mean, lat_p99_high_us=10 * mean,
                 lat_p99_confidence=0.96, lat_mean_low_us=0.95 * mean, lat_mean_high_us=1.05 * mean,
                 lat_mean_confidence=0.95)
            for a, rate, mean in (("even", 2000, 250.0), ("poisson", 2000, 300.0), ("poisson", 5000, 600.0))]
    floor = ground_truth.Floor(overhead_us=30.0, floor_us=90.0, row={})
    table = ground_truth.beside_theory(pd.DataFrame(rows), floor)
    expected = qt.predict("poisson", "exp", 5000, 100, 30.0, 90.0)
    last = table.iloc[-1]
    assert last["utilisation"] == pytest.approx(0.65)
    assert last["predicted_mean_us"] == pytest.approx(expected.mean_us)
    assert last["mean_ratio"] == pytest.approx(600 / expected.mean_us)
    assert (last["p99_low_us"], last["p99_high_us"]) == (4800.0, 6000.0)
    p99 = ground_truth.figure(table, "p99")
    measured = [trace for trace in p99.data if trace.name.endswith("measured")]
    assert measured and all(trace.error_y.array is not None for trace in measured)
    assert "whiskers: 96% interval from the run's own batches" in p99.layout.title.subtitle.text
    assert figure_lint.problems(p99) == [] and figure_lint.problems(ground_truth.figure(table)) == []
    assert "poisson arrivals, exp service, utilisation 0.65: 600 µs measured" in ground_truth.describe(table)
    assert "5,400 µs measured (4,800 to 6,000: 96% interval from the run's own batches)" in \
        ground_truth.describe(table, "p99")
    mean = ground_truth.figure(table)
    assert "whiskers: 95% interval from the run's own batches" in mean.layout.title.subtitle.text
    assert all(trace.error_y.array is not None for trace in mean.data if trace.name.endswith("measured"))
    assert "600 µs measured (570 to 630: 95% interval from the run's own batches)" in ground_truth.describe(table)
    assert list(ground_truth.shown(table).data.columns) == list(ground_truth.SHOWN.values())


def test_theories_that_coincide_are_still_told_apart():
    """A floor far above the queue's part (a busy machine's: 2 ms) puts even and Poisson arrivals'
    theories within 1% of each other at a light load: each series' line has a dash of its own, so
    the figure does not draw two traces alike (figure_lint)."""
    import pandas as pd

    from labkit import figure_lint, ground_truth

    rows = [dict(model="epoll", arrivals=a, spin_dist="exp", spin_us=10, rate=rate, status="ok", lat_mean_us=2100.0,
                 lat_p99_us=2500.0, requests_ok=1000, lat_p99_low_us=2400.0, lat_p99_high_us=2600.0,
                 lat_p99_confidence=0.95, lat_mean_low_us=2000.0, lat_mean_high_us=2200.0, lat_mean_confidence=0.95)
            for a in ("even", "poisson") for rate in (500, 1000)]
    table = ground_truth.beside_theory(pd.DataFrame(rows), ground_truth.Floor(overhead_us=5.0, floor_us=2000.0, row={}))
    theory = table.pivot_table(index="rate", columns="arrivals", values="predicted_mean_us")
    assert ((theory["poisson"] - theory["even"]).abs() / theory["even"] < 0.01).all(), theory  # they coincide
    assert figure_lint.problems(ground_truth.figure(table)) == []


def test_a_point_past_saturation_has_no_theory_to_be_held_against():
    """This machine's own floor (the loop's CPU per request) doubled from one run to the next
    (55 to 110 µs): at 110 µs the quick profile's top rate put ρ past 1, and notebook 06's
    table failed on the unbounded theory.  Now theory reads ∞, there is no ratio, no line."""
    import pandas as pd

    from labkit import figure_lint, ground_truth

    row = dict(model="epoll", arrivals="poisson", spin_dist="exp", spin_us=100, rate=6000, status="ok",
               lat_mean_us=9000.0, lat_p99_us=40000.0, requests_ok=1000, lat_p99_low_us=35000.0,
               lat_p99_high_us=45000.0, lat_p99_confidence=0.96, lat_mean_low_us=8500.0, lat_mean_high_us=9500.0,
               lat_mean_confidence=0.95)
    table = ground_truth.beside_theory(pd.DataFrame([row]), ground_truth.Floor(overhead_us=110.0, floor_us=350.0,
                                                                               row={}))
    last = table.iloc[-1]
    assert last["utilisation"] > 1 and math.isinf(last["predicted_mean_us"]) and math.isnan(last["mean_ratio"])
    assert "∞" in ground_truth.shown(table).to_html()
    assert "no steady state predicted (utilisation ≥ 1)" in ground_truth.describe(table)
    assert ground_truth.past_capacity(table).startswith("At 6,000/s the loop's measured cost and the declared "
                                                        "service time add up to utilisation 1.26: ")
    assert ground_truth.past_capacity(table.assign(utilisation=0.99)) == ""
    assert ground_truth.past_capacity(table.iloc[:0]) == ""
    fig = ground_truth.figure(table)
    theory = [t for t in fig.data if t.name.endswith("theory")]
    assert theory and all(math.isnan(y) for t in theory for y in t.y)
    assert figure_lint.problems(fig) == []


def test_means_above_theory_blame_machine():
    """Means far above theory are said to be the machines not the queues."""
    import pandas as pd

    from labkit import ground_truth

    quiet = pd.DataFrame({"mean_ratio": [0.96, 1.03, 1.29, 0.99]})  # measured so on a quiet 2-core machine
    assert ground_truth.interference(quiet) == ""
    busy = pd.DataFrame({"mean_ratio": [1.88, 5.14, 1.47, 5.27]})  # ... with a nice-19 spinner on each CPU
    assert ground_truth.interference(busy).startswith("Your measured means sit up to 5.3× above theory")
    assert ground_truth.interference(pd.DataFrame({"mean_ratio": []})) == ""

"""labkit.uncertainty: the intervals every figure's uncertainty will rest on, held to what
they claim.  The coverage tests simulate what a run measures, from distributions whose
quantiles are known, with a fixed seed: 2,000 runs each, and the share of runs whose 95%
interval holds the true value must be 93-97% (the binomial noise of 2,000 runs is about
0.5%; the ranks' discreteness makes the coverage a little above 95%, and the interval says
by how much)."""

import math

import numpy as np
import pytest

from labkit import uncertainty

RUNS = 2000


def exponential(rng, shape):  # an M/M/1 response time's shape: its q-quantile is -ln(1 - q)
    return rng.exponential(1.0, shape)


def lognormal(rng, shape):    # a long tail, nothing like a normal: its q-quantile is exp(z_q)
    return rng.lognormal(0.0, 1.0, shape)


Z = {0.5: 0.0, 0.99: 2.3263478740408408, 0.999: 3.090232306167813}  # the standard normal's quantiles

# distribution, samples a run has, the percentile, its true value
COVERAGE = [
    (exponential, 10_000, 0.99, -math.log(0.01)),     # a point's p99, from its requests
    (exponential, 20_000, 0.999, -math.log(0.001)),   # p99.9 needs tens of thousands
    (lognormal, 2_000, 0.5, math.exp(Z[0.5])),        # a median
    (lognormal, 5_000, 0.99, math.exp(Z[0.99])),
]


@pytest.mark.parametrize("draw, n, q, truth", COVERAGE, ids=[f"{d.__name__}-{n}-p{q * 100:g}"
                                                             for d, n, q, _ in COVERAGE])
def test_95_percent_interval_coverage(draw, n, q, truth):
    """A 95 percent interval holds the true percentile in 93 to 97 percent of runs."""
    rng = np.random.default_rng(20261126)
    low, high, reached = uncertainty.quantile_ranks(n, q)
    held = 0
    for _ in range(RUNS // 100):  # 100 runs at a time: each a row of n samples
        runs = np.partition(draw(rng, (100, n)), [low - 1, high - 1], axis=1)
        held += int(np.sum((runs[:, low - 1] <= truth) & (truth <= runs[:, high - 1])))
    coverage = held / RUNS
    assert 0.93 <= coverage <= 0.97, (coverage, low, high)
    assert abs(coverage - reached) < 0.015, (coverage, reached)  # what it says it reaches, it reaches


def test_the_median_of_a_few_repeats_says_how_sure_it_is():
    """[min, max] of 3 repeats is the best 3 allow: a 75% interval, and it says so; 6
    repeats reach 97%.  Simulated: the share of runs holding the true median is that."""
    rng = np.random.default_rng(3)
    for repeats, reached in ((3, 0.75), (6, 0.96875)):
        runs = [uncertainty.median_interval(list(values)) for values in lognormal(rng, (RUNS, repeats))]
        assert all(r.confidence == pytest.approx(reached) for r in runs)
        assert all(r.enough == (repeats >= 6) and r.low <= r.high for r in runs)
        coverage = sum(1.0 in r for r in runs) / RUNS  # the lognormal's median is 1
        assert abs(coverage - reached) < 0.03, (repeats, coverage)


# samples, percentile: the ranks (1-based), exact, and whether they reach 95%
RANKS = [
    (3, 0.5, (1, 3), False),          # 1 - 2 x 0.5^3 = 75%
    (6, 0.5, (1, 6), True),           # 1 - 2 x 0.5^6 = 96.9%
    (10, 0.5, (2, 9), True),          # the sign test's table: 97.9%
    (1000, 0.999, (997, 1000), False),  # p99.9 of 1,000 requests: 61%, not 95%
    (10_000, 0.99, (9880, 9920), True),
]


@pytest.mark.parametrize("n, q, ranks, enough", RANKS)
def test_the_ranks_are_the_binomials(n, q, ranks, enough):
    low, high, reached = uncertainty.quantile_ranks(n, q)
    assert (low, high) == ranks
    # the coverage, summed here term by term: P(low <= B <= high - 1), B ~ Binomial(n, q)
    exact = sum(math.comb(n, k) * q ** k * (1 - q) ** (n - k) for k in range(low, high))
    assert reached == pytest.approx(exact, rel=1e-9)
    assert (reached >= 0.95) == enough


def test_two_results_differ_only_when_their_intervals_do_not_overlap():
    a = uncertainty.Interval(10.0, 12.0, 0.95)
    assert uncertainty.differ(a, uncertainty.Interval(12.5, 13.0, 0.95))
    assert not uncertainty.differ(a, uncertainty.Interval(11.9, 13.0, 0.95))
    assert not uncertainty.differ(a, a)


def test_bad_input_says_what_is_needed():
    with pytest.raises(ValueError, match="need n >= 1 samples and 0 < q < 1"):
        uncertainty.quantile_ranks(0, 0.5)
    with pytest.raises(ValueError, match="0 < q < 1"):
        uncertainty.quantile_ranks(10, 1.0)


# ---------------------------------------------------------------------------
# a run's own percentiles, known only by the load generator's histogram buckets

def loadgen_buckets(samples_us: np.ndarray) -> list[tuple[float, int]]:
    """Samples as csrc/loadgen/histogram.c buckets them and report.c prints them: each
    non-empty bucket's upper bound (µs) and count.  Below 256 ns a bucket per nanosecond;
    above, 128 buckets per power of two."""
    ns = np.maximum(samples_us * 1000, 1).astype(np.int64)
    power = np.floor(np.log2(np.maximum(ns, 1))).astype(np.int64)
    shift = np.maximum(power - 7, 0)
    high = np.where(ns < 256, ns, ((((ns >> shift) & 127) + 129) << shift) - 1)
    bounds, counts = np.unique(high, return_counts=True)
    return [(b / 1000, int(c)) for b, c in zip(bounds, counts)]


def test_a_bucketed_interval_is_the_exact_one_to_within_a_bucket():
    rng = np.random.default_rng(7)
    samples = rng.exponential(100.0, 5000)  # microseconds
    exact = uncertainty.quantile_interval(samples, 0.99)
    bucketed = uncertainty.histogram_quantile_interval(loadgen_buckets(samples), 0.99)
    assert bucketed.confidence == exact.confidence
    assert bucketed.low == pytest.approx(exact.low, rel=1 / 128)
    assert bucketed.high == pytest.approx(exact.high, rel=1 / 128)


def test_bucketed_interval_coverage():
    """A bucketed 95 percent interval holds the true p99 in 93 to 97 percent of runs."""
    rng = np.random.default_rng(20261126)
    truth = -math.log(0.01) * 100.0  # the exponential's p99, mean 100 µs
    held = sum(truth in uncertainty.histogram_quantile_interval(loadgen_buckets(rng.exponential(100.0, 5000)), 0.99)
               for _ in range(RUNS))
    assert 0.93 <= held / RUNS <= 0.97, held / RUNS


@pytest.mark.parametrize("df, published", [(9, 2.262), (10, 2.228), (19, 2.093), (30, 2.042), (120, 1.980)])
def test_students_t_quantile_matches_the_published_table(df, published):
    """Student's t 97.5% points as every statistics table prints them (three decimals)."""
    assert round(uncertainty._t_quantile(0.975, df), 3) == published


POINT_INTERVALS = [  # repeats' values, the run's own interval: what a figure draws, and its words
    ([5.0, 1.0, 3.0], (), (1.0, 5.0, "75% interval of the median of 3 runs")),
    ([4.0], (3.0, 6.0, 0.96), (3.0, 6.0, "96% interval from the run's own batches")),
    ([4.0], (3.0, 9.0, 0.61), (3.0, 9.0, "61% interval from the run's own batches (too few samples for 95%)")),
    ([4.0], (), (4.0, 4.0, "one run, no interval")),
    ([], (), (math.nan, math.nan, "")),
]


@pytest.mark.parametrize("values, run, drawn", POINT_INTERVALS)
def test_figure_says_which_interval(values, run, drawn):
    """A figure draws the medians interval or the runs own and says which."""
    low, high, words = uncertainty.point_interval(values, *run)
    assert (low, high, words) == pytest.approx(drawn, nan_ok=True) if values else math.isnan(low)
    assert words == drawn[2]


# (the kinds of interval a chart's points have; what the chart says of them)
KINDS_TEXT = [
    (["95% interval from the run's own batches"], "95% interval from the run's own batches"),
    (["16% interval from the run's own batches (too few samples for 95%)"],
     "16% interval from the run's own batches (too few samples for 95%)"),
    (["16% interval from the run's own batches (too few samples for 95%)", "95% interval from the run's own batches",
      "97% interval from the run's own batches", "54% interval from the run's own batches (too few samples for 95%)"],
     "16-97% interval from the run's own batches (under 95% where a run had too few samples: the hover says each)"),
    (["95% interval from the run's own batches", "97% interval from the run's own batches"],
     "95-97% interval from the run's own batches"),
    (["75% interval of the median of 3 runs", "96% interval from the run's own batches"],
     "75% interval of the median of 3 runs; 96% interval from the run's own batches"),
    (["one run, no interval"], "one run, no interval"),
]


@pytest.mark.parametrize("kinds, said", KINDS_TEXT, ids=[said[:40] for _, said in KINDS_TEXT])
def test_the_kinds_of_interval_are_said_once_each(kinds, said):
    assert uncertainty.kinds_text(kinds) == said


def test_the_rank_test_is_the_published_one():
    """Counted by hand: 4 against 4 all apart, 2 of the 70 orderings are as extreme; 6 against
    6 with U = 3, the orderings with U <= 3 are 1 + 1 + 2 + 3 = 7 of 924, twice for two sides."""
    assert uncertainty.rank_test([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert uncertainty.rank_test([1, 2, 3, 4, 5, 9], [6, 7, 8, 10, 11, 12]) == pytest.approx(14 / 924)
    assert uncertainty.rank_test([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)  # why 3 each cannot tell at 5%


def test_compare_false_and_true_alarms():
    """The design: 8 replications of each system, a run-to-run variation of 10% (lognormal,
    sigma 0.1: the lab's p99 varies 5-10% between runs of 4 s), the exact rank test at 5%
    (6 of each found 20% apart in 74.5% of comparisons: too few)."""
    rng = np.random.default_rng(59)
    same = sum(bool(uncertainty.compare(rng.lognormal(0, 0.1, 8), rng.lognormal(0, 0.1, 8)).different)
               for _ in range(RUNS))
    apart = sum(bool(uncertainty.compare(rng.lognormal(0, 0.1, 8), 1.2 * rng.lognormal(0, 0.1, 8)).different)
                for _ in range(RUNS))
    print(f"identical: {same / RUNS:.1%} called different; 20% apart: {apart / RUNS:.1%}")
    assert same / RUNS <= 0.05
    assert apart / RUNS >= 0.80


def test_too_few_replications_cannot_tell():
    said = uncertainty.compare([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert said.different is None and "needs 4 of each" in said.how
    one = uncertainty.compare([1.0], [2.0], uncertainty.Interval(0.9, 1.1, 0.95), uncertainty.Interval(1.9, 2.1, 0.95))
    assert one.different is True and "own 95% intervals" in one.how

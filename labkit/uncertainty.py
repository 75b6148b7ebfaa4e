"""How sure a percentile is: distribution-free confidence intervals from order statistics.

A percentile of n samples is one of them, an order statistic.  Whatever the distribution
(and latency is far from normal: long-tailed, often with several modes), the number B of
samples that fall below the true q-quantile is Binomial(n, q), so the true quantile lies
between the l-th and the u-th smallest samples exactly when l <= B <= u - 1:

    P(X(l) <= x_q <= X(u)) = P(l <= B <= u - 1)        (B ~ Binomial(n, q))

for any continuous distribution (J.-Y. Le Boudec, Performance Evaluation of Computer and
Communication Systems, EPFL Press 2010, Theorem 2.1; the same argument as the sign test).
quantile_interval() picks the ranks that leave at most half the missing confidence in each
tail, and says the confidence it reached, which discreteness makes a little higher than
asked -- or lower, when there are too few samples for it, and then the interval is the
widest the samples allow and says it is not enough:

- the median of 3 repeats: (1, 3) is the best there is, [min, max], and it is a 75%
  interval, not 95% (1 - 2 x 0.5^3); 6 repeats give 97%;
- p99.9 of 1,000 requests: the upper rank would be past the last sample (the true p99.9
  lies above all 1,000 with probability 0.999^1000 = 37%); [X(997), X(1000)] holds it
  with 61% confidence: this run cannot bound its p99.9 at 95%, and says so.

One assumption remains: the samples are independent draws.  That holds for replications
(each repeat its own seed: the median of repeats, median_interval) and not for a queue's
latencies within one run (a request that queued long is followed by others that queue long):
a run's own intervals come from its consecutive batches instead (labkit.batches), which uses
these order statistics only to read a rank off the run's histogram.

Invariants: no assumption about the distribution; the confidence returned is the one the
ranks give (computed, not the one asked for); an interval short of the confidence asked
says so (enough is False), never passes for a 95% one."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    confidence: float            # what the ranks give: P(low <= true value <= high)
    asked: float = CONFIDENCE    # what was asked for

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def enough(self) -> bool:
        """Whether the samples reached the confidence asked (else: too few for it)."""
        return self.confidence >= self.asked - 1e-12


def _binomial_cdf(n: int, q: float):
    """F(k) = P(Binomial(n, q) <= k), as a function; exact, summed outward from the mode
    (terms below 1e-300 of the mode's are left out: they change nothing in float64)."""
    mode = min(n, int((n + 1) * q))
    log_mode = (math.lgamma(n + 1) - math.lgamma(mode + 1) - math.lgamma(n - mode + 1)
                + (mode * math.log(q) if mode else 0.0) + ((n - mode) * math.log1p(-q) if n - mode else 0.0))
    pmf = {mode: math.exp(log_mode)}
    ratio = q / (1 - q)
    k, p = mode, pmf[mode]
    while k < n and p > 1e-300:
        p *= (n - k) / (k + 1) * ratio
        k += 1
        pmf[k] = p
    k, p = mode, pmf[mode]
    while k > 0 and p > 1e-300:
        p *= k / (n - k + 1) / ratio
        k -= 1
        pmf[k] = p
    first, last = min(pmf), max(pmf)
    cumulative, total = {}, 0.0
    for k in range(first, last + 1):
        total += pmf[k]
        cumulative[k] = total

    def cdf(k: int) -> float:
        if k < first:
            return 0.0
        return 1.0 if k >= last else min(1.0, cumulative[k])
    return cdf


def quantile_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int, float]:
    """1-based ranks (l, u) of the order statistics that bound the q-quantile of n samples,
    each tail holding at most (1 - confidence) / 2 where the samples allow it (else the
    first or the last sample), and the coverage they reach."""
    if n < 1 or not 0 < q < 1:
        raise ValueError(f"need n >= 1 samples and 0 < q < 1 (got n={n}, q={q})")
    tail = (1 - confidence) / 2
    cdf = _binomial_cdf(n, q)
    # l is valid when P(B <= l - 1) <= tail: the largest is the first k with F(k) > tail;
    # u is valid when P(B >= u) <= tail: the smallest is one past the first k with F(k) >= 1 - tail
    low = max(1, min(n, _first(lambda k: cdf(k) > tail, n)))
    high = min(n, _first(lambda k: cdf(k) >= 1 - tail, n) + 1)
    reached = cdf(high - 1) - cdf(low - 1)
    return low, high, reached


def _first(holds, n: int) -> int:
    """The smallest k in 0..n for which holds(k), a test that once true stays true (F rises)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def quantile_interval(samples: Sequence[float], q: float, confidence: float = CONFIDENCE) -> Interval:
    """The interval that holds the true q-quantile of what `samples` were drawn from, with
    the confidence the ranks reach (see the module's doc)."""
    ordered = sorted(samples)
    low, high, reached = quantile_ranks(len(ordered), q, confidence)
    return Interval(ordered[low - 1], ordered[high - 1], reached, confidence)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The interval of the median of a few repeats: [min, max] of 3 repeats is a 75% one."""
    return quantile_interval(values, 0.5, confidence)


RANK_TEST_LEAST = 4   # replications of each: with 3 and 3 the smallest two-sided p of a rank test is 0.1
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Comparison:
    """Two results set side by side: `different` True or False where the noise lets one
    tell (None: it does not), the rank test's two-sided p (NaN where none was made), and
    how it was decided, in words."""

    different: bool | None
    p: float
    how: str


def compare(a: Sequence[float], b: Sequence[float], a_run: Interval | None = None,
            b_run: Interval | None = None) -> Comparison:
    """Whether two systems differ, from their replications (`a`, `b`: one value a repeat,
    each its own seed): with RANK_TEST_LEAST or more each, the Wilcoxon-Mann-Whitney rank test,
    exact, two-sided, different where p < SIGNIFICANCE (a 5% test: two identical systems are
    called different in at most 5% of comparisons, whatever their distribution).  With one
    run each, the runs' own 95% intervals (labkit.batches, valid for a queue's samples): apart
    means different, a test at well under 5%.  Otherwise it cannot tell, and says so."""
    a = [float(v) for v in a if v == v]
    b = [float(v) for v in b if v == v]
    if len(a) >= RANK_TEST_LEAST and len(b) >= RANK_TEST_LEAST:
        p = rank_test(a, b)
        return Comparison(p < SIGNIFICANCE, p, f"rank test on {len(a)} and {len(b)} replications: p = {p:.2g}")
    if a_run is not None and b_run is not None and a_run.enough and b_run.enough:
        return Comparison(differ(a_run, b_run), math.nan, "the runs' own 95% intervals")
    return Comparison(None, math.nan, f"too few replications to tell (a rank test needs {RANK_TEST_LEAST} of each)")


def rank_test(a: Sequence[float], b: Sequence[float]) -> float:
    """The exact two-sided p of the Wilcoxon-Mann-Whitney test: U counts the pairs where a's
    value is above b's (a tie counts a half), and its distribution when the two samples come
    from one distribution is the count of the C(n+m, n) orderings giving each U (the
    recursion N(n, m, u) = N(n-1, m, u-m) + N(n, m-1, u); ties make it a little
    conservative)."""
    n, m = len(a), len(b)
    u = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)
    counts = _u_counts(n, m)
    total = sum(counts)
    extreme = min(u, n * m - u)
    tail = sum(c for k, c in enumerate(counts) if k <= extreme + 1e-9)
    return min(1.0, 2 * tail / total)


def _u_counts(n: int, m: int) -> list[int]:
    """How many of the orderings of n and m values give U = 0, 1, ..., n m."""
    table = {(0, j): [1] for j in range(m + 1)}
    table.update({(i, 0): [1] for i in range(n + 1)})
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            left, right = table[(i - 1, j)], table[(i, j - 1)]
            size = i * j + 1
            row = [0] * size
            for k, c in enumerate(left):
                row[k + j] += c
            for k, c in enumerate(right):
                row[k] += c
            table[(i, j)] = row
    return table[(n, m)]


def differ(a: Interval, b: Interval) -> bool:
    """Whether two results differ beyond their noise: their intervals do not overlap.  A
    conservative test (two 95% intervals that just touch mean a difference at well beyond
    95%), so "no difference this run can see" is the answer whenever they overlap."""
    return a.high < b.low or b.high < a.low


# ---------------------------------------------------------------------------
# a run's own percentiles, from the load generator's histogram

# csrc/loadgen/histogram.h: a bucket is at most 1/128 of its lower bound wide, and the
# generator reports each non-empty one by its upper bound (µs) with its count
BUCKET_WIDTH = 1 / 128
PERCENTILES = {"p50": 0.5, "p99": 0.99, "p999": 0.999}


def histogram_quantile_interval(buckets, q: float, confidence: float = CONFIDENCE) -> Interval:
    """quantile_interval for samples known only by their bucket: `buckets` is [(upper
    bound, count), ...] in ascending order (histogram_values says how a rank is read).  A
    bucket is under 0.8% wide, so the ends are within that of the exact order statistics:
    taking whole buckets instead, a bucket wider at each end, held the true p99 of 5,000
    exponential samples in 97.6% of 2,000 runs, past what the ranks claim
    (tests/measurement/test_uncertainty.py)."""
    total = sum(int(count) for _, count in buckets)
    low, high, reached = quantile_ranks(total, q, confidence)
    first, last = histogram_values(buckets, [low, high])
    return Interval(first, last, reached, confidence)


def histogram_values(buckets, ranks) -> list[float]:
    """The rank-th smallest sample (1-based) for each of `ranks`, of samples known only by
    their bucket ([(upper bound, count), ...] ascending): it lies in the bucket where the
    running count reaches the rank; within it, the bucket's samples are taken as spread
    evenly from its lower edge to its upper one."""
    cumulative, total = [], 0
    for _, count in buckets:
        total += int(count)
        cumulative.append(total)

    def value_of(rank: int) -> float:
        i = _first(lambda j: cumulative[j] >= rank, len(cumulative) - 1)
        upper, count = float(buckets[i][0]), int(buckets[i][1])
        lower = upper / (1 + BUCKET_WIDTH)
        before = cumulative[i] - count
        return lower + (upper - lower) * (rank - before - 0.5) / count

    return [value_of(int(rank)) for rank in ranks]


MEAN = "mean"


def interval_columns(metric: str) -> tuple[str, str, str] | None:
    """The row's columns of `metric`'s own interval (lat_p99_us: lat_p99_low_us,
    lat_p99_high_us, lat_p99_confidence), or None for a metric that has none: the one place
    their names are made (labkit.row, labkit.batches.run_columns, the plots, the verdicts)."""
    name = metric.removeprefix("lat_").removesuffix("_us")
    if metric != f"lat_{name}_us" or (name not in PERCENTILES and name != MEAN):
        return None
    return f"lat_{name}_low_us", f"lat_{name}_high_us", f"lat_{name}_confidence"


def _t_quantile(p: float, df: int) -> float:
    """Student's t p-quantile with `df` degrees of freedom, from the normal's by the
    Cornish-Fisher series of Abramowitz and Stegun 26.7.5: at p = 0.975 its error is under
    3e-4 from df 5 on and 1.4e-5 at df 9, the fewest batch_means_interval uses (larger for
    p nearer 1)."""
    z = _normal_quantile(p)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def _normal_quantile(p: float) -> float:
    """The standard normal's p-quantile (statistics.NormalDist: Wichura's algorithm)."""
    return NormalDist().inv_cdf(p)


def point_interval(values: Sequence[float], run_low: float = math.nan, run_high: float = math.nan,
                   run_confidence: float = math.nan, confidence: float = CONFIDENCE) -> tuple[float, float, str]:
    """The interval a figure draws around a point's median of `values` (its repeats), and
    what it is, in words: with two repeats or more, the median's own (order statistics of
    the repeats: 3 give [min, max], a 75% interval); with one, the run's own interval where
    its row has one (run_low, run_high: from its batches, labkit.batches); else none (low =
    high = the value, "one run, no interval": a run worth too few independent samples)."""
    values = [v for v in values if v == v]
    if not values:
        return math.nan, math.nan, ""
    if len(values) >= 2:
        interval = median_interval(values, confidence)
        return interval.low, interval.high, f"{interval.confidence:.0%} interval of the median of {len(values)} runs"
    if run_low == run_low and run_high == run_high:
        reached = f"{run_confidence:.0%}" if run_confidence == run_confidence else "an"
        short = "" if run_confidence != run_confidence or run_confidence >= confidence - 1e-12 else \
            " (too few samples for 95%)"
        return run_low, run_high, f"{reached} interval from the run's own batches{short}"
    return values[0], values[0], "one run, no interval"


_KIND = re.compile(r"^(\d+)% (interval .*?)( \(too few samples for 95%\))?$")


def kinds_text(kinds) -> str:
    """point_interval's kinds of interval, each said once: one kind at several levels (a run
    of few samples reaches less than 95%) as their range, "16-97% interval from the run's own
    batches (under 95% where a run had too few samples: the hover says each)", not eight
    sentences over a chart."""
    levels: dict[str, set[int]] = {}
    short: set[str] = set()
    said = []
    for kind in sorted(set(kinds)):
        match = _KIND.match(kind)
        if match is None:
            said.append(kind)
            continue
        levels.setdefault(match.group(2), set()).add(int(match.group(1)))
        if match.group(3):
            short.add(match.group(2))
    for what, found in levels.items():
        low, high = min(found), max(found)
        if low == high:
            said.append(f"{low}% {what}" + (" (too few samples for 95%)" if what in short else ""))
        else:
            said.append(f"{low}-{high}% {what}" + (" (under 95% where a run had too few samples: the hover says "
                                                   "each)" if what in short else ""))
    return "; ".join(said)

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

One assumption remains: the samples are independent draws.  A run's latencies are not quite
(a request that queued long is followed by others that queue long), so a run's own interval
is narrower than the truth when the server queues; the median of independent repeats is the
check on it, and its interval needs none (median_interval).  A run's mean has an interval
that needs no independence either, from the means of its consecutive batches
(batch_means_interval).

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
    bound, count), ...] in ascending order.  The l-th smallest sample lies in the bucket
    where the running count reaches l; within it, the bucket's samples are taken as spread
    evenly from its lower edge to its upper one.  A bucket is under 0.8% wide, so the ends
    are within that of the exact order statistics: taking whole buckets instead, a bucket
    wider at each end, held the true p99 of 5,000 exponential samples in 97.6% of 2,000
    runs, past what the ranks claim (tests/test_uncertainty.py)."""
    cumulative, total = [], 0
    for _, count in buckets:
        total += int(count)
        cumulative.append(total)
    low, high, reached = quantile_ranks(total, q, confidence)

    def value_of(rank: int) -> float:
        i = _first(lambda j: cumulative[j] >= rank, len(cumulative) - 1)
        upper, count = float(buckets[i][0]), int(buckets[i][1])
        lower = upper / (1 + BUCKET_WIDTH)
        before = cumulative[i] - count
        return lower + (upper - lower) * (rank - before - 0.5) / count

    return Interval(value_of(low), value_of(high), reached, confidence)


# A run's mean latency has an interval of its own too (mean_columns)
MEAN = "mean"
MEAN_LEAST_SAMPLES = 30  # fewer, and the normal approximation of a long-tailed mean is not to be trusted


def interval_columns(metric: str) -> tuple[str, str, str] | None:
    """The row's columns of `metric`'s own interval (lat_p99_us: lat_p99_low_us,
    lat_p99_high_us, lat_p99_confidence), or None for a metric that has none: the one place
    their names are made (labkit.row, percentile_columns, mean_columns, the plots, the verdicts)."""
    name = metric.removeprefix("lat_").removesuffix("_us")
    if metric != f"lat_{name}_us" or (name not in PERCENTILES and name != MEAN):
        return None
    return f"lat_{name}_low_us", f"lat_{name}_high_us", f"lat_{name}_confidence"


def percentile_columns(buckets, reported: dict | None = None) -> dict:
    """The row's interval of each of its latency percentiles, from the run's histogram
    (interval_columns: low, high, and the confidence the samples reached: below CONFIDENCE,
    too few samples for that percentile); NaN where there were no samples.  The percentile
    the generator `reported` ({"p99": µs}: the middle of its bucket) is always inside its
    interval (at the extremes the two can differ by part of a bucket)."""
    columns = {}
    total = sum(int(count) for _, count in buckets or [])
    for name, q in PERCENTILES.items():
        low, high, sure = interval_columns(f"lat_{name}_us")
        if not total:
            columns.update({low: math.nan, high: math.nan, sure: math.nan})
            continue
        interval = histogram_quantile_interval(buckets, q)
        value = (reported or {}).get(name, math.nan)
        value = value if isinstance(value, (int, float)) and value == value else interval.low
        columns.update({low: min(interval.low, value), high: max(interval.high, value), sure: interval.confidence})
    return columns


def histogram_mean_interval(buckets, mean: float | None = None, confidence: float = CONFIDENCE) -> Interval:
    """The mean of samples known by their bucket, with the central limit theorem's interval:
    mean ± z · s / √n, s the samples' standard deviation (each taken at its bucket's middle,
    under 0.4% from the truth).  Unlike the order statistics it assumes the mean is near
    normal, which for a long tail needs many samples: under MEAN_LEAST_SAMPLES it says it is
    not enough (no interval: NaN).  Like them it takes the samples as independent, which a
    queue's are not: the interval is then narrower than the truth.  `mean`: the exact one the
    generator summed, if given (the middle of the interval)."""
    counts = [int(count) for _, count in buckets or []]
    n = sum(counts)
    if not n:
        return Interval(math.nan, math.nan, math.nan, confidence)
    middles = [float(upper) * (1 + 1 / (1 + BUCKET_WIDTH)) / 2 for upper, _ in buckets]
    estimated = sum(m * c for m, c in zip(middles, counts)) / n
    centre = estimated if mean is None or mean != mean else float(mean)
    if n < MEAN_LEAST_SAMPLES:
        return Interval(math.nan, math.nan, math.nan, confidence)
    variance = sum(c * (m - estimated) ** 2 for m, c in zip(middles, counts)) / (n - 1)
    z = _normal_quantile(1 - (1 - confidence) / 2)
    half = z * math.sqrt(variance / n)
    return Interval(centre - half, centre + half, confidence, confidence)


# The batch-means method (A. M. Law, Simulation Modeling and Analysis, 5th ed., McGraw-Hill
# 2015, chapter 9, on a steady-state mean's interval): a run's consecutive samples cut into
# k batches; where each batch is long beside the time a queue remembers, the k batch means
# are nearly independent and nearly normal, and their mean has Student's t interval with
# k - 1 degrees of freedom, whatever the samples' correlation.  The generator reports 20 (the loadgen's BATCHES).
BATCHES_LEAST = 10           # batch means fewer than this: their spread says too little
BATCH_LEAST_SAMPLES = 30     # samples in a batch fewer than this: its mean is not near normal


def batch_means_interval(batches, mean: float | None = None,
                         confidence: float = CONFIDENCE) -> Interval | None:
    """The interval of a run's mean latency from its batches ([[samples, mean], ...] in the
    run's order: the row's lat_batches): mean ± t(k-1) · s / √k over the k batch means, s
    their standard deviation; None where fewer than BATCHES_LEAST batches hold
    BATCH_LEAST_SAMPLES samples each.  Unlike histogram_mean_interval it does not take the
    samples as independent: a queue's correlated waits widen it as they should.  `mean`:
    the run's exact mean, if given (the middle of the interval)."""
    means = [float(m) for n, m in batches or [] if m is not None and n >= BATCH_LEAST_SAMPLES]
    if len(means) < BATCHES_LEAST:
        return None
    k = len(means)
    centre = sum(means) / k
    spread = math.sqrt(sum((m - centre) ** 2 for m in means) / (k - 1))
    half = _t_quantile(1 - (1 - confidence) / 2, k - 1) * spread / math.sqrt(k)
    centre = centre if mean is None or mean != mean else float(mean)
    # a latency's mean is never below 0: a skewed run's t interval can reach past it (one batch
    # far above the rest), and cut there it holds the true mean as often as before
    return Interval(max(centre - half, 0.0), centre + half, confidence, confidence)


def mean_columns(buckets, mean: float | None = None, batches=None) -> dict:
    """The row's interval of its mean latency (interval_columns("lat_mean_us")): from its
    batch means where it has enough of them (batch_means_interval), else from its samples as
    if independent (histogram_mean_interval: narrower than the truth for a queue); NaN without
    samples, or with too few for the normal approximation."""
    low, high, sure = interval_columns(f"lat_{MEAN}_us")
    interval = batch_means_interval(batches, mean) or histogram_mean_interval(buckets, mean)
    return {low: interval.low, high: interval.high, sure: interval.confidence}


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
    its row has one (run_low, run_high: a percentile's, from its samples); else none (low =
    high = the value, "one run, no interval")."""
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
        return run_low, run_high, f"{reached} interval from the run's own samples{short}"
    return values[0], values[0], "one run, no interval"


_KIND = re.compile(r"^(\d+)% (interval .*?)( \(too few samples for 95%\))?$")


def kinds_text(kinds) -> str:
    """point_interval's kinds of interval, each said once: one kind at several levels (a run
    of few samples reaches less than 95%) as their range, "16-97% interval from the run's own
    samples (under 95% where a run had too few samples: the hover says each)", not eight
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

"""Repeat a point until its figure is known well enough: netperf's -I 95,10 -i 10,6 for the lab.

    Target("lat_p99_us", 0.10).judge([812.0, 790.5, ...]) -> Reached(...)

A sweep given a Target measures each grid point in two stages.  The first FIRST (6) ok
repeats size the point: from their spread (standard deviation over median) it takes the
fewest repeats in all, from LEAST_SIZED (10) to `most`, whose median's 95% interval would be
within `relative` of the median (the interval's ranks at that many repeats, their spacing as
a normal sample's: expected order statistics, Blom's approximation).  Exactly that many are
run, and the interval is computed on all of them.  A point whose first repeats ask for more
than `most` stops there, not reached, saying so; the sweep's time budget stops it too.

Invariants: whether a point is reached is decided by its first FIRST repeats, never by the
interval it ends with.  Stopping when the interval first looks narrow stops on lucky draws:
in a seeded simulation (lognormal runs, ±10%, at most 10) the points that rule calls reached
hold the true median in 93%, 84% and 74% at 10%, 15% and 20% run-to-run variation.  Sized
as here they hold it in 97%, 95% and 94% (at most 20, the default; 2,000 points a level,
tests/measurement/test_repeat_until.py); at most 10, fewer points are reached and more of those are
lucky: 97%, 94% and 92%.  The interval can come out wider than the target at a point reached
(its first repeats under-read the spread): the point says so.  The interval judged is the
one the figures draw for a point of several repeats (the median's, over repeats:
uncertainty.median_interval, order statistics, no assumption about their distribution); a
point whose repeats failed has no values and is not repeated for the target (its failure is
the answer); what was reached is said per point, never only "done".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from labkit import uncertainty
from labkit.errors import LabError

if TYPE_CHECKING:
    import pandas as pd

LEAST_FOR_95 = 6  # the fewest repeats whose median's interval reaches 95% (1 - 2 x 0.5^6 = 97%)
FIRST = LEAST_FOR_95  # the first stage: the repeats whose spread sizes the point
LEAST_SIZED = 10  # the fewest repeats a sized point runs: the first stage diluted by fresh ones


@lru_cache(maxsize=None)
def _span(n: int) -> float:
    """Half the distance between the ranks of the median's 95% interval of n repeats, in
    standard deviations of a normal sample (expected order statistics, Blom: (i - 3/8) / (n + 1/4))."""
    low, high, _ = uncertainty.quantile_ranks(n, 0.5)
    normal = statistics.NormalDist()
    return (normal.inv_cdf((high - 0.375) / (n + 0.25)) - normal.inv_cdf((low - 0.375) / (n + 0.25))) / 2


@dataclass(frozen=True)
class Reached:
    repeats: int          # ok values judged
    median: float
    half_width: float     # half the interval's width, relative to the median (NaN: none)
    confidence: float     # what the repeats' ranks give
    done: bool            # the repeats the first stage sized were all measured
    sized: int | None = None  # the repeats the first stage asked for (None: not sized yet, or more than most)

    def text(self, target: Target) -> str:
        if self.repeats == 0:
            return "no repeat succeeded"
        if self.half_width != self.half_width:
            return f"{self.repeats} repeat{'s' if self.repeats != 1 else ''}: no interval yet"
        said = f"±{self.half_width:.1%} at {self.confidence:.0%} after {self.repeats} repeats"
        if self.done:
            return said + ("" if self.half_width <= target.relative else
                           f" (sized for ±{target.relative:.0%} from the first {FIRST}; it came out wider)")
        if self.repeats >= FIRST and self.sized is None:
            return said + (f" (target ±{target.relative:.0%} not reached: the first {FIRST} repeats' spread "
                           f"asks for more than {target.most})")
        return said + f" (target ±{target.relative:.0%} not reached)"


@dataclass(frozen=True)
class Target:
    metric: str           # the row's column whose median is to be known
    relative: float       # ... to within this share of itself (0.10: ±10%)
    most: int = 20        # repeats at the most, per point

    def __post_init__(self):
        if not 0 < self.relative < 1:
            raise LabError(f"a target of ±{self.relative:.0%} is not one a sweep can reach",
                           "give a target between 1% and 99% of the median, e.g. 10")
        if self.most < LEAST_FOR_95:
            raise LabError(f"at most {self.most} repeats can never give a 95% interval of the median",
                           f"allow {LEAST_FOR_95} repeats or more (5 give [min, max], a 94% interval)")

    def describe(self) -> str:
        return (f"repeat until the median of {self.metric} is known to ±{self.relative:.0%} at 95%: the first "
                f"{FIRST} repeats' spread sizes each point ({min(LEAST_SIZED, self.most)} to {self.most} repeats; "
                f"one that would need more stops at {FIRST}, not reached)")

    def sized(self, first: list[float]) -> int | None:
        """The repeats in all that the FIRST ok values `first` ask for (None: more than most)."""
        median = statistics.median(first)
        if median == 0:
            return None
        mean = math.fsum(first) / len(first)
        spread = math.sqrt(math.fsum((v - mean) ** 2 for v in first) / (len(first) - 1)) / abs(median)
        return next((n for n in range(min(LEAST_SIZED, self.most), self.most + 1)
                     if spread * _span(n) <= self.relative), None)

    def judge(self, values: list[float]) -> Reached:
        values = [float(v) for v in values if v is not None and v == v]
        if not values:
            return Reached(0, math.nan, math.nan, math.nan, False)
        median = statistics.median(values)
        sized = self.sized(values[:FIRST]) if len(values) >= FIRST else None
        done = sized is not None and len(values) >= sized
        if len(values) < 2 or median == 0:
            return Reached(len(values), median, math.nan, math.nan, False, sized)
        interval = uncertainty.median_interval(values)
        half = (interval.high - interval.low) / 2 / abs(median)
        return Reached(len(values), median, half, interval.confidence, done and interval.enough, sized)

    def more(self, values: list[float], repeats: int) -> bool:
        """Whether a point with `repeats` repeats so far (`values`: its ok ones, in the order
        measured) needs another: the first stage until FIRST are ok, then up to its size."""
        values = [v for v in values if v is not None and v == v]
        if repeats >= self.most or not values:
            return False
        if len(values) < FIRST:
            return True
        sized = self.sized(values[:FIRST])
        return sized is not None and len(values) < sized


def summary(target: Target, reached: list[tuple[dict, Reached]], axes: list[str]) -> str:
    """What a sweep's target came to, in a sentence: at how many points it was reached (its
    sized repeats all measured), where the interval came out wider than the target, and each
    point where it was not reached, with what was."""
    done = [r for _, r in reached if r.done]
    said = f"target: the median of {target.metric} to ±{target.relative:.0%} at 95%: reached at {len(done)} of " \
           f"{len(reached)} point(s)"
    if done:
        counts = sorted(r.repeats for r in done)
        said += f" ({counts[0]} to {counts[-1]} repeats)" if counts[0] != counts[-1] else f" ({counts[0]} repeats)"
        wider = sum(1 for r in done if r.half_width > target.relative)
        if wider:
            said += f", its interval wider than the target at {wider} of them (sized from their first {FIRST})"
    missed = [(point, r) for point, r in reached if not r.done]
    # a point named by the axes that tell the points apart (all of them where none does)
    axes = [a for a in axes if len({repr(point.get(a)) for point, _ in reached}) > 1] or axes
    if missed:
        said += "; not at " + "; ".join(
            f"{', '.join(f'{axis} {point.get(axis)}' for axis in axes)}: {r.text(target)}" for point, r in missed[:5])
        if len(missed) > 5:
            said += f"; and {len(missed) - 5} more"
    return said


def by_repeats(values) -> "pd.DataFrame":
    """How the median's interval shrinks as repeats come in: after each of `values` (a point's
    repeats, in the order measured), the median of those so far, its interval and the
    confidence it reaches (none after one), and its half-width over the median."""
    import pandas as pd

    rows, seen = [], []
    for value in values:
        if value is None or value != value:
            continue
        seen.append(float(value))
        median = statistics.median(seen)
        if len(seen) < 2:
            rows.append({"repeats": 1, "median": median, "from": math.nan, "to": math.nan, "sure to": math.nan,
                         "± of median": math.nan})
            continue
        interval = uncertainty.median_interval(seen)
        rows.append({"repeats": len(seen), "median": median, "from": interval.low, "to": interval.high,
                     "sure to": interval.confidence, "± of median": (interval.high - interval.low) / 2 / abs(median)})
    return pd.DataFrame(rows, columns=["repeats", "median", "from", "to", "sure to", "± of median"])

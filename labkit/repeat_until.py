"""Repeat a point until its figure is known well enough: netperf's -I 95,10 -i 10,6 for the lab.

    Target("lat_p99_us", 0.10, most=10).judge([812.0, 790.5, ...]) -> Reached(...)

A sweep given a Target measures each grid point's planned repeats, then more, one at a
time, until the median of the point's repeats is known to within `relative` of itself at
95% (uncertainty.median_interval: order statistics of the repeats, no assumption about
their distribution), or the point has `most` repeats, or the sweep's time budget is spent.

Invariants: the interval judged is the one the figures draw for a point of several repeats
(the median's, over repeats: what a run's own samples cannot show, how runs differ); it
needs 6 repeats at the least to reach 95% (5 give 94%: [min, max]), so `most` is at least
that; a point whose repeats failed has no values and is not repeated for the target (its
failure is the answer); what was reached is said per point, never only "done".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from labkit import uncertainty
from labkit.errors import LabError

if TYPE_CHECKING:
    import pandas as pd

LEAST_FOR_95 = 6  # the fewest repeats whose median's interval reaches 95% (1 - 2 x 0.5^6 = 97%)


@dataclass(frozen=True)
class Reached:
    repeats: int          # ok values judged
    median: float
    half_width: float     # half the interval's width, relative to the median (NaN: none)
    confidence: float     # what the repeats' ranks give
    done: bool            # within the target at 95%

    def text(self, target: Target) -> str:
        if self.repeats == 0:
            return "no repeat succeeded"
        if self.half_width != self.half_width:
            return f"{self.repeats} repeat{'s' if self.repeats != 1 else ''}: no interval yet"
        return (f"±{self.half_width:.1%} at {self.confidence:.0%} after {self.repeats} repeats"
                f"{'' if self.done else f' (target ±{target.relative:.0%} not reached)'}")


@dataclass(frozen=True)
class Target:
    metric: str           # the row's column whose median is to be known
    relative: float       # ... to within this share of itself (0.10: ±10%)
    most: int = 10        # repeats at the most, per point

    def __post_init__(self):
        if not 0 < self.relative < 1:
            raise LabError(f"a target of ±{self.relative:.0%} is not one a sweep can reach",
                           "give a target between 1% and 99% of the median, e.g. 10")
        if self.most < LEAST_FOR_95:
            raise LabError(f"at most {self.most} repeats can never give a 95% interval of the median",
                           f"allow {LEAST_FOR_95} repeats or more (5 give [min, max], a 94% interval)")

    def describe(self) -> str:
        return f"repeat until the median of {self.metric} is known to ±{self.relative:.0%} at 95% (at most {self.most})"

    def judge(self, values: list[float]) -> Reached:
        values = [float(v) for v in values if v is not None and v == v]
        if not values:
            return Reached(0, math.nan, math.nan, math.nan, False)
        median = statistics.median(values)
        if len(values) < 2 or median == 0:
            return Reached(len(values), median, math.nan, math.nan, False)
        interval = uncertainty.median_interval(values)
        half = (interval.high - interval.low) / 2 / abs(median)
        return Reached(len(values), median, half, interval.confidence,
                       interval.enough and half <= self.relative)

    def more(self, values: list[float], repeats: int) -> bool:
        """Whether a point with `repeats` repeats so far (`values`: its ok ones) needs another."""
        reached = self.judge(values)
        return repeats < self.most and reached.repeats > 0 and not reached.done


def summary(target: Target, reached: list[tuple[dict, Reached]], axes: list[str]) -> str:
    """What a sweep's target came to, in a sentence: at how many points it was reached, and
    each point where it was not, with what was."""
    done = [r for _, r in reached if r.done]
    said = f"target: the median of {target.metric} to ±{target.relative:.0%} at 95%: reached at {len(done)} of " \
           f"{len(reached)} point(s)"
    if done:
        counts = sorted(r.repeats for r in done)
        said += f" ({counts[0]} to {counts[-1]} repeats)" if counts[0] != counts[-1] else f" ({counts[0]} repeats)"
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

"""How long a sweep will take on this machine, said before it starts.

    estimate(runs, earlier_rows) -> Estimate(to_measure=40, low_s=95.0, high_s=160.0, basis="...")

Invariants: the estimate comes from what this machine measured, never from a constant: each
point to measure takes as long as the same point took here before (the median of its earlier
runs), else as long as the experiment's other points took here (their middle half), and a
point that runs for a set time (its `duration`) takes at least that.  A sweep with nothing
measured here yet says so rather than guess.  Rows keep each point's wall time
(`point_wall_s`, labkit.sweep), so the first sweep teaches the next one its length.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimate:
    to_measure: int       # points the sweep will measure (not resumed from earlier rows)
    low_s: float          # how long they take, from the faster middle of what was measured ...
    high_s: float         # ... to the slower (NaN: nothing to go by)
    basis: str            # what the figures come from, in words

    @property
    def known(self) -> bool:
        return self.to_measure == 0 or self.high_s == self.high_s

    def sentence(self) -> str:
        """The estimate as a student reads it before pressing Run."""
        if self.to_measure == 0:
            return "every point is already measured: nothing to run"
        points = f"{self.to_measure} point{'s' if self.to_measure != 1 else ''} to measure"
        if not self.known:
            return f"{points}; {self.basis}"
        low, high = duration_text(self.low_s), duration_text(self.high_s)
        return f"{points}: about {low if low == high else f'{low} to {high}'} on this machine ({self.basis})"


def estimate(runs, earlier: list[dict], hostname: str | None = None) -> Estimate:
    """How long measuring `runs` (measure.Runs, those already measured left out by the
    caller) takes, from the `earlier` rows of the same experiment: those of this machine
    (`hostname`; rows without one count), each with its wall time."""
    if not runs:
        return Estimate(0, 0.0, 0.0, "")
    timed = [row for row in earlier if _wall(row) == _wall(row)
             and (hostname is None or row.get("env_hostname", hostname) == hostname)]
    walls = sorted(_wall(row) for row in timed)
    if not walls:
        return Estimate(len(runs), math.nan, math.nan,
                        "nothing of this experiment was measured on this machine yet: the first points will tell")
    # the experiment's middle half: a typical point, neither its fastest nor a stuck one
    quartiles = statistics.quantiles(walls, n=4, method="inclusive") if len(walls) > 1 else walls * 3
    typical = (quartiles[0], quartiles[2])
    low = high = 0.0
    same = 0
    indexes: dict[tuple, dict] = {}  # by the points' columns: each point's earlier wall times
    for planned in runs:
        floor = float(planned.point.get("duration") or 0.0)  # a point that runs for a set time
        columns = tuple(sorted(planned.point))
        if columns not in indexes:
            indexes[columns] = {}
            for row in timed:
                indexes[columns].setdefault(_identity(row, columns), []).append(_wall(row))
        before = indexes[columns].get(_identity(planned.point, columns))
        if before:
            same += 1
            took = max(statistics.median(before), floor)
            low, high = low + took, high + took
        else:
            low, high = low + max(typical[0], floor), high + max(typical[1], floor)
    basis = f"from {len(timed)} point{'s' if len(timed) != 1 else ''} measured here before"
    if same < len(runs):
        basis += f"; {len(runs) - same} not measured before, taken as long as the middle half of those"
    return Estimate(len(runs), low, high, basis)


def duration_text(seconds: float) -> str:
    """12 s, 3.5 min, 1.6 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _identity(point: dict, columns: tuple) -> str:
    """A grid point's values in `columns`, as JSON keeps them (a tuple is read back as a list,
    a None as NaN), to tell the rows that measured it."""
    return json.dumps([_plain(point.get(column)) for column in columns], sort_keys=True, default=str)


def _plain(value):
    return None if isinstance(value, float) and value != value else value


def _wall(row: dict) -> float:
    try:
        value = float(row.get("point_wall_s"))
    except (TypeError, ValueError):
        return math.nan
    return value if value > 0 else math.nan

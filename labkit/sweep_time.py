"""How long a sweep will take on this machine, said before it starts.

    estimate(runs, earlier_rows) -> Estimate(to_measure=40, low_s=95.0, high_s=160.0, basis="...")

Invariants: each point to measure takes as long as the same point took on this machine before
(the median of its earlier runs), else as long as the experiment's other points took here
(their middle half), and a point that runs for a set time (its `duration`) takes at least
that.  Before any point of the experiment ran here, a cost model bounds it instead: a
start-up per point plus its requests (clients x requests) times a cost per request, the
cost the middle half of other experiments' rows on this machine give (wall time less the
start-up, over the requests completed) of the same service, else the lab's measured range for
that service (COST_PER_REQUEST_S: echo's and top's differ a hundredfold); an open loop takes its
duration plus the start-up.  Repeats a target may add (labkit.repeat_until) are counted as
a range, from the fewest it runs to its `most` per point.  Rows keep each point's wall time
(`point_wall_s`, labkit.sweep), so the first sweep teaches the next one its length.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass

# Measured here (2 cores, the lab's CPUs shared with another lab run, sweeps of 1 to 200,000
# requests a point): a point's start-up and stop, server and perf included, 0.14 to 0.5 s
# (proc_top and echo_scale with 1 to 500 clients); a request 17 to 50 us (echo, 64 B, epoll)
# to 1.1 to 1.4 ms (top: a scan of /proc).
START_UP_S = (0.14, 0.5)
COST_PER_REQUEST_S = {"echo": (15e-6, 50e-6), "top": (1.1e-3, 1.5e-3)}
ANY_SERVICE_S = (15e-6, 1.5e-3)  # a service measured above by none of these (sink, spin): the whole range


def cost_per_request(service: str | None) -> tuple[float, float]:
    """The lab's measured range of a request's cost for `service` (ANY_SERVICE_S where none was)."""
    return COST_PER_REQUEST_S.get(service or "", ANY_SERVICE_S)


@dataclass(frozen=True)
class Estimate:
    to_measure: int       # points the sweep will measure (not resumed from earlier rows)
    low_s: float          # how long they take, from the faster middle of what was measured ...
    high_s: float         # ... to the slower (NaN: nothing to go by)
    basis: str            # what the figures come from, in words
    most: int | None = None  # points at the most, a target's repeats counted (None: to_measure)

    @property
    def known(self) -> bool:
        return self.to_measure == 0 or self.high_s == self.high_s

    def sentence(self) -> str:
        """The estimate as a student reads it before pressing Run."""
        most = self.to_measure if self.most is None else self.most
        if most == 0:
            return "every point is already measured: nothing to run"
        count = f"{self.to_measure}" if most == self.to_measure else f"{self.to_measure} to {most}"
        points = f"{count} point{'s' if most != 1 else ''} to measure"
        if not self.known:
            return f"{points}; {self.basis}"
        low, high = duration_text(self.low_s), duration_text(self.high_s)
        return f"{points}: about {low if low == high else f'{low} to {high}'} on this machine ({self.basis})"


def estimate(runs, earlier: list[dict], hostname: str | None = None, added=(), others: list[dict] = ()) -> Estimate:
    """How long measuring `runs` (measure.Runs, those already measured left out by the
    caller) takes, from the `earlier` rows of the same experiment: those of this machine
    (`hostname`; rows without one count), each with its wall time.  `added`: (run, fewest,
    most) for each point a target may repeat past its runs.  `others`: rows of other
    experiments, for the cost model when none of this one's were measured here."""
    added = [(planned, low, high) for planned, low, high in added if high > 0]
    fewest = len(runs) + sum(low for _, low, _ in added)
    most = len(runs) + sum(high for _, _, high in added)
    if not most:
        return Estimate(0, 0.0, 0.0, "")
    timed = [row for row in earlier if _here(row, hostname) and _wall(row) == _wall(row)]
    if timed:
        took, basis = _from_rows(timed)
    else:
        took, basis = _cost_model([row for row in others if _here(row, hostname)])
    low = high = 0.0
    for planned, times_low, times_high in [*((planned, 1, 1) for planned in runs), *added]:
        point_low, point_high = took(planned)
        low, high = low + times_low * point_low, high + times_high * point_high
    if high != high:  # a point whose requests are not known: nothing to bound it by
        return Estimate(fewest, math.nan, math.nan,
                        "nothing of this experiment was measured on this machine yet: the first points will tell",
                        most)
    return Estimate(fewest, low, high, basis(), most)


def _from_rows(timed: list[dict]):
    """(took(run) -> (low s, high s), basis() -> words) from this experiment's rows here."""
    walls = sorted(_wall(row) for row in timed)
    # the experiment's middle half: a typical point, neither its fastest nor a stuck one
    quartiles = statistics.quantiles(walls, n=4, method="inclusive") if len(walls) > 1 else walls * 3
    indexes: dict[tuple, dict] = {}  # by the points' columns: each point's earlier wall times
    new: set[int] = set()

    def took(planned) -> tuple[float, float]:
        floor = float(planned.point.get("duration") or 0.0)  # a point that runs for a set time
        columns = tuple(sorted(planned.point))
        if columns not in indexes:
            indexes[columns] = {}
            for row in timed:
                indexes[columns].setdefault(_identity(row, columns), []).append(_wall(row))
        before = indexes[columns].get(_identity(planned.point, columns))
        if before:
            median = max(statistics.median(before), floor)
            return median, median
        new.add(id(planned))
        return max(quartiles[0], floor), max(quartiles[2], floor)

    def basis() -> str:
        said = f"from {len(timed)} point{'s' if len(timed) != 1 else ''} measured here before"
        if new:
            said += f"; {len(new)} not measured before, taken as long as the middle half of those"
        return said

    return took, basis


def _cost_model(others: list[dict]):
    """(took, basis) before any point of the experiment ran here: start-up plus requests x a
    cost per request, from `others` (rows of other experiments here) or COST_PER_REQUEST_S;
    basis is None where there is nothing to bound (no point whose requests are known)."""
    sources: dict[str | None, str] = {}

    def per_request(service: str | None) -> tuple[float, float]:
        """The cost per request of `service`'s points: the middle half of other experiments' rows of
        it here (4 or more), else the lab's measured range for it."""
        costs = sorted((_wall(row) - START_UP_S[0]) / row["requests_ok"] for row in others
                       if _wall(row) == _wall(row) and not row.get("duration") and row.get("service") == service
                       and isinstance(row.get("requests_ok"), int) and row["requests_ok"] > 0)
        costs = [cost for cost in costs if cost > 0]
        if len(costs) >= 4:
            quartiles = statistics.quantiles(costs, n=4, method="inclusive")
            sources[service] = f"the cost per request of {len(costs)} {service} points of other experiments here"
            return quartiles[0], quartiles[2]
        low, high = cost_per_request(service)
        sources[service] = (f"{_cost_text(low)} to {_cost_text(high)} a request"
                            f"{f' of {service}' if service in COST_PER_REQUEST_S else ''}, the lab's measured range")
        return low, high

    def took(planned) -> tuple[float, float]:
        duration = planned.point.get("duration")
        if duration:
            return START_UP_S[0] + float(duration), START_UP_S[1] + float(duration)
        requests = _requests(planned)
        if requests is None:
            return math.nan, math.nan
        load = getattr(planned, "load", None)
        low, high = per_request(getattr(load, "service", None) or planned.point.get("service"))
        return START_UP_S[0] + requests * low, START_UP_S[1] + requests * high

    def basis() -> str:
        said = "; ".join(dict.fromkeys(sources.values())) or "its requests"
        return (f"nothing of this experiment measured here yet: a bound from its requests, "
                f"{START_UP_S[0]:g} to {START_UP_S[1]:g} s a point to start and {said}")

    return took, basis


def _cost_text(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-3 else f"{seconds * 1e3:.1f} ms"


def _requests(planned) -> int | None:
    """The requests a closed-loop point sends: clients x requests per client (None: not known)."""
    load = getattr(planned, "load", None)
    if load is not None:
        return int(load.clients) * int(load.requests)
    clients = planned.point.get("clients")
    return int(clients) * int(planned.point.get("requests") or 1) if clients else None


def _here(row: dict, hostname: str | None) -> bool:
    return hostname is None or row.get("env_hostname", hostname) == hostname


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

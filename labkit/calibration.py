"""The queueing calibration held to its own noise: each run of the spin service beside what the
textbook's queue gives the very requests that run made, and a point's replications summed up
as one ratio with a distribution-free interval.

    replay(row, floor, seed)   a Replay: the mean and p99 response predicted for `row`'s run
                               from its own schedule and service draws, its own loop cost and
                               the floor's distribution (a Replay of NaN where not measurable)
    ratio_interval(ratios)     the median of a point's replications' ratios, its interval
                               (labkit.uncertainty.median_interval) and the level it reaches
    verdict_counts(rows)       the self-checks a point's replications failed, each with how
                               many of them failed it ("cpu_shared 5/5")

Invariants.  Common random numbers: the replay recomputes the arrival times
(labkit.schedule, the recipe of csrc/loadgen/arrivals.c) and the spin of every request
(labkit.spin_draws, exchange.c) the load generator used for the row's --seed, so the
workload's own run-to-run variation (a lucky or an unlucky burst of arrivals, a few long
spins) is in the measured figure and in the predicted one alike, and largely cancels in
their ratio.  The server's service time of request g is its spin plus the loop's cost per
request, taken from the row's own server CPU (task-clock over the requests served, less
their mean spin; at least 0).  Each request's response is the first-come-first-served queue's
wait and service (queue_theory.lindley, the queue starting empty when the run starts) plus
a draw of the time outside the queue from the SPIN 0 run's histogram (ground_truth.Floor
.outside_us): the floor is convolved with the queue's response, not its mean added to a
percentile.  The requests the generator left out as warm-up (due before --warmup seconds)
are left out here too.  A figure not measured is NaN, never 0.

What it still leaves out, and the ratio therefore shows: epoll serves the connections it
reports ready in its own order, not strictly first come first served (the mean wait does not
depend on the order, a percentile does); the spin is wall-clock time (csrc/services/spin.c),
so a server held off its CPU by another task serves late without spending more CPU; and the
floor is the one measured at SPIN 0 under a light load.

A point's interval is that of the median of its replications' ratios.  Each replication has
its own seed, its own floor run (a SPIN 0 run of the same round) and its own loop cost, so the
ratios are independent draws and their spread holds the prediction's uncertainty as well as
the measurement's: the order-statistic interval needs nothing else (5 replications give a
94% interval, 6 a 97% one).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from labkit import queue_theory, schedule, spin_draws, uncertainty
from labkit.row import OK

NAN = math.nan


@dataclass(frozen=True)
class Replay:
    """A run's predicted mean and p99 response (µs), the loop's cost per request it used
    (µs: the row's server CPU per request less its requests' mean spin, before the clamp at
    0) and the requests it predicted (those after the warm-up)."""

    mean_us: float
    p99_us: float
    overhead_us: float
    requests: int

    @classmethod
    def not_measurable(cls, overhead_us: float = NAN) -> "Replay":
        return cls(NAN, NAN, overhead_us, 0)


def planned(row: dict) -> int:
    """The requests the run planned: the generator's report, else rate x duration (truncated,
    as loadgen.c's events engine plans them)."""
    reported = _number(row.get("requests_planned"))
    if reported and reported > 0:
        return int(reported)
    return int(float(row["rate"]) * float(row["duration"]))


def warm_up_kept(row: dict, due_s: np.ndarray) -> np.ndarray:
    """Which requests the run measured: those due at or after --warmup when it is seconds
    ("0.5s"), those past the first N when it is a count; all without a warm-up."""
    warmup = str(row.get("warmup") or "").strip()
    if not warmup or warmup in ("0", "0s"):
        return np.ones(len(due_s), dtype=bool)
    if warmup.endswith("s"):
        return due_s >= float(warmup[:-1])
    return np.arange(len(due_s)) >= int(warmup)


def replay(row: dict, floor, seed: int = 1) -> Replay:
    """The mean and p99 response the textbook's queue gives `row`'s requests (the module's
    doc), `floor` (a ground_truth.Floor) outside the queue, its draws from `seed`."""
    served = _number(row.get("requests_ok")) or 0
    cpu = _number(row.get("server_cpu_us_per_request"))
    if row.get("status", OK) != OK or not served or cpu != cpu or not floor.measured:
        return Replay.not_measurable()
    n, drawn = planned(row), _number(row.get("seed"))
    drawn = int(drawn) if drawn == drawn else 1  # none given: the generator's default, 1
    due_s = np.asarray(schedule.due_times_s(row["arrivals"], float(row["rate"]), n, drawn))
    spins = spin_draws.spin_us(row.get("spin-dist") or "fixed", int(row["spin-us"]), drawn, int(row["clients"]), n)
    overhead = cpu - float(spins[:int(served)].mean())
    response = queue_theory.lindley(due_s * 1e6, spins + max(overhead, 0.0))[warm_up_kept(row, due_s)]
    if not len(response):
        return Replay.not_measurable(overhead)
    total = response + floor.outside_us(len(response), seed)
    return Replay(float(total.mean()), float(np.quantile(total, 0.99)), overhead, len(total))


def ratio_interval(ratios) -> tuple[float, uncertainty.Interval | None]:
    """The median of a point's replications' ratios (NaN ones left out) and its
    distribution-free interval (None with fewer than 2: one ratio bounds nothing)."""
    values = [float(r) for r in ratios if r == r]
    if not values:
        return NAN, None
    median = float(np.median(values))
    return median, uncertainty.median_interval(values) if len(values) >= 2 else None


def verdict_counts(rows) -> str:
    """The self-checks that `rows` (a point's replications) failed, each named once with how
    many of them failed it, most often first: "cpu_shared 5/5, not_steady 2/5"; "" when every
    check held everywhere."""
    counts = Counter(name for row in rows for name in (row.get("verdicts") or {}))
    return ", ".join(f"{name} {count}/{len(rows)}" for name, count in
                     sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return NAN

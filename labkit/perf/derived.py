"""The ratios the course plots (IPC, branch-miss rate, CPUs utilized), and the
load generator's getrusage as perf-style counters where perf cannot count."""

from __future__ import annotations

import math

from labkit.errors import LabError
from labkit.perf.parse import DEFAULT_EVENTS, NAN, complete

# ---------------------------------------------------------------------------
# Ratios
# ---------------------------------------------------------------------------

def _ratio(numerator, denominator, scale: float = 1.0) -> float:
    try:
        numerator, denominator = float(numerator), float(denominator)
    except (TypeError, ValueError):
        return NAN
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return NAN
    return scale * numerator / denominator


def derive(values: dict, elapsed_s: float | None = None) -> dict:
    """`values` plus ipc, branch-miss-rate (%) and cpus-utilized; NaN when an input is missing."""
    out = dict(values)
    out["ipc"] = _ratio(values.get("instructions"), values.get("cycles"))
    out["branch-miss-rate"] = _ratio(values.get("branch-misses"), values.get("branches"), 100.0)
    out["cpus-utilized"] = _ratio(values.get("task-clock"),
                                  None if elapsed_s is None else elapsed_s * 1000.0)
    return out


def rusage_counters(rusage: dict) -> dict[str, float]:
    """The load generator's getrusage() summary as perf-style counters (the client side
    when perf is not usable); events getrusage cannot know are NaN."""
    if not isinstance(rusage, dict):
        raise LabError(f"rusage must be the load generator's JSON object, got {type(rusage).__name__}",
                       "pass the 'rusage' object of loadgen's JSON summary")

    def total(*keys) -> float:
        try:
            return sum(float(rusage[k]) for k in keys)
        except (KeyError, TypeError, ValueError):
            return NAN

    values = {
        "task-clock": total("user_s", "sys_s") * 1000.0,
        "context-switches": total("voluntary_ctxt_switches", "involuntary_ctxt_switches"),
        "page-faults": total("minor_faults", "major_faults"),
    }
    return complete(values, DEFAULT_EVENTS)


def fill_missing(counters: dict[str, float], fallback: dict[str, float]) -> dict[str, float]:
    """`counters` with its NaN values taken from `fallback` where that has a number.

    For the client under paranoid 2: perf cannot count its context switches,
    the load generator's getrusage can (fallback = rusage_counters(...))."""
    return {event: fallback.get(event, NAN) if math.isnan(value) else value
            for event, value in counters.items()}

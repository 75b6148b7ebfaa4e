"""Whether a point measured what it meant to: the self-checks each row carries, never silent.

    judge(row) -> {"rate_not_reached": "offered rate not reached: 2,412 of the 3,000 requests due in
                   the measured window completed (80%)", ...}

Each entry is a check that failed at that point, with its reason in words, the check's
title first, up to a colon (title()); an empty dict: every check held.  measure.point
stores it in the row (`verdicts`); the figures draw a point that failed one as a hollow
mark, its title under the chart and its reason in the hover (labkit.plots), and
relevant() says which verdicts bear on which metric.  Each check has a known false-alarm
rate on a stationary simulated queue, at most 5% (tests/measurement/test_verdicts_queue.py), and fires
on a planted fault:

  rate_not_reached    open loop: fewer requests completed than the schedule had due in the
                      measured window (requests_due_in_window, counted from the schedule
                      itself), by more than RATE_TOLERANCE; or the completed rate off the
                      nominal one by more than RATE_TOLERANCE, or for Poisson arrivals by
                      more than three of the schedule's own standard deviations (1/sqrt(N)
                      of N requests: a shortfall smaller than that, the check cannot see).  A
                      server that finishes late has completed what was due but taken longer:
                      its completed rate says so;
  generator_saturated the load generator's loops were running, or waiting for their CPU, all
                      along (measure.client_saturated): it measured itself, not the server;
  generator_late      open loop: the generator itself started requests late (send_lateness:
                      only requests whose connection was free at their due time), its p99
                      lateness LATE_SHARE of the latency p99 or more: the tail is the
                      generator's;
  cpu_shared          other tasks, the hypervisor (steal) or a run queue took the server's CPU
                      for part of the run (labkit.cpu_sharing.reason);
  not_steady          the run's first half and its second disagree about its median beyond what
                      the run's own batches allow (labkit.batches.drift: a 1% test on the
                      batches' shares at or below the run's median, and 10 points apart),
                      judged where the run has effective samples enough: a queue still
                      growing, a warm-up not left out, a neighbour that came and went;
  too_few_for_<p>     the run's samples cannot bound that latency percentile at 95%: a queue's
                      samples are correlated, and labkit.batches says how many independent ones
                      they are worth (p99.9 needs tens of thousands).
"""

from __future__ import annotations

import math

from labkit import batches, cpu_sharing, uncertainty

RATE_TOLERANCE = 0.02  # completed within 2% of the requests due
LATE_SHARE = 0.25      # the generator's own p99 lateness a quarter of the latency p99, or more
LATE_LEAST_US = 200    # ... and 200 µs at least (a timer's slack on a loaded machine is tens of µs)


def judge(row: dict) -> dict:
    """The self-checks `row` failed, each with its reason (see the module's doc)."""
    failed = {}
    short = _rate_shortfall(row)
    if short:
        failed["rate_not_reached"] = f"offered rate not reached: {short}"
    if row.get("client_saturated"):
        failed["generator_saturated"] = ("generator saturated: the load generator's loops were running, or "
                                         "waiting for their CPU, all along: it measured itself")
    late, p99 = _number(row.get("send_lateness_p99_us")), _number(row.get("lat_p99_us"))
    if late == late and p99 == p99 and late >= LATE_LEAST_US and late >= LATE_SHARE * p99:
        failed["generator_late"] = (f"generator late: it started 1% of its requests {late:,.0f} µs or more after "
                                    f"their due time (of a p99 of {p99:,.0f} µs): the tail is partly its own")
    shared = cpu_sharing.reason(row)
    if shared:
        failed["cpu_shared"] = shared
    drift = _drift(row)
    if drift:
        failed["not_steady"] = f"not steady: {drift}"
    failed.update(_too_few(row))
    return failed


def _rate_shortfall(row: dict) -> str:
    """What fell short of the rate offered, in words; "" where nothing did."""
    due, measured = _number(row.get("requests_due_in_window")), _number(row.get("requests_measured"))
    if due == due and due > 0 and measured == measured and measured < due * (1 - RATE_TOLERANCE):
        return (f"{measured:,.0f} of the {due:,.0f} requests due in the measured window completed "
                f"({measured / due:.0%})")
    rate, completed = _number(row.get("rate")), _number(row.get("completed_rps"))
    if not (rate and rate > 0 and completed == completed):
        return ""
    # a Poisson schedule's own rate over N requests is off the nominal one by 1/sqrt(N) (one
    # standard deviation): three of them are its own variation, not the server's
    count = measured if measured == measured and measured > 0 else _number(row.get("lat_samples"))
    poisson = row.get("arrivals") == "poisson" and count == count and count > 0
    tolerance = max(RATE_TOLERANCE, 3 / math.sqrt(count)) if poisson else RATE_TOLERANCE
    if abs(completed / rate - 1) > tolerance:
        return f"completed {completed:,.0f}/s of the {rate:,.0f}/s offered ({completed / rate:.0%})"
    return ""


def _drift(row: dict) -> str:
    """Where the run's two halves disagree about its median beyond its batches' noise."""
    below, counts = (row.get("lat_batch_below") or {}).get("p50"), row.get("lat_batches")
    if not below or not counts or len(below) != len(counts) or len(below) % 2:
        return ""
    paired = batches.pairs([int(n or 0) for n, _ in counts])
    under = (row.get("lat_batch_under") or {}).get("p50")
    under = batches.pairs(under) if under and len(under) == len(below) else None
    first, second, drifted = batches.drift(batches.pairs(below), paired, under)
    if not drifted:
        return ""
    median = _number(row.get("lat_p50_us"))
    at = f" ({median:,.0f} µs)" if median == median else ""
    return (f"{float(first):.0%} of the first half's requests were at or below the run's median{at}, "
            f"{float(second):.0%} of the second half's (the run's batches allow about 50% each)")


def _too_few(row: dict) -> dict:
    """A percentile the run cannot bound at 95%, each with why."""
    failed = {}
    samples = row.get("lat_samples")
    effective = _number(row.get("lat_effective_samples"))
    for name, q in uncertainty.PERCENTILES.items():
        if not samples:
            continue
        if row.get("lat_batch_below"):  # the batch method: how many independent samples the run is worth
            if not bool(batches.enough(effective, q)):
                failed[f"too_few_for_{name}"] = (f"too few requests for {name}: "
                                                 f"{batches.not_enough_text(effective, samples, q)}")
            continue
        confidence = _number(row.get(uncertainty.interval_columns(f"lat_{name}_us")[2]))
        if confidence == confidence and confidence < uncertainty.CONFIDENCE - 1e-12:
            failed[f"too_few_for_{name}"] = (f"too few requests for {name}: {samples:,} bound it with "
                                             f"{confidence:.0%} confidence, not 95%")
    return failed


def title(reason: str) -> str:
    """A verdict's check in a few words: its reason up to the colon."""
    return reason.split(":", 1)[0]


def relevant(verdicts: dict, metric: str) -> dict:
    """The verdicts that bear on `metric`: every one but another percentile's sample count."""
    return {name: why for name, why in (verdicts or {}).items()
            if not name.startswith("too_few_for_") or metric == f"lat_{name[len('too_few_for_'):]}_us"}


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan

"""Whether a point measured what it meant to: the self-checks each row carries, never silent.

    judge(row) -> {"rate_not_reached": "offered rate not reached: completed 2,412/s of the 3,000/s
                   offered (80%)", ...}

Each entry is a check that failed at that point, with its reason in words, the check's
title first, up to a colon (title()); an empty dict: every check held.  measure.point
stores it in the row (`verdicts`); the figures draw a point that failed one as a hollow
mark, its title under the chart and its reason in the hover (labkit.plots), and
relevant() says which verdicts bear on which metric.

  rate_not_reached    open loop: the requests completed per second over the measured window
                      fell more than RATE_TOLERANCE short of the rate offered (or went past
                      it): the server, or the generator, did not keep up, and what was
                      measured is not the load that was asked for;
  generator_saturated the load generator's loops were running, or waiting for their CPU, all
                      along (measure.client_saturated): it measured itself, not the server;
  not_steady          the run's first half and its second (of its plan, the warm-up left out
                      of the first) disagree: their 95% intervals of the median, or of the
                      p99 where both halves have samples enough to bound it, do not overlap,
                      and one half's is more than STEADY_TOLERANCE above the other's (a run
                      of thousands of requests separates halves 1% apart, a difference no
                      figure of the lab turns on).  A queue still growing, a warm-up not left
                      out, a neighbour that came and went: the run's figures are an average
                      over two different states;
  too_few_for_<p>     the run's samples cannot bound that latency percentile at 95%
                      (labkit.uncertainty: p99.9 needs thousands of requests).

The steadiness test takes each half's samples as independent; a queue's latencies are not
(labkit.uncertainty says why), so its intervals are narrower than the truth and the test errs
towards "not steady": a flagged point is worth a longer run or a repeat, not proof of drift.
"""

from __future__ import annotations

import math

from labkit import uncertainty

RATE_TOLERANCE = 0.02  # the completed rate within 2% of the offered one
STEADY_PERCENTILES = {"p50": 0.5, "p99": 0.99}  # what the two halves must agree on
STEADY_TOLERANCE = 0.25  # ... within their intervals, or within 25% of each other


def judge(row: dict) -> dict:
    """The self-checks `row` failed, each with its reason (see the module's doc)."""
    failed = {}
    rate, completed = _number(row.get("rate")), _number(row.get("completed_rps"))
    if rate and rate > 0 and completed == completed and abs(completed / rate - 1) > RATE_TOLERANCE:
        failed["rate_not_reached"] = (f"offered rate not reached: completed {completed:,.0f}/s of the "
                                      f"{rate:,.0f}/s offered ({completed / rate:.0%})")
    if row.get("client_saturated"):
        failed["generator_saturated"] = ("generator saturated: the load generator's loops were running, or "
                                         "waiting for their CPU, all along: it measured itself")
    drift = _drift(row.get("lat_histogram_halves"))
    if drift:
        failed["not_steady"] = f"not steady: {drift}"
    for name in uncertainty.PERCENTILES:
        confidence = _number(row.get(uncertainty.interval_columns(f"lat_{name}_us")[2]))
        if confidence == confidence and confidence < uncertainty.CONFIDENCE - 1e-12:
            samples = row.get("lat_samples")
            failed[f"too_few_for_{name}"] = (f"too few requests for {name}: {f'{samples:,} ' if samples else 'they '}"
                                             f"bound it with {confidence:.0%} confidence, not 95%")
    return failed


def _drift(halves) -> str:
    """Where the run's two halves disagree beyond their intervals, in words (the first
    percentile that does); "" when they agree, or there are no two halves to compare."""
    if not halves or len(halves) != 2 or not all(halves):
        return ""
    for name, q in STEADY_PERCENTILES.items():
        first, second = (uncertainty.histogram_quantile_interval(half, q) for half in halves)
        lower, upper = sorted(((first.low + first.high) / 2, (second.low + second.high) / 2))
        if first.enough and second.enough and uncertainty.differ(first, second) \
                and upper > lower * (1 + STEADY_TOLERANCE):
            return (f"{name} was {first.low:,.0f}-{first.high:,.0f} µs in the run's first half and "
                    f"{second.low:,.0f}-{second.high:,.0f} µs in its second (95% intervals)")
    return ""


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

"""The self-checks' false alarms and their power, on a simulated queue, through labkit.verdicts.

A stationary single-server queue (Lindley's recursion, Poisson arrivals, exponential
service) at utilisation 0.3 to 0.9 and the run lengths the profiles use: each check may
call at most 5% of such runs faulty.  Each fires on a planted fault: a server that slows
down half-way (not steady), a rate the server cannot reach (rate not reached).  The rows
are made as measure.point makes them from the generator's report (labkit.batches.run_columns
for the effective samples), then judged by verdicts.judge itself."""

import numpy as np
import pytest

from labkit import batches, verdicts

RUNS = 400
BATCHES = 20


def queue(rng, rho: float, n: int, slower_after: float | None = None):
    """One run: (due times, completion times) of n requests after a warm-up of n / 4, service
    mean 1 (times 1.6 from the request `slower_after` of the way through, if given)."""
    total = n + n // 4
    due = np.cumsum(rng.exponential(1 / rho, total))
    service = rng.exponential(1.0, total)
    if slower_after is not None:
        service[n // 4 + int(slower_after * n):] *= 1.6
    done = np.empty(total)
    free = 0.0
    for i in range(total):  # first come, first served
        free = max(free, due[i]) + service[i]
        done[i] = free
    return due, done


def row_of(due, done, n: int) -> dict:
    """The row measure.point makes of one run's report (the parts the checks read)."""
    warm = len(due) - n
    latency = (done - due)[warm:]
    m = n // BATCHES
    in_batches = latency[:m * BATCHES].reshape(BATCHES, m)
    median = np.sort(latency)[int(np.ceil(0.5 * n)) - 1]
    below = {"p50": [int(b) for b in (in_batches <= median).sum(axis=1)]}
    lat_batches = [[m, float(b.mean())] for b in in_batches]
    window = (due[warm], done.max())
    row = {"lat_batch_below": below, "lat_batches": lat_batches, "lat_p50_us": float(median),
           "lat_samples": n, "requests_measured": n,
           "requests_due_in_window": int(((due >= window[0]) & (due <= window[1])).sum())}
    counts = batches.pairs([m] * BATCHES)
    row["lat_effective_samples"] = float(batches.effective_samples(batches.pairs(below["p50"]), counts))
    return row


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.7, 0.9])
def test_a_steady_queue_is_called_not_steady_in_at_most_5_percent_of_runs(rho):
    rng = np.random.default_rng(int(rho * 10))
    alarms = {"not_steady": 0, "rate_not_reached": 0}
    for n in (2000, 8000):
        for _ in range(RUNS // 2):
            found = verdicts.judge(row_of(*queue(rng, rho, n), n))
            for name in alarms:
                alarms[name] += name in found
    for name, count in alarms.items():
        assert count / RUNS <= 0.05, (name, count / RUNS)


def test_a_server_that_slows_down_half_way_is_not_steady():
    rng = np.random.default_rng(5)
    fired = sum("not_steady" in verdicts.judge(row_of(*queue(rng, 0.5, 8000, slower_after=0.5), 8000))
                for _ in range(100))
    assert fired >= 80, fired


def test_a_rate_the_server_cannot_reach_is_not_reached():
    """At utilisation 1.3 the queue grows: the requests due in the window outrun those done."""
    rng = np.random.default_rng(6)
    due, done = queue(rng, 1.3, 2000)
    n = 2000
    row = row_of(due, done, n)
    window_end = due[-1]  # the run ends at its deadline: what was done by then was measured
    row["requests_measured"] = int(((done <= window_end) & (np.arange(len(due)) >= len(due) - n)).sum())
    row["requests_due_in_window"] = int(((due >= due[len(due) - n]) & (due <= window_end)).sum())
    reason = verdicts.judge(row)["rate_not_reached"]
    assert reason.startswith("offered rate not reached: ") and "requests due in the measured window" in reason


GENERATOR_LATE = [  # send lateness p99, latency p99 (µs): late?
    (5000.0, 9000.0, True),    # the generator's own lateness is half the tail
    (150.0, 300.0, False),     # under 200 µs: a timer's slack
    (300.0, 9000.0, False),    # a thirtieth of the tail
    (float("nan"), 9000.0, False),  # closed loop: not measured, no verdict
]


@pytest.mark.parametrize("late, p99, fires", GENERATOR_LATE)
def test_a_generator_that_sends_late_is_said(late, p99, fires):
    found = verdicts.judge({"send_lateness_p99_us": late, "lat_p99_us": p99})
    assert ("generator_late" in found) == fires

"""What queueing theory predicts for the `spin` service (labkit/experiments/service_time.py):
a single server, requests that each need a declared service time, arriving evenly or as a
Poisson process.

    predict(arrivals, dist, rate_rps, spin_us, overhead_us, floor_us)  a Prediction:
        the mean and p99 response time, microseconds, and how each was found
    lindley(due_us, service_us)  each request's wait + service in a first-come-first-served
        single server, for given arrival and service times (labkit.calibration replays a
        run's own draws through it)

The server's work per request is the spin it was asked for plus its loop's own cost
(reading, parsing, replying: `overhead_us`, measured as the server's CPU time per request
at SPIN 0), so its service time S is spin + overhead and its utilisation
rho = rate x E[S].  The load generator measures each response from the request's due time
to its reply, which adds the time spent outside the server's queue (the round trip
through loopback, the generator's own loop and timer): `floor_us`, measured as the mean
response at SPIN 0 under a light load, less the overhead it already holds.  So

    response = floor + wait in the queue + S.

The wait in the queue:
  * Poisson arrivals (M/G/1), its mean exactly, by the Pollaczek-Khinchine formula:
    E[Wq] = rate x E[S^2] / (2 (1 - rho));  M/M/1 (no overhead, exponential S) has a
    response time that is itself exponential, of rate 1/E[S] - rate, so its p99 is
    ln(100) / (1/E[S] - rate);
  * everything else (every p99 but M/M/1's; the mean with even arrivals, a D/G/1 queue, for
    which only special cases have a closed form -- D/D/1 never waits, D/M/1's needs the root
    of an equation): Lindley's recursion, Wq(n+1) = max(0, Wq(n) + S(n) - A(n+1)), run
    over LINDLEY_REQUESTS requests drawn from the same distributions (seeded).  It is the
    queue of the textbook, first come first served, computed rather than measured.

What this leaves out is what the lab is there to show: an event loop serves the
connections epoll reports ready in the order it reports them, not strictly first come
first served (the mean wait of a work-conserving queue does not depend on the order, a
percentile does), and the floor is taken as a constant added to each response.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LINDLEY_REQUESTS = 400_000
ARRIVALS = ("even", "poisson")
SERVICE_DISTS = ("fixed", "exp")


@dataclass(frozen=True)
class Prediction:
    """A point's predicted response time (microseconds, from the request's due time to its
    reply): its mean and p99, how each was found, and the utilisation rho it was found at."""

    mean_us: float
    p99_us: float
    rho: float
    mean_how: str
    p99_how: str

    @property
    def stable(self) -> bool:
        return self.rho < 1


def utilisation(rate_rps: float, spin_us: float, overhead_us: float = 0.0) -> float:
    """rho = rate x E[S], E[S] = spin + the loop's own cost per request."""
    return rate_rps * (spin_us + overhead_us) / 1e6


def predict(arrivals: str, dist: str, rate_rps: float, spin_us: float, overhead_us: float = 0.0,
            floor_us: float = 0.0, seed: int = 1) -> Prediction:
    """The mean and p99 response time of a single server fed `arrivals` ("even" or
    "poisson") at `rate_rps`, each request needing `spin_us` (fixed) or an exponential
    time of that mean (exp), plus `overhead_us`, measured from the due time with
    `floor_us` outside the queue (the module's docstring)."""
    if arrivals not in ARRIVALS or dist not in SERVICE_DISTS:
        raise ValueError(f"arrivals must be one of {ARRIVALS} and dist one of {SERVICE_DISTS}, "
                         f"not {arrivals!r}, {dist!r}")
    mean_s = spin_us + overhead_us
    rho = utilisation(rate_rps, spin_us, overhead_us)
    if rho >= 1:
        return Prediction(math.inf, math.inf, rho, "rho >= 1: no steady state", "rho >= 1: no steady state")
    lindley = _lindley(arrivals, dist, rate_rps, spin_us, overhead_us, seed)
    if arrivals == "poisson":
        second_moment = (spin_us ** 2 if dist == "exp" else 0.0) + mean_s ** 2  # E[S^2] = Var + E[S]^2
        wait = rate_rps / 1e6 * second_moment / (2 * (1 - rho))
        mean, mean_how = floor_us + wait + mean_s, "Pollaczek-Khinchine (M/G/1, exact)"
    else:
        mean, mean_how = floor_us + float(lindley.mean()), f"Lindley's recursion, {LINDLEY_REQUESTS:,} requests"
    if arrivals == "poisson" and dist == "exp" and overhead_us == 0:
        p99, p99_how = floor_us + math.log(100) / (1 / mean_s - rate_rps / 1e6), "M/M/1 (exact)"
    else:
        p99 = floor_us + float(np.quantile(lindley, 0.99))
        p99_how = f"Lindley's recursion, {LINDLEY_REQUESTS:,} requests"
    return Prediction(mean, p99, rho, mean_how, p99_how)


def _lindley(arrivals: str, dist: str, rate_rps: float, spin_us: float, overhead_us: float, seed: int,
             n: int = LINDLEY_REQUESTS) -> np.ndarray:
    """Each of `n` requests' time in a first-come-first-served single server (wait +
    service, microseconds), its gaps and service times drawn here (seeded): lindley()."""
    rng = np.random.default_rng(seed)
    gap_us = 1e6 / rate_rps
    gaps = rng.exponential(gap_us, n) if arrivals == "poisson" else np.full(n, gap_us)
    service = (rng.exponential(spin_us, n) if dist == "exp" else np.full(n, float(spin_us))) + overhead_us
    return lindley(np.cumsum(gaps) - gaps[0], service)


def lindley(due_us: np.ndarray, service_us: np.ndarray) -> np.ndarray:
    """Each request's time in a first-come-first-served single server (wait + service,
    microseconds), the requests arriving at `due_us` (never decreasing) and each needing
    `service_us`: Lindley's recursion W(k+1) = max(0, W(k) + S(k) - A(k+1)), A(k+1) the gap
    before request k+1, in closed form: with X(k) the sum of S(i) - A(i+1) over i < k,
    W(k) = X(k) - min(0, the least X(j), j <= k)."""
    due_us, service_us = np.asarray(due_us, dtype=float), np.asarray(service_us, dtype=float)
    if not len(due_us):
        return np.zeros(0)
    x = np.concatenate(([0.0], np.cumsum(service_us[:-1] - np.diff(due_us))))
    wait = x - np.minimum(0.0, np.minimum.accumulate(x))
    return wait + service_us

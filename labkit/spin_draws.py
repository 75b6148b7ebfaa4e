"""The spin service's service times as the load generator draws them: the microseconds each
request of a run asks for, recomputed here from the recipe csrc/loadgen/exchange.c states
(workload_spin_us), so that a prediction can replay the very draws a run made.

    spin_us(dist, mean_us, seed, clients, planned)  an array: request g's spin, microseconds

Invariants: request g of the run is exchange j = g // clients of connection c = g % clients
(csrc/loadgen/arrivals.h); "fixed" asks `mean_us` of every request; "exp" draws
-ln(u) x mean_us, u = (the top 53 bits of mix(mix(seed x 0x100000001b3 xor c) xor j) + 1) / 2^53,
mix being splitmix64's step (add 0x9e3779b97f4a7c15, then its finaliser), all arithmetic
modulo 2^64, rounded to the nearest microsecond (the protocol carries whole ones) and capped
at SPIN_MAX_US.  A draw depends on (seed, c, j) only: not on the engine, the rate, the arrivals
or the order the replies come back in.
"""

from __future__ import annotations

import numpy as np

SPIN_MAX_US = 1_000_000  # the service's bound on one request (exchange.h, spin.c)
DISTS = ("fixed", "exp")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FNV_PRIME = np.uint64(0x100000001B3)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's step on each element (uint64 arithmetic wraps modulo 2^64, as C's does)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def spin_us(dist: str, mean_us: int, seed: int, clients: int, planned: int) -> np.ndarray:
    """The microseconds each of the run's `planned` requests asks for (float64, in the run's
    order g = 0, 1, ...), for `clients` connections and the generator's `--seed`."""
    if dist not in DISTS:
        raise ValueError(f"dist must be one of {DISTS}, not {dist!r}")
    if clients < 1 or planned < 0:
        raise ValueError(f"need clients >= 1 and planned >= 0 (got {clients}, {planned})")
    if dist == "fixed":
        return np.full(planned, float(mean_us))
    g = np.arange(planned, dtype=np.uint64)
    c, j = g % np.uint64(clients), g // np.uint64(clients)
    with np.errstate(over="ignore"):
        bits = _mix(_mix((np.uint64(seed) * _FNV_PRIME) ^ c) ^ j)
    u = ((bits >> np.uint64(11)).astype(np.float64) + 1.0) / 9007199254740992.0
    us = -np.log(u) * float(mean_us)
    return np.where(us >= SPIN_MAX_US, float(SPIN_MAX_US), np.floor(us + 0.5))

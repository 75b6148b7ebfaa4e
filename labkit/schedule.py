"""When the load generator's open-loop exchanges fall due, computed here from the recipe
csrc/loadgen/arrivals.c states, so that a test or a calibration can hold a run against its
own schedule without running it.

    due_times_ns(kind, rate, planned, seed)  each exchange's due time, whole ns from the
                                             first one, exactly as the generator rounds it
    due_times_s(kind, rate, planned, seed)   the same in seconds

Invariants: exchange g (0-based, in the plan's order) is due at element g; the first is due
at 0; due times never decrease; the same arguments give the same schedule, and the
generator (--arrivals KIND --rate RATE --seed SEED, RATE x --duration exchanges planned) uses
the same one.

The recipe, with m = 1e9 / rate, the mean gap in ns:
  even     exchange g at g x m, truncated to whole ns;
  poisson  the running sum, from 0, of gaps -ln(u) x m, kept in double ns and rounded to the
           nearest ns once per exchange; u = (the top 53 bits of splitmix64's next value + 1)
           / 2^53, in (0, 1], with splitmix64's state started at 0x5eed0a771a15 xor the seed.
Python's float is the C double and math.log the same libm log, so the sums agree to the
nanosecond.
"""

from __future__ import annotations

import math

KINDS = ("even", "poisson")
_MASK = (1 << 64) - 1
_STREAM = 0x5EED0A771A15  # the schedule's stream, apart from the body sizes' (arrivals.c)


def _splitmix64(state: int) -> tuple[int, int]:
    """splitmix64 (Steele, Lea and Flood 2014): the next state and its well-mixed value."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


def due_times_ns(kind: str, rate: float, planned: int, seed: int = 1) -> list[int]:
    """Each of `planned` exchanges' due time at `rate` per second, in ns from the first."""
    if kind not in KINDS:
        raise ValueError(f"arrivals {kind!r}: expected one of {', '.join(KINDS)}")
    if not rate > 0:
        raise ValueError(f"rate {rate!r}: expected requests per second, more than 0")
    gap_ns = 1e9 / rate
    if kind == "even":
        return [int(g * gap_ns) for g in range(planned)]
    state, t, due = _STREAM ^ (seed & _MASK), 0.0, []
    for _ in range(planned):
        whole = math.floor(t)
        due.append(whole + (t - whole >= 0.5))  # llround: to the nearest, a half away from zero
        state, value = _splitmix64(state)
        t += -math.log(((value >> 11) + 1) / 9007199254740992.0) * gap_ns
    return due


def due_times_s(kind: str, rate: float, planned: int, seed: int = 1) -> list[float]:
    """Each of `planned` exchanges' due time at `rate` per second, in seconds from the first."""
    return [ns / 1e9 for ns in due_times_ns(kind, rate, planned, seed)]

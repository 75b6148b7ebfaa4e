"""Facts the lab's text states that code can hold, each against the code or table it is
about: what a stall does to the leaderboard's p99 (docs/autograders.md, leaderboard.py),
which cases the capstone's contract says run under the sanitizers (csrc/capstone/mine.c
against the battery's table), what kernel.io_uring_disabled = 1 admits (battery/refusals.py),
and on which kernels a route's rto_min shortens the delayed ACK (notebook 04)."""

import re

import numpy as np
import pytest

from labkit import battery, kernel_view, paths
from labkit.battery import refusals
from labkit.instructor.autograder import leaderboard
from labkit.queue_theory import lindley

TARGET_US = 1000.0  # the 1 ms target the text is about


def p99_with_a_stall(rate: int, stall_us: float, service_us: float, seed: int) -> float:
    """The p99 (us) of one leaderboard step's measured window (STEP_S of Poisson arrivals at
    `rate`, exponential service times of mean `service_us`) when the server stalls once,
    half-way, for `stall_us`: the stall is a request of that length that nobody measures."""
    rng = np.random.default_rng(seed)
    window_us = leaderboard.STEP_S * 1e6
    due = np.sort(rng.uniform(0.0, window_us, rng.poisson(rate * leaderboard.STEP_S)))
    service = rng.exponential(service_us, len(due))
    at = np.searchsorted(due, window_us / 2)
    response = lindley(np.insert(due, at, window_us / 2), np.insert(service, at, stall_us))
    return float(np.percentile(np.delete(response, at), 99))


def shortest_stall_us(target_us: float, utilisation: float = 0.0) -> float:
    """The text's arithmetic: more than 1% of the window's exchanges must wait past the target,
    and those due in a stall's first (D - target) / (1 - utilisation) do, whatever the rate."""
    return target_us + 0.01 * leaderboard.STEP_S * 1e6 * (1.0 - utilisation)


def test_one_stall_must_last_about_11_ms_to_pass_a_1_ms_p99_at_every_rate():
    shortest = shortest_stall_us(TARGET_US)
    assert shortest == pytest.approx(11_000.0)  # 1 ms + 1% of the 1 s step
    for rate in leaderboard.RATES[:5]:  # 1,000 to 16,000/s, a nearly idle server (1 us a request)
        p99s = {stall: [p99_with_a_stall(rate, stall, 1.0, seed) for seed in range(10)]
                for stall in (3_000.0, 2 * shortest)}
        assert max(p99s[3_000.0]) <= TARGET_US, (rate, p99s[3_000.0])  # a stall of a few ms passes nothing
        assert min(p99s[2 * shortest]) > TARGET_US, (rate, p99s[2 * shortest])
    # where the rate is high enough for the count to be sure, the threshold is sharp
    assert all(p99_with_a_stall(16_000, 0.75 * shortest, 1.0, seed) <= TARGET_US for seed in range(10))
    assert all(p99_with_a_stall(16_000, 1.3 * shortest, 1.0, seed) > TARGET_US for seed in range(10))


def test_a_busy_server_needs_a_shorter_stall_as_its_backlog_drains():
    rate, service_us = 32_000, 15.0  # utilisation 0.48
    shortest = shortest_stall_us(TARGET_US, rate * service_us * 1e-6)
    assert shortest == pytest.approx(6_200.0)
    assert all(p99_with_a_stall(rate, 0.7 * shortest, service_us, seed) <= TARGET_US for seed in range(10))
    assert all(p99_with_a_stall(rate, 1.3 * shortest, service_us, seed) > TARGET_US for seed in range(10))


def test_the_capstone_contract_names_the_cases_the_sanitizer_build_runs():
    header = (paths.ROOT / "csrc" / "capstone" / "mine.c").read_text().split("*/", 1)[0]
    prose = re.sub(r"\s*\n\s*\*\s*", " ", header)
    assert f"{battery.sanitized_phrase()} again in the ASan+UBSan build" in prose
    assert battery.sanitized_phrase() == "the protocol, pipelining, split, reset and come-and-go cases"
    sanitized = {case.group for case, sanitize in battery.cases("sanitizers")}
    assert sanitized == {*battery.SANITIZED_GROUPS, "resources"}


@pytest.mark.parametrize("setting, group, says", [
    ("2", "-1", "refused to everyone, root included"),
    ("1", "-1", "only a process with CAP_SYS_ADMIN may use io_uring, no group may (kernel.io_uring_group is -1"),
    ("1", "1000", "only a process with CAP_SYS_ADMIN may use io_uring, and members of group 1000"),
])
def test_io_uring_disabled_1_admits(setting, group, says):
    """Io uring disabled at 1 admits cap sys admin and the io uring group."""
    assert says in refusals.io_uring_disabled_meaning(setting, group)


@pytest.mark.parametrize("release, says", [
    ("6.7.0", "From Linux 6.7 a route's rto_min"),
    ("6.18.44-fc-v657", "From Linux 6.7 a route's rto_min"),
    ("6.6.30", "Before Linux 6.7 a route's lower rto_min does not shorten the delayed ACK"),
    ("5.15.0-100-generic", "Before Linux 6.7"),
    ("not a version", "this kernel's version could not be read"),
])
def test_a_lower_rto_min_shortens_the_delayed_ack_only_from_linux_6_7(release, says):
    assert says in kernel_view.delayed_ack_note(release, float("nan"))

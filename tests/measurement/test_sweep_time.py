"""labkit.sweep_time and the sweep's time budget: how long a sweep will take, from what this
machine measured (tables of earlier rows), and a budget that starts no point once spent.
The sweeps here measure with a stand-in that advances a clock of their own: the subject is
the sweep's bookkeeping, not a server."""

import math
from dataclasses import dataclass

import pytest

from labkit import sweep_time, experiments, sweep
from labkit.repeat_until import Target
from labkit.row import SCHEMA


@dataclass
class Planned:  # what estimate() reads of a measure.Run
    point: dict


def row(wall, host="here", **point):
    return {"experiment": "e", "point_wall_s": wall, "env_hostname": host, **point}


EARLIER = [row(10.0, clients=1), row(12.0, clients=1), row(20.0, clients=2), row(40.0, clients=4),
           row(999.0, host="elsewhere", clients=8)]

ESTIMATES = [
    # points to measure, earlier rows -> (low s, high s) and words the basis holds
    ([{"clients": 1}], EARLIER, (11.0, 11.0), "from 4 points measured here before"),  # the same point: its median
    ([{"clients": 1}, {"clients": 2}], EARLIER, (31.0, 31.0), "from 4 points"),
    # a point not measured here: the middle half of the experiment's points (11.5 to 25 s)
    ([{"clients": 8}], EARLIER, (11.5, 25.0), "1 not measured before, taken as long as the middle half"),
    # a value the grid gives as None reads back from the results file as NaN: the same point
    ([{"clients": 1, "link_rate": None}], [row(10.0, clients=1, link_rate=math.nan)], (10.0, 10.0), "from 1 point"),
    # a point that runs for a set time takes at least that
    ([{"clients": 1, "duration": 30}], EARLIER, (30.0, 30.0), "from 4 points"),
    # another machine's rows say nothing of this one's: the cost model bounds it (start-up + 1 request)
    ([{"clients": 1}], [row(5.0, host="elsewhere", clients=1)],
     (sweep_time.START_UP_S[0] + sweep_time.ANY_SERVICE_S[0], sweep_time.START_UP_S[1] + sweep_time.ANY_SERVICE_S[1]),
     "nothing of this experiment measured here yet: a bound from its requests"),
    # rows saved before the wall time was kept: the same; 10 clients x 100 requests each
    ([{"clients": 10, "requests": 100}], [{"clients": 1, "env_hostname": "here"}],
     (sweep_time.START_UP_S[0] + 1000 * sweep_time.ANY_SERVICE_S[0],
      sweep_time.START_UP_S[1] + 1000 * sweep_time.ANY_SERVICE_S[1]), "the lab's measured range"),
    # an echo point: echo's own range, not the whole lab's (a top request costs a hundred times more)
    ([{"clients": 10, "requests": 100, "service": "echo"}], [],
     (sweep_time.START_UP_S[0] + 1000 * sweep_time.COST_PER_REQUEST_S["echo"][0],
      sweep_time.START_UP_S[1] + 1000 * sweep_time.COST_PER_REQUEST_S["echo"][1]), "a request of echo"),
    # an open loop: its duration and the start-up
    ([{"clients": 10, "duration": 3.0}], [], (sweep_time.START_UP_S[0] + 3, sweep_time.START_UP_S[1] + 3), "a bound"),
    # a point whose requests are not known: nothing to bound it by
    ([{"model": "epoll"}], [], (math.nan, math.nan), "the first points will tell"),
]


@pytest.mark.parametrize("points, earlier, expected, basis", ESTIMATES)
def test_the_estimate_comes_from_what_this_machine_measured(points, earlier, expected, basis):
    took = sweep_time.estimate([Planned(p) for p in points], earlier, "here")
    assert (took.low_s, took.high_s) == pytest.approx(expected, nan_ok=True)
    assert took.to_measure == len(points) and basis in took.basis


def test_the_estimate_in_words():
    assert sweep_time.estimate([], EARLIER, "here").sentence() == "every point is already measured: nothing to run"
    took = sweep_time.estimate([Planned({"clients": 8})] * 300, EARLIER, "here")
    assert took.sentence().startswith("300 points to measure: about 57.5 min to 2.1 h on this machine (from 4 points")
    unknown = sweep_time.estimate([Planned({"model": "epoll"})], [], "here").sentence()
    assert unknown == ("1 point to measure; nothing of this experiment was measured on this machine yet: "
                       "the first points will tell")


def test_cost_from_other_experiments():
    """Before any point of the experiment ran here other experiments rows give the cost per request."""
    start = sweep_time.START_UP_S[0]
    # 4 top points of another experiment: 1, 2, 2 and 4 ms a request (wall time less the start-up)
    others = [{"experiment": "other", "env_hostname": "here", "point_wall_s": start + n * cost, "requests_ok": n,
               "service": "top"} for n, cost in ((100, 0.001), (200, 0.002), (50, 0.002), (10, 0.004))]
    others += [{"experiment": "other", "env_hostname": "here", "point_wall_s": 9.0, "requests_ok": 10, "duration": 9,
                "service": "top"},
               {"experiment": "other", "env_hostname": "elsewhere", "point_wall_s": 99.0, "requests_ok": 1,
                "service": "top"},
               *({"experiment": "other", "env_hostname": "here", "point_wall_s": start + 0.001, "requests_ok": 100,
                  "service": "echo"} for _ in range(4))]  # echo's points say nothing of a top request
    took = sweep_time.estimate([Planned({"clients": 10, "requests": 10, "service": "top"})], [], "here", others=others)
    # the middle half of 1, 2, 2, 4 ms: 1.75 to 2.5 ms, x 100 requests
    assert (took.low_s, took.high_s) == pytest.approx((start + 0.175, sweep_time.START_UP_S[1] + 0.25))
    assert "the cost per request of 4 top points of other experiments here" in took.basis


def test_the_repeats_a_target_may_add_are_counted_as_a_range():
    earlier = [row(10.0, clients=1), row(20.0, clients=2)]
    took = sweep_time.estimate([Planned({"clients": 1})] * 3, earlier, "here",
                             added=[(Planned({"clients": 1}), 3, 17), (Planned({"clients": 2}), 0, 0)])
    assert (took.to_measure, took.most) == (6, 20)
    assert (took.low_s, took.high_s) == pytest.approx((60.0, 200.0))
    assert took.sentence().startswith("6 to 20 points to measure: about 60 s to 3.3 min on this machine")


class Clock:
    """A clock the stand-in measurement advances: each point takes `step` seconds."""

    def __init__(self, step):
        self.now, self.step, self.measured = 0.0, step, []

    def __call__(self):
        return self.now

    def measure(self, run):
        self.now += self.step
        self.measured.append(run.point)
        return {"schema": SCHEMA, "status": "ok", "error": ""}


def test_budget_stops_and_next_run_resumes(tmp_path, built_bin, capsys):
    """A budget starts no point once spent and a next run measures the rest."""
    plan = experiments.resolve("proc_top", profile="quick", models=["iterative", "select"], clients=[2, 3], repeats=1)
    results = tmp_path / "r.jsonl"
    before = sweep.how_long(plan, results)  # 4 points of 2 or 3 clients x 1 request: the cost model's bound
    assert (before.low_s, before.high_s) == pytest.approx(
        (4 * sweep_time.START_UP_S[0] + 10 * sweep_time.COST_PER_REQUEST_S["top"][0],
         4 * sweep_time.START_UP_S[1] + 10 * sweep_time.COST_PER_REQUEST_S["top"][1]))
    assert "a bound from its requests" in before.sentence()
    until = sweep.how_long(plan, results, until=Target("throughput_rps", 0.1))  # 1 planned repeat, 6 to 20
    assert (until.to_measure, until.most) == (24, 80)
    clock = Clock(step=10.0)
    first = sweep.run(plan, results=results, measure=clock.measure, progress=False, budget_s=15, clock=clock)
    assert len(clock.measured) == 2 and len(first) == 2 and first.attrs["unmeasured"] == 2  # started at 0 s and 10 s
    assert list(first["point_wall_s"]) == [10.0, 10.0]
    said = capsys.readouterr().out
    assert "time budget of 15 s spent: 2 of 4 point(s) not measured" in said
    # what is left takes as long as what was measured here: 2 points of 10 s
    left = sweep.how_long(plan, results)
    assert (left.to_measure, left.low_s, left.high_s) == (2, 20.0, 20.0)
    second = sweep.run(plan, results=results, measure=clock.measure, progress=False, budget_s=60, clock=clock)
    assert len(clock.measured) == 4 and len(second) == 4 and second.attrs["unmeasured"] == 0
    assert "2 points to measure: about 20 s on this machine" in capsys.readouterr().out
    assert sweep.how_long(plan, results).sentence() == "every point is already measured: nothing to run"

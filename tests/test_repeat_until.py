"""labkit.repeat_until: a point repeated until its median is known to a target, at 95%.
The judgement as a table; then sweeps whose stand-in measurement hands out a known series of
values on a clock of its own (the subject is the sweep's loop, not a server)."""

import math

import pytest

from labkit import experiments, repeat_until, sweep
from labkit.errors import LabError
from labkit.repeat_until import Target
from labkit.row import SCHEMA

JUDGED = [
    # values, target -> done, repeats, half-width of the median's interval over the median
    ([], 0.10, False, 0, math.nan),
    ([100.0], 0.10, False, 1, math.nan),                      # one run: no interval of the median
    ([100.0] * 5, 0.10, False, 5, 0.0),                       # 5 repeats: [min, max] is a 94% interval, not 95%
    ([100.0] * 6, 0.10, True, 6, 0.0),                        # 6: 97%
    ([90.0, 95.0, 100.0, 100.0, 105.0, 110.0], 0.10, True, 6, 0.10),   # [90, 110] around 100
    ([90.0, 95.0, 100.0, 100.0, 105.0, 110.0], 0.05, False, 6, 0.10),
    ([90.0, None, float("nan"), 100.0], 0.10, False, 2, 5 / 95),  # failed repeats carry no value
]


@pytest.mark.parametrize("values, relative, done, repeats, half", JUDGED)
def test_a_point_is_done_when_its_medians_95_percent_interval_is_within_the_target(values, relative, done,
                                                                                    repeats, half):
    reached = Target("lat_p99_us", relative).judge(values)
    assert (reached.done, reached.repeats) == (done, repeats)
    assert reached.half_width == pytest.approx(half, nan_ok=True)


@pytest.mark.parametrize("relative, most, says", [
    (0.0, 10, "not one a sweep can reach"), (1.5, 10, "not one a sweep can reach"),
    (0.1, 5, "can never give a 95% interval"),
])
def test_a_target_no_sweep_can_reach_is_refused_saying_why(relative, most, says):
    with pytest.raises(LabError, match=says):
        Target("lat_p99_us", relative, most)


class Series:
    """A stand-in measurement: each point's repeats get the next values of `values` (the
    point's clients pick its series), each taking `step` seconds of a clock of its own."""

    def __init__(self, values: dict, step: float = 1.0):
        self.values, self.step, self.now, self.measured = values, step, 0.0, []

    def __call__(self):
        return self.now

    def measure(self, run):
        self.now += self.step
        series = self.values[run.load.clients]
        value = series[sum(1 for r in self.measured if r.load.clients == run.load.clients) % len(series)]
        self.measured.append(run)
        return {"schema": SCHEMA, "status": "ok", "error": "", "throughput_rps": value}


SETTLES = [100.0, 150.0, 60.0, 101.0, 99.0, 100.0, 100.5, 99.5, 100.0, 100.2, 99.8, 100.0]
STEADY = [100.0, 101.0, 99.0]


@pytest.fixture
def plan(built_bin):
    return experiments.resolve("proc_top", profile="quick", models=["select"], clients=[2, 3], repeats=3)


def first_done(series, target):
    """The fewest repeats of `series` whose median meets `target` (else target.most)."""
    return next((n for n in range(1, target.most + 1) if target.judge(series[:n]).done), target.most)


def test_each_point_is_repeated_until_its_target_or_its_most_and_the_sweep_says_which(plan, tmp_path, capsys):
    target = Target("throughput_rps", 0.05, most=10)
    clock = Series({2: STEADY, 3: SETTLES})
    frame = sweep.run(plan, results=tmp_path / "r.jsonl", measure=clock.measure, progress=False, until=target,
                      clock=clock)
    repeats = {clients: sum(1 for r in clock.measured if r.load.clients == clients) for clients in (2, 3)}
    assert repeats == {2: 6, 3: first_done(SETTLES, target)} and repeats[3] > 6
    assert len(frame) == sum(repeats.values()) and frame["point_key"].is_unique
    assert sorted(frame.loc[frame["clients"] == 2, "repeat"]) == [0, 1, 2, 3, 4, 5]
    said = capsys.readouterr().out
    assert f"reached at 2 of 2 point(s) (6 to {repeats[3]} repeats)" in said
    # the same sweep again: every repeat, the target's too, is resumed, none measured
    again = Series({2: STEADY, 3: SETTLES})
    sweep.run(plan, results=tmp_path / "r.jsonl", measure=again.measure, progress=False, until=target, clock=again)
    assert again.measured == []


def test_a_target_out_of_reach_stops_at_the_most_and_says_what_was_reached(plan, tmp_path, capsys):
    target = Target("throughput_rps", 0.01, most=6)
    clock = Series({2: STEADY, 3: [100.0, 150.0, 60.0]})
    frame = sweep.run(plan, results=tmp_path / "r.jsonl", measure=clock.measure, progress=False, until=target,
                      clock=clock)
    assert len(frame) == 12
    reached = dict((point["clients"], r) for point, r in frame.attrs["reached"])
    assert not reached[3].done and reached[3].repeats == 6
    assert "not at clients 3: ±45.0% at 97% after 6 repeats (target ±1% not reached)" in \
        capsys.readouterr().out


def test_a_time_budget_stops_the_extra_repeats_too(plan, tmp_path):
    clock = Series({2: STEADY, 3: SETTLES}, step=10.0)
    frame = sweep.run(plan, results=tmp_path / "r.jsonl", measure=clock.measure, progress=False,
                      until=Target("throughput_rps", 0.05), budget_s=45, clock=clock)
    assert len(clock.measured) == 5  # started at 0, 10, 20, 30 and 40 s
    assert frame.attrs["unmeasured"] == 3  # the second point's planned repeats, never started


def test_the_summary_names_the_points_not_reached():
    target = Target("lat_p99_us", 0.10)
    reached = [({"model": "epoll", "clients": 10}, target.judge([100.0] * 6)),
               ({"model": "poll", "clients": 10}, target.judge([50.0, 150.0, 100.0, 100.0, 100.0, 100.0]))]
    assert repeat_until.summary(target, reached, ["model", "clients"]) == (
        "target: the median of lat_p99_us to ±10% at 95%: reached at 1 of 2 point(s) (6 repeats); not at model poll: "
        "±50.0% at 97% after 6 repeats (target ±10% not reached)")


def test_the_medians_interval_after_each_repeat_narrows_and_grows_surer():
    table = repeat_until.by_repeats([100.0, 150.0, None, 60.0, 101.0, 99.0, 100.0, 100.5])
    assert list(table["repeats"]) == [1, 2, 3, 4, 5, 6, 7]  # a failed repeat has no value
    assert math.isnan(table["sure to"][0])
    assert (table["from"][2], table["to"][2], round(table["sure to"][2], 2)) == (60.0, 150.0, 0.75)  # [min, max] of 3
    assert table["sure to"].iloc[-1] >= 0.95

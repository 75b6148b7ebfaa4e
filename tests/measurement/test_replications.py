"""Repeats as independent replications: each (point, repeat) its own load generator seed,
stable across plans and stored in the row, and a sweep that measures its repeats in rounds
over the points.  The sweeps here measure with a stand-in that records what it was asked to
run: the subject is the sweep's order and bookkeeping, not a server."""

import subprocess

import pytest

from labkit import build, experiments, sweep
from labkit.plan import SEED_MAX, repeat_seed
from labkit.row import SCHEMA


def small(**given):
    defaults = dict(models=["iterative", "select", "poll"], clients=[2], repeats=3)
    return experiments.resolve("proc_top", profile="quick", **{**defaults, **given})


class Recording:
    """A stand-in measurement: records each run, and reports `metric` as the number of runs
    measured so far (a machine that drifts up over the sweep)."""

    def __init__(self):
        self.runs = []

    def measure(self, run):
        self.runs.append(run)
        return {"schema": SCHEMA, "status": "ok", "error": "", "throughput_rps": float(len(self.runs))}


def test_each_repeat_of_a_point_has_its_own_seed_the_same_in_every_plan(built_bin):
    runs = small().points()
    first = [run for run in runs if run.point == runs[0].point]
    seeds = [run.load.options["seed"] for run in first]
    assert len(set(seeds)) == 3  # two repeats of one point: different seeds
    assert len({run.load.options["seed"] for run in runs}) == len(runs)
    assert [run.load.options["seed"] for run in small().points()] == [run.load.options["seed"] for run in runs]
    assert all(1 <= run.load.options["seed"] <= SEED_MAX for run in runs)
    assert all(run.load.options["seed"] == repeat_seed(run.key) for run in runs)
    # a repeat a target adds is seeded as the plan would have seeded it
    plan = small(repeats=2)
    added = plan.another_repeat(plan.points()[1], 2)
    assert (added.key, added.load.options["seed"]) == (first[2].key, seeds[2])
    # and the seed reaches the generator's command line
    argv = first[1].load.argv(port=1)
    assert argv[argv.index("--seed") + 1] == str(seeds[1])


def test_generator_takes_derived_seeds(built_bin):
    """The generator takes every seed derived and refuses past its limit."""
    loadgen = str(build.binary(build.LOADGEN))
    for seed in (1, SEED_MAX):  # --seed is parsed before --describe ends the program
        assert subprocess.run([loadgen, "--seed", str(seed), "--describe"], capture_output=True).returncode == 0
    refused = subprocess.run([loadgen, "--seed", str(2 ** 63), "--describe"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--seed" in refused.stderr


def test_sweep_repeats_in_rounds_with_seeds(built_bin, tmp_path):
    """A sweep measures its repeats in rounds and each row keeps its seed."""
    plan = small()
    stand_in = Recording()
    frame = sweep.run(plan, results=tmp_path / "r.jsonl", measure=stand_in.measure, progress=False)
    by_key = {run.key: run for run in plan.points()}
    expected = [run.key for repeat in range(3) for run in plan.points() if run.repeat == repeat]
    assert [run.key for run in stand_in.runs] == expected  # repeat 0 of every point, then 1, then 2
    assert [run.repeat for run in stand_in.runs] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert {key: by_key[key].load.options["seed"] for key in frame["point_key"]} == \
        dict(zip(frame["point_key"], frame["seed"]))


def test_a_resumed_sweep_measures_what_is_left_in_the_same_rounds(built_bin, tmp_path):
    plan = small()
    first = Recording()

    def stop_after_four(row):
        if len(first.runs) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run(plan, results=tmp_path / "r.jsonl", measure=first.measure, progress=False,
                  on_point=stop_after_four)
    second = Recording()
    frame = sweep.run(plan, results=tmp_path / "r.jsonl", measure=second.measure, progress=False)
    assert [run.repeat for run in second.runs] == [1, 1, 2, 2, 2]
    assert [run.key for run in first.runs + second.runs] == \
        [run.key for repeat in range(3) for run in plan.points() if run.repeat == repeat]
    assert len(frame) == 9 and frame["point_key"].is_unique


def test_drift_spreads_over_points(built_bin, tmp_path):
    """Every run reads 1 higher than the one before (runs 1 to 9): measured point by point,
    the points' medians would be 2, 5 and 8, the last 6 above the first; in rounds they are
    4, 5 and 6, each point's repeats spread over the whole sweep."""
    stand_in = Recording()
    frame = sweep.run(small(), results=tmp_path / "r.jsonl", measure=stand_in.measure, progress=False)
    medians = frame.groupby("model")["throughput_rps"].median()
    assert sorted(medians) == [4.0, 5.0, 6.0]
    spans = frame.groupby("model")["throughput_rps"].agg(lambda values: max(values) - min(values))
    assert set(spans) == {6.0}  # every point saw the sweep's start and its end


def test_experiment_keeps_its_seed(built_bin):
    """An experiment that gives its own seed keeps it and every row says the seed given."""
    from labkit import row as row_module
    from labkit.procs import LoadSpec, ServerSpec

    uploads = experiments.resolve("uploads", profile="quick", repeats=2, seed=7)  # the same sizes on purpose
    assert {run.load.options["seed"] for run in uploads.points()} == {7}
    server = ServerSpec("epoll", "echo")
    assert row_module.new(server, LoadSpec(2, options={"seed": 12345}), [])["seed"] == 12345
    unseeded = row_module.new(server, LoadSpec(2), [])["seed"]
    assert unseeded != unseeded  # none given: NaN (the generator's default, 1), never 0

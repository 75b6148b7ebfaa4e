"""Predict, then measure: a prediction is recorded with how many sweep points came before it,
and its check passes any finite number made before its sweep, right or wrong."""

import json

import numpy as np
import pandas as pd
import pytest

from labkit import row, sweep
from labkit.exercises import predictions
from labkit.instructor.basics import exports


@pytest.fixture
def points(monkeypatch):
    """Set this process's count of sweep points."""
    def set_to(n):
        monkeypatch.setattr(sweep, "_points_done", n)
    set_to(0)
    return set_to


def exported(value):
    """The value as the grader sees it: through exports' plain data and back."""
    return exports.decode("x", json.loads(json.dumps(exports.encode(value))))


def test_made_is_plain_data_with_the_count_of_points_before_it(points):
    points(0)
    made = predictions.made("iterative_ratio", np.float64(4.5), "a round trip per request, not overlapped")
    assert made == {"name": "iterative_ratio", "value": 4.5, "why": "a round trip per request, not overlapped",
                    "sweeps_before": 0}
    assert type(made["value"]) is float and exported(made) == made
    points(7)
    assert predictions.made("x", 3)["sweeps_before"] == 7


@pytest.mark.parametrize("value", [0, -2, 1e-9, 12345.0, np.int64(3)])
def test_any_finite_number_made_first_passes_right_or_wrong(points, value):
    predictions.check(exported(predictions.made("x", value)))


@pytest.mark.parametrize("value", [None, "5", float("nan"), float("inf"), True, [1], ["pool", 2]])
def test_empty_prediction_says_what_to_do(points, value):
    """No number nor list of names fails with an assertion saying what to do."""
    with pytest.raises(AssertionError, match="write your prediction in predicted_x"):
        predictions.check(exported(predictions.made("x", value)), variable="predicted_x")


def test_a_missing_or_damaged_record_fails(points):
    with pytest.raises(AssertionError, match="run the prediction cell"):
        predictions.check(None)
    with pytest.raises(AssertionError, match="damaged"):
        predictions.check({"name": "x", "value": 1.0, "sweeps_before": "0"})


def test_prediction_must_precede_sweep(points):
    """A prediction after its sweep fails and one before a later sweep passes."""
    frame = pd.DataFrame({"elapsed_s": [1.0, 2.0]})
    frame.attrs.update(points_before=6, planned=2)   # an earlier sweep measured 6 points
    before = exported(predictions.made("x", 2.0) | {"sweeps_before": 6})
    after = exported(predictions.made("x", 2.0) | {"sweeps_before": 8})
    outcome = exported(predictions.versus(before, 3.0, frame, unit="x"))
    assert outcome == {"name": "x", "predicted": 2.0, "measured": 3.0, "sweeps_before": 6, "sweep_began_at": 6}
    predictions.check(before, outcome)
    with pytest.raises(AssertionError, match="made after the sweep"):
        predictions.check(after, outcome)
    # without an outcome the prediction must come before any sweep of the kernel
    with pytest.raises(AssertionError, match="made after the sweep"):
        predictions.check(before)


def test_versus_shows_both_numbers_and_never_fails_on_a_missing_one(points, capsys):
    outcome = predictions.versus(predictions.made("x", 4), 6.0, unit="ms", what="the added round trip")
    said = capsys.readouterr().out
    assert "you predicted 4 ms, you measured 6 ms (measured / predicted = 1.50)" in said
    assert outcome["measured"] == 6.0 and outcome["sweep_began_at"] is None
    outcome = predictions.versus(predictions.made("x", None), float("nan"))
    said = capsys.readouterr().out
    assert "no prediction" in said and outcome["measured"] is None and outcome["predicted"] is None


@pytest.mark.parametrize("predicted, measured, says", [
    # two names are not the same two names: compared by name, never by count
    (["pool", "prefork"], ["epoll", "threaded"], "right: none; missed: epoll, threaded; wrong: pool, prefork"),
    (["prefork", "pool"], ["pool", "prefork"], "right: pool, prefork; missed: none; wrong: none"),
    (["pool"], ["pool", "prefork"], "right: pool; missed: prefork; wrong: none"),
    ([], [], "you predicted none, you measured none (right: none; missed: none; wrong: none)"),
])
def test_a_list_of_names_is_compared_name_by_name(points, capsys, predicted, measured, says):
    made = exported(predictions.made("stuck", predicted))
    outcome = exported(predictions.versus(made, measured, what="stuck"))
    assert says in capsys.readouterr().out
    assert outcome["predicted"] == sorted(set(predicted)) and outcome["measured"] == sorted(set(measured))
    predictions.check(made, outcome)  # any honest list made first passes


def test_a_sweep_counts_its_points_measured_and_reused(points, tmp_path, monkeypatch):
    from labkit import experiments, launcher

    monkeypatch.setattr(sweep, "_environment", lambda: {})
    monkeypatch.setattr(launcher, "live_children", lambda: [])
    params = experiments.resolve("proc_top", "quick", models=["iterative"], clients=[3, 6], repeats=1,
                                 placement="same_host")
    fake = lambda run: {"status": "ok", "elapsed_s": 1.0, "schema": row.SCHEMA}  # noqa: E731
    results = tmp_path / "r.jsonl"
    first = sweep.run(params, results=results, measure=fake, progress=False)
    assert sweep.points_done() == 2 and first.attrs["points_before"] == 0
    again = sweep.run(params, results=results, measure=fake, progress=False)  # reused
    assert sweep.points_done() == 4 and again.attrs["points_before"] == 2


@pytest.mark.parametrize("value, why, says", [
    (10, "iterative waits out every client", "your prediction: 10 — iterative waits out every client (recorded before"),
    (None, "", "your prediction: none yet (it is None): write your prediction before you run the sweep"),
    (["prefork", "pool", "pool"], "", "your prediction: pool, prefork (recorded before"),
    ([], "none waits", "your prediction: none — none waits"),
])
def test_say_shows_a_prediction_as_a_sentence_not_a_dict(points, capsys, value, why, says):
    predictions.say(predictions.made("x", value, why))
    shown = capsys.readouterr().out
    assert says in shown and "{" not in shown


def test_run_each_keeps_the_experiment_that_pd_concat_drops(points, tmp_path, monkeypatch):
    """Two parts of one experiment's grid: pd.concat of their frames drops attrs (the
    counts differ), so the plots would fall back to generic axes; run_each keeps the
    declaration and sums the counts."""
    import pandas as pd

    from labkit import experiments, launcher

    monkeypatch.setattr(sweep, "_environment", lambda: {})
    monkeypatch.setattr(launcher, "live_children", lambda: [])
    fake = lambda run: {"status": "ok", "elapsed_s": 1.0, "schema": row.SCHEMA}  # noqa: E731
    results = tmp_path / "r.jsonl"
    small = experiments.resolve("proc_top", "quick", models=["iterative"], clients=[3], repeats=1,
                                placement="same_host")
    big = small.with_values(clients=[3, 6])
    sweep.run(small, results=results, measure=fake, progress=False)  # the first part is measured already
    parts = [sweep.run(plan, results=results, measure=fake, progress=False) for plan in (small, big)]
    assert "experiment" not in pd.concat(parts).attrs  # what the notebook did before
    both = sweep.run_each([small, big], results=results, measure=fake, progress=False)
    assert both.attrs["experiment"] is small.experiment
    assert (both.attrs["planned"], both.attrs["reused"]) == (3, 3)
    assert both.attrs["results"] == str(results) and len(both) == 3

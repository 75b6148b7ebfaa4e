"""What waits for an unsolved C exercise, and what a student is told instead of a failure.

labkit.stubs reads the edition's own record of its stubs (tests/edition_left_out.json,
each stub's sha256) against csrc/ as it is now.  Here an edition is made of the lab's own
csrc/ files with their functions recorded as the stubs, so every exercise is waiting; each
table row says what would run, and which exercise it waits for.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from labkit import battery, exercises, paths, stubs
from labkit.errors import LabError
from labkit.stubs import which_edition as editions
from labkit.stubs.catalog import C_EXERCISES
from labkit.panel import _summary
from labkit.procs import LoadSpec, ServerSpec

BY_LABEL = {exercise.label: exercise for exercise in C_EXERCISES}


def edition_of_stubs(root: Path, labels=tuple(BY_LABEL)) -> Path:
    """A tree whose record says the lab's own functions of exercises `labels` are the stubs."""
    entries = []
    for exercise in C_EXERCISES:
        source = root / "csrc" / exercise.source
        source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(paths.ROOT / "csrc" / exercise.source, source)
        stub = editions.exercise_state(exercise, root) if exercise.label in labels else "0" * 64
        entries.append({"label": exercise.label, "notebook": exercise.notebook, "function": exercise.function,
                        "source": exercise.source, "uses": exercise.uses, "tests": list(exercise.tests),
                        "stub_sha256": stub})
    record = root / editions.LEFT_OUT_JSON
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"removed": {}, "answers": {}, "exercises": entries}))
    return root


WAITS = [
    # server (model, service, flags), load strategy -> the exercise it waits for, and what runs it
    (("epoll", "top", {}), None, "1.1", "the top service"),
    (("mine", "top", {}), None, "1.1", "the top service"),
    (("poll", "echo", {}), None, "1.2", "the poll server model"),
    (("epoll", "echo", {"idle-timeout": 1}), None, "6.2", "the epoll server's --idle-timeout"),
    (("epoll", "echo", {"idle-timeout": 0}), None, None, None),         # 0: never sheds, shed_idle not run
    (("threaded", "echo", {"idle-timeout": 1}), None, None, None),      # not an event loop's shed_idle
    (("threaded", "sink", {}), "writev", "4.1", "the load generator's writev strategy"),
    (("threaded", "sink", {}), "single", None, None),
    (("epoll", "echo", {}), None, None, None),
]


@pytest.mark.parametrize("server, strategy, label, what", WAITS)
def test_what_runs_a_stub_waits_for_its_exercise(tmp_path, server, strategy, label, what):
    root = edition_of_stubs(tmp_path)
    model, service, flags = server
    load = LoadSpec(1, 1, service, {"strategy": strategy} if strategy else {})
    wait = stubs.blocking(server=ServerSpec(model, service, flags=flags), load=load, root=root)
    assert (wait.exercise.label if wait else None, wait.what if wait else None) == (label, what)
    if wait:
        assert wait.sentence.startswith(f"not measurable until exercise {label}: {what} runs your ")
        assert f"notebook {wait.exercise.notebook}" in wait.sentence


def test_solved_exercise_no_longer_waits(tmp_path):
    """A solved exercise no longer waits and the instructors tree never does."""
    root = edition_of_stubs(tmp_path, labels=("1.1",))
    top = ServerSpec("epoll", "top")
    assert stubs.blocking(server=top, root=root).exercise.label == "1.1"
    procstat = root / "csrc" / BY_LABEL["1.1"].source
    procstat.write_text(procstat.read_text().replace("procstat_parse(", "procstat_parse(/* mine */ ", 1))
    assert stubs.blocking(server=top, root=root) is None
    if editions.edition() is None:  # the instructor's checkout has no record of stubs: nothing waits
        assert stubs.waiting(paths.ROOT) == []


def test_event_benchmark_poll_waits(tmp_path, monkeypatch, capsys):
    """The event benchmark says its poll backend waits and measures the others."""
    from labkit import bench
    from labkit.bench import ev_bench

    edition_of_stubs(tmp_path, labels=("1.2",))
    monkeypatch.setattr(stubs.unsolved, "waiting", lambda root=None: editions.still_stubbed(tmp_path))
    ran = []
    real = ev_bench.run_tool
    monkeypatch.setattr(ev_bench, "run_tool",
                        lambda argv, *args, **kwargs: ran.append(Path(argv[0]).name) or real(argv, *args, **kwargs))
    frame = bench.events(descriptors=(100,), runs=1, writes=100, save=False)
    said = capsys.readouterr().out
    assert said.startswith("not measurable until exercise 1.2: the event-loop benchmark's poll backend runs your ")
    assert ran == ["ev_bench_select", "ev_bench_epoll"]  # poll's stub never ran
    by = frame.set_index("backend")
    assert (by.loc["poll", "status"], by.loc["poll", "waiting_for_exercise"]) == ("failed", "1.2")
    assert by.loc["poll", "note"] == said.strip() and by.loc["poll", "ns_per_poll"] != by.loc["poll", "ns_per_poll"]
    assert list(by.loc[["select", "epoll"], "status"]) == ["ok", "ok"]
    subtitle = ev_bench.event_cost(frame).layout.title.subtitle.text
    assert subtitle == "not measurable until exercise 1.2: poll", subtitle


def test_a_point_that_waits_is_not_run_and_says_which_exercise(tmp_path, monkeypatch):
    from labkit import launcher, measure
    from labkit.experiments import get

    edition_of_stubs(tmp_path, labels=("1.1",))
    monkeypatch.setattr(stubs.unsolved, "waiting", lambda root=None: editions.still_stubbed(tmp_path))
    plan = get("proc_top").resolve("quick", models=["epoll"])
    before = set(launcher.live_children())
    row = measure.point(plan.points()[0])
    assert set(launcher.live_children()) == before  # nothing was started
    assert (row["status"], row["waiting_for_exercise"]) == ("failed", "1.1")
    assert row["error"].startswith("not measurable until exercise 1.1: the top service runs your procstat_parse()")


SUMMARIES = [
    # statuses, waiting_for_exercise -> the panel's status line
    (["ok", "ok"], ["", ""], "success", "done: 2 points"),
    (["ok", "failed"], ["", ""], "warning", "done: 2 points, 1 failed"),
    (["failed", "failed", "failed"], ["1.1", "1.1", ""], "warning",
     "done: 3 points, 1 failed, 2 not measurable until exercise 1.1"),
]


@pytest.mark.parametrize("statuses, waits, style, line", SUMMARIES)
def test_the_panel_counts_waiting_points_apart_from_failed_ones(statuses, waits, style, line):
    df = pd.DataFrame({"status": statuses, "waiting_for_exercise": waits,
                       "error": ["why" if w else "" for w in waits]})
    got_style, got_line, sentences = _summary(df)
    assert (got_style, got_line) == (style, line)
    assert sentences == (["why"] if any(waits) else [])


def test_the_battery_says_a_top_case_waits_and_judges_the_rest(tmp_path, monkeypatch):
    edition_of_stubs(tmp_path, labels=("1.1",))
    monkeypatch.setattr(stubs.unsolved, "waiting", lambda root=None: editions.still_stubbed(tmp_path))
    top = next(case for case in battery.CASES if case.service == "top")
    echo = next(case for case in battery.CASES if case.service == "echo" and case.group == "protocol")
    report = battery.Report([battery.run_case(paths.BIN / "epoll", case) for case in (top, echo, top)])
    waited, judged, _ = report.results
    assert (waited.passed, waited.unmeasurable, waited.waiting_for, waited.seconds) == (False, True, "1.1", None)
    assert waited.verdict == "not measurable until exercise 1.1" and "FAILED" not in report._repr_html_()
    assert judged.passed and judged.seconds > 0, judged.message
    assert report.headline == "1 of 3 cases passed; 2 not measurable until exercise 1.1"
    # why they wait is said once, above the table; their rows say they never ran (no time of 0.00 s)
    for text in (report._repr_html_(), str(report)):
        assert text.count("procstat_parse") == 1 and "0.00 s" not in text, text
    assert str(report).splitlines()[:2] == [report.headline, f"not run: {waited.message}"]
    only_top = next(group for group in battery.GROUPS
                    if {case.service for case in battery.CASES if case.group == group} == {"top"})
    with pytest.raises(LabError) as error:  # a check all of whose cases wait: an error to act on, never a failure
        battery.check("int main(void) { return 0; }", only_top)
    assert "solve exercise 1.1 first" in error.value.fix


def test_sweep_says_how_many_points_wait(tmp_path, monkeypatch, capsys):
    """A sweep says before it runs how many points wait and records them."""
    from labkit import sweep
    from labkit.experiments import get

    edition_of_stubs(tmp_path, labels=("1.1",))
    monkeypatch.setattr(stubs.unsolved, "waiting", lambda root=None: editions.still_stubbed(tmp_path))
    plan = get("proc_top").resolve("quick", models=["epoll"])
    frame = sweep.run(plan, results=tmp_path / "results.jsonl", progress=False)
    said = capsys.readouterr().out
    assert f"{len(frame)} of {len(frame)} point(s) not measurable until exercise 1.1: the top service" in said
    assert set(frame["status"]) == {"failed"} and set(frame["waiting_for_exercise"]) == {"1.1"}


def test_check_on_waiting_points_is_an_error():
    """07's checks on mine's points: points the lab's stub kept from running raise a LabError
    (the check's error: nothing the student did), and measured points pass through."""
    import pandas as pd

    sentence = "not measurable until exercise 1.1: the top service runs your procstat_parse() ..."
    waiting = pd.DataFrame({"model": ["mine"] * 3, "status": ["failed"] * 3, "error": [sentence] * 3,
                            "waiting_for_exercise": ["1.1"] * 3})
    with pytest.raises(LabError) as error:
        exercises.require_measured(waiting)
    assert str(error.value.args[0]).startswith("3 of 3 points: not measurable until exercise 1.1: the top service")
    assert "solve exercise 1.1 first" in error.value.fix
    measured = waiting.assign(status="ok", error="", waiting_for_exercise="")
    assert exercises.require_measured(measured) is None
    assert exercises.require_measured(measured.drop(columns="waiting_for_exercise")) is None  # older results

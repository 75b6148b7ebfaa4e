"""Facts of the student's own machine travel with the saved notebook to the grader
(labkit.facts), and notebook 00's checks compare the student's answers with them: a student
who read their own screen right passes on a grading machine whose perf differs."""

import io
import json

import nbformat
import pytest

from labkit import facts, paths, perf
from labkit.instructor.grading import check_cells, judge
from labkit.instructor.basics import exports

SETUP = paths.NOTEBOOKS / "00_setup.ipynb"
# The student's laptop: a VM with software events only, Debian's paranoid level.
LAPTOP = {"counted": ["task-clock", "page-faults"], "paranoid": 3}
# The grading machine: root, a few more events.
GRADER = {"counted": ["task-clock", "page-faults", "context-switches", "cpu-migrations"], "paranoid": 2}


@pytest.fixture(autouse=True)
def nothing_carried():
    facts.carry({})
    yield
    facts.carry({})


def saved_notebook(recorded: dict | None) -> nbformat.NotebookNode:
    """A notebook as a student saves it, its record() output kept (or none)."""
    cell = nbformat.v4.new_code_cell("machine = facts.record('perf', ...)")
    if recorded is not None:
        cell.outputs = [nbformat.v4.new_output("display_data", data={
            facts.MIME: {"name": "perf", **recorded}, "text/plain": "recorded for grading"})]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 00"), cell])


def test_record_shows_the_facts_as_a_line_and_returns_this_runs(capsys):
    machine = facts.record("perf", counted=["task-clock"], paranoid=2)
    assert machine == {"this": {"counted": ["task-clock"], "paranoid": 2}, "own": None}
    assert "recorded for grading, from this machine: counted = task-clock; paranoid = 2" in capsys.readouterr().out


def test_graded_copy_carries_saved_facts():
    """The graded copy carries the saved facts into the run before any cell."""
    instructor = nbformat.read(SETUP, as_version=4)
    graded = check_cells.graded_copy(saved_notebook(LAPTOP), instructor).notebook
    first = graded.cells[0]
    assert check_cells.EXPORT_TAG in first.metadata["tags"]
    exec(first.source, {})  # noqa: S102 -- what the graded run's first cell does
    machine = facts.record("perf", **GRADER)
    assert machine["own"] == LAPTOP and machine["this"] == GRADER
    assert facts.candidates(machine, "paranoid") == [(3, facts.OWN_RUN), (2, facts.THIS_RUN)]


def test_a_notebook_saved_without_outputs_carries_nothing():
    instructor = nbformat.read(SETUP, as_version=4)
    graded = check_cells.graded_copy(saved_notebook(None), instructor).notebook
    assert all(facts.MIME not in cell.source for cell in graded.cells)
    assert facts.carried_cell_source(saved_notebook(None)) is None


def test_forged_grader_cell_is_removed():
    """A students own cell posing as the graders is removed with its facts."""
    forged = saved_notebook(None)
    forged.cells.insert(0, nbformat.v4.new_code_cell("from labkit import facts\nfacts.carry({'perf': {}})",
                                                     metadata={"tags": [check_cells.EXPORT_TAG]}))
    graded = check_cells.graded_copy(forged, nbformat.read(SETUP, as_version=4)).notebook
    assert all("carry" not in cell.source for cell in graded.cells)


def graded(check: str, answers: dict, own: dict | None) -> dict:
    """Notebook 00's check `check`, as the checks process runs it, on what a graded run on the
    GRADER machine exports for a student whose saved notebook recorded `own`."""
    facts.carry({"perf": {"name": "perf", **own}} if own else {})
    machine = facts.record("perf", **GRADER)
    values = {"machine": machine, "facts": facts, "perf": perf, **answers}
    exported = {name: json.loads(json.dumps(exports.encode(value))) for name, value in values.items()}
    group = next(g for g in check_cells.check_groups(nbformat.read(SETUP, as_version=4)) if check in g.checks)
    out = io.StringIO()
    judge.run_group({"checks": group.checks, "source": group.source}, exported, "00_setup", out)
    return next(r for r in map(json.loads, out.getvalue().splitlines()) if r["check"] == check)


@pytest.mark.parametrize("check, answers, own, status, says", [
    # read from the student's own screen: right, though the grader's machine differs
    ("counted_events", {"counted_events": ["page-faults", "task-clock"], "paranoid": 3}, LAPTOP, "passed", ""),
    ("perf_event_paranoid", {"counted_events": [], "paranoid": 3}, LAPTOP, "passed", ""),
    ("counted_events_no_hardware_invented", {"counted_events": ["task-clock"]}, LAPTOP, "passed", ""),
    # computed by code in the graded run: right about the run that computed it
    ("counted_events", {"counted_events": GRADER["counted"], "paranoid": 2}, LAPTOP, "passed", ""),
    ("perf_event_paranoid", {"counted_events": [], "paranoid": 2}, LAPTOP, "passed", ""),
    # wrong for both machines: the message names the student's own run
    ("counted_events", {"counted_events": ["task-clock", "page-faults", "cycles"], "paranoid": 3}, LAPTOP, "failed",
     "['cycles'] are not counted in your own run"),
    ("counted_events", {"counted_events": ["task-clock"], "paranoid": 3}, LAPTOP, "failed",
     "the doctor also lists ['page-faults'] as counted in your own run"),
    ("perf_event_paranoid", {"counted_events": [], "paranoid": 1}, LAPTOP, "failed",
     "that is not the level of your own run, as saved in the notebook you handed in (3)"),
    ("counted_events_no_hardware_invented", {"counted_events": ["cycles"]}, LAPTOP, "failed",
     "hardware events this machine cannot count: ['cycles']"),
    # a notebook handed in without outputs: compared with the graded run
    ("perf_event_paranoid", {"counted_events": [], "paranoid": 3}, None, "failed",
     "that is not the level of this run (2)"),
    ("counted_events", {"counted_events": GRADER["counted"], "paranoid": 2}, None, "passed", ""),
])
def test_setup_checks_grade_against_the_students_own_machine(check, answers, own, status, says):
    record = graded(check, answers, own)
    assert (record["status"], says in record["message"]) == (status, True), record

"""What a student's own run saw of their machine, carried to the grader in the saved notebook.

Some answers are facts of the machine a notebook ran on: the perf events it counts, its
kernel.perf_event_paranoid.  Grading runs the notebook again on another machine, so a check
that compared them with the grading machine would fail a student who read their own screen
right.  So:

    machine = facts.record("perf", counted=[...], paranoid=2)   # in the notebook

shows the facts in the cell's output, in an output of their own kind (MIME, JSON, with a
text line a student can read) that the saved notebook keeps.  The grader reads the last one
of each name back from the submitted notebook (submitted()) and puts them into the graded
run before any cell runs (check_cells.graded_copy calls carried_cell_source()).  record()
returns this run's facts and, in a graded run, the student's own beside them; a check takes
an answer that agrees with either (candidates()): typed from the student's screen, it agrees
with their own run; computed by code, with the run that computed it.  A notebook handed in
without outputs carries nothing, and its answers are compared with the graded run's facts.

The facts are the student's own, as the answers are: a student who edits them in the saved
notebook changes only what their own answers are compared with.
"""

from __future__ import annotations

import json

MIME = "application/vnd.labkit.facts+json"
OWN_RUN = "your own run, as saved in the notebook you handed in"
THIS_RUN = "this run"

_carried: dict[str, dict] = {}  # name -> facts, set by the graded run's first cell (carry())


def record(name: str, **facts) -> dict:
    """Show `facts` of this run as an output the saved notebook keeps; return them
    ({"this": facts, "own": the submission's facts in a graded run that carries them, else None})."""
    shown = {"name": name, **facts}
    text = "recorded for grading, from this machine: " + "; ".join(
        f"{key} = {', '.join(map(str, value)) if isinstance(value, (list, tuple)) else value}"
        for key, value in facts.items())
    try:
        from IPython.display import display

        display({MIME: shown, "text/plain": text}, raw=True)
    except ImportError:
        print(text)
    return {"this": facts, "own": {k: v for k, v in _carried[name].items() if k != "name"}
            if name in _carried else None}


def candidates(machine: dict, key: str) -> list[tuple[object, str]]:
    """The values of `key` an answer may agree with, each with the run it comes from: the
    student's own run first, where the graded run carries it, then this run."""
    found = []
    if isinstance(machine.get("own"), dict) and key in machine["own"]:
        found.append((machine["own"][key], OWN_RUN))
    found.append((machine["this"].get(key), THIS_RUN))
    return found


def carry(submitted_facts: dict[str, dict]) -> None:
    """In a graded run, before any cell: the facts the submitted notebook recorded."""
    _carried.clear()
    _carried.update({name: dict(facts) for name, facts in submitted_facts.items() if isinstance(facts, dict)})


def submitted(nb) -> dict[str, dict]:
    """The last facts of each name in a notebook's saved outputs (nbformat, v4)."""
    found: dict[str, dict] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            facts = output.get("data", {}).get(MIME)
            if isinstance(facts, dict) and isinstance(facts.get("name"), str):
                found[facts["name"]] = facts
    return found


def carried_cell_source(nb) -> str | None:
    """The graded run's first cell: carry() the submission's facts; None when it has none."""
    found = submitted(nb)
    if not found:
        return None
    return ("import json as _labkit_json\nfrom labkit import facts as _labkit_facts\n"
            f"_labkit_facts.carry(_labkit_json.loads({json.dumps(json.dumps(found))}))")

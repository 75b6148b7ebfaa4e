"""Graded exercises: the checks a student runs in the notebook.

A notebook makes one Checker and declares its checks with a decorator; the
check runs at once, prints PASS or FAIL with a helpful message, and, when the
environment variable LABKIT_CHECKS_FILE names a file, appends one JSON line per
check to it (a record of a run by hand or in a test; grading does not read it:
labkit.instructor.grading.judge writes its records to a descriptor only it holds):

    ex = Checker(notebook="01_proc_service")

    @ex.check("ratio_iterative", points=2)
    def _():
        assert abs(ratio - expected) < 0.01, "recompute the ratio from df"

A check never raises out of its cell: AssertionError -> "failed" (its text is
the message), any other exception -> "error", so one broken exercise does not
hide the others' results.  A check that passes may return a string: its message
(what it found, e.g. which battery cases passed; the feedback page shows it).

The C exercises are in labkit.exercises.c_exercises.
"""

from __future__ import annotations

import html
import json
import os
import traceback
from dataclasses import dataclass, field

from ..errors import LabError

CHECKS_FILE_ENV = "LABKIT_CHECKS_FILE"
PASSED, FAILED, ERROR = "passed", "failed", "error"
RECORDED = "recorded"  # a written answer that passed its minimum-effort check: graded by hand


# ---------------------------------------------------------------------------
# checks


@dataclass
class CheckResult:
    notebook: str
    check: str
    points: float
    max_points: float
    status: str
    message: str
    hidden: bool
    extra: dict = field(default_factory=dict)

    def record(self) -> dict:
        return {"notebook": self.notebook, "check": self.check, "points": self.points,
                "max_points": self.max_points, "status": self.status, "message": self.message,
                "hidden": self.hidden, **self.extra}

    def line(self) -> str:
        if self.status == RECORDED:
            return f"RECORDED {self.check}: graded by hand, up to {self.max_points:g} point(s)"
        mark = "PASS" if self.status == PASSED else "FAIL" if self.status == FAILED else "ERROR"
        kind = " (hidden)" if self.hidden else ""
        text = f"{mark} {self.check}{kind}: {self.points:g}/{self.max_points:g}"
        return text + (f" -- {self.message}" if self.message else "")

    # Jupyter shows the HTML; papermill's output and a terminal keep the text.
    def __repr__(self) -> str:
        return self.line()

    def _repr_html_(self) -> str:
        if self.status == RECORDED:
            return (f"<div style='border-left:4px solid #0969da;padding:0.2em 0.6em'><b style='color:#0969da'>"
                    f"✎ RECORDED</b> <code>{html.escape(self.check)}</code>: your instructor grades it by hand, "
                    f"up to {self.max_points:g} point(s)</div>")
        colour = {PASSED: "#1a7f37", FAILED: "#b35900"}.get(self.status, "#cf222e")
        mark = {PASSED: "✔ PASS", FAILED: "✘ FAIL"}.get(self.status, "⚠ ERROR")
        wrapped = "margin:0.3em 0 0 1.5em;white-space:pre-wrap;word-break:normal"  # prose: wrap at words
        message = f"<pre style='{wrapped}'>{html.escape(self.message)}</pre>" \
            if self.message else ""
        return (f"<div style='border-left:4px solid {colour};padding:0.2em 0.6em'>"
                f"<b style='color:{colour}'>{mark}</b> <code>{html.escape(self.check)}</code>"
                f"{' (hidden)' if self.hidden else ''}: {self.points:g}/{self.max_points:g} points{message}</div>")


def _show(result: CheckResult) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(result)
    else:
        print(result.line(), flush=True)


def _append_record(record: dict) -> None:
    target = os.environ.get(CHECKS_FILE_ENV)
    if not target:
        return
    # One write() per line in append mode: parallel writers never interleave a line.
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
        out.flush()
        os.fsync(out.fileno())


class Checker:
    """The checks of one notebook, and the points they gave."""

    def __init__(self, notebook: str):
        if not notebook or not isinstance(notebook, str):
            raise LabError("Checker needs the notebook's name", 'write Checker(notebook="01_proc_service")')
        self.notebook = notebook
        self.results: dict[str, CheckResult] = {}

    def check(self, name: str, points: float = 1, hidden: bool = False):
        """Decorator: run the function now as the check `name`, worth `points`."""
        if points < 0:
            raise LabError(f"check {name!r} has negative points ({points})", "give every check 0 or more points")

        def run(function) -> CheckResult:
            return self.run(name, function, points=points, hidden=hidden)

        return run

    def run(self, name: str, function, points: float = 1, hidden: bool = False, extra: dict | None = None):
        """Run `function` as the check `name`; show and record the result; never raise."""
        try:
            said = function()  # a check may say something when it passes: where the student stands
        except AssertionError as failure:
            status, message = FAILED, str(failure) or "the check's condition does not hold"
        except Exception as problem:  # noqa: BLE001 -- a check must never stop the notebook
            status, message = ERROR, f"{type(problem).__name__}: {problem}"
            if not isinstance(problem, LabError):  # a LabError says all; others: where it happened
                message += "\n" + "".join(traceback.format_exception(problem)[-3:-1])
        else:
            status, message = PASSED, said if isinstance(said, str) else ""
        if status == PASSED and (extra or {}).get("by_hand"):
            status = RECORDED  # no points here: a person gives them
        result = CheckResult(self.notebook, name, points if status == PASSED else 0, points, status,
                             message.rstrip(), hidden, extra or {})
        self.results[name] = result
        self.publish(result)
        return result

    def publish(self, result: CheckResult) -> None:
        """Show the result, and append it to LABKIT_CHECKS_FILE when that is set."""
        _append_record(result.record())
        _show(result)

    def answer(self, name: str, text, points: float = 1, min_words: int = 15, keywords=()):
        """A short reasoned answer, graded by hand: no length nor word earns a point.

        Checked here only for effort (at least `min_words` words); then RECORDED, 0 points
        until the instructor's marks come back (labkit grade writes answers.csv, takes it back
        with --manual).  `keywords` are what the grader looks for, written beside the answer
        in answers.csv; they score nothing."""
        text = text if isinstance(text, str) else ""

        def effort():
            words = len(text.split())
            assert words >= min_words, (
                f"write your answer in the string (at least {min_words} words; you have {words}), "
                "citing numbers from your own plots and tables")

        return self.run(name, effort, points=points,
                        extra={"answer": text, "by_hand": True, "look_for": list(keywords)})

    def summary(self) -> str:
        """Points so far, visible checks and hidden ones apart."""
        got = sum(r.points for r in self.results.values())
        most = sum(r.max_points for r in self.results.values())
        failing = [r.check for r in self.results.values() if r.status not in (PASSED, RECORDED)]
        by_hand = [r for r in self.results.values() if r.status == RECORDED]
        text = f"{self.notebook}: {got:g}/{most:g} points from {len(self.results)} checks"
        text += f"; not passed yet: {', '.join(failing)}" if failing else "; all passed"
        if by_hand:
            text += (f"; {len(by_hand)} written answer(s), up to {sum(r.max_points for r in by_hand):g} "
                     "point(s), marked by hand")
        print(text)
        return text

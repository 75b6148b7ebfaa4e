"""Gradescope and PrairieLearn as declarations: where a submission and its results lie, and
how labkit's gradebook rows (grading.grade's COLUMNS) become the platform's results.json.

The mapping, the same on both:
  * a test per check, named "<notebook>: <check>", its points and maximum as labkit gave them;
  * a hidden check: on Gradescope shown once the instructor publishes the grades
    (visibility "after_published"); on PrairieLearn, which shows students every test at once,
    its points count but its name and message are withheld (unless show_hidden);
  * a written answer is never scored here: 0 of its points, named "to be marked by hand";
  * a check the platform's container could not measure (labkit's "not measurable" message:
    no perf, no namespaces, an exercise not done) is not a failure: 0 of 0, and it says why;
  * what the container cannot do (labkit doctor's findings) heads the output.

Gradescope's format: gradescope/autograder_samples docs/specs.md; PrairieLearn's:
PrairieLearn docs/externalGrading.md ("Grading results").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NOT_MEASURABLE = "not measurable"
BY_HAND = "to be marked by hand"


@dataclass(frozen=True)
class Platform:
    name: str
    submission: Path   # inside the container: what the student handed in
    results: Path      # inside the container: where results.json must be
    source: Path       # inside the container: where the package's lab lies


GRADESCOPE = Platform("gradescope", Path("autograder/submission"), Path("autograder/results/results.json"),
                      Path("autograder/source"))
PRAIRIELEARN = Platform("prairielearn", Path("grade/student"), Path("grade/results/results.json"),
                        Path("lab"))
PLATFORMS = {p.name: p for p in (GRADESCOPE, PRAIRIELEARN)}


def _kind(row: dict) -> str:
    """How a gradebook row counts on a platform: "hand", "unmeasurable" or "scored"."""
    from ..grading import hand

    if row["status"] == hand.BY_HAND:
        return "hand"
    if row["status"] != "passed" and NOT_MEASURABLE in str(row["message"]):
        return "unmeasurable"
    return "scored"


def _counted(row: dict) -> tuple[float, float]:
    """(points, most) a row counts for on a platform."""
    kind = _kind(row)
    if kind == "unmeasurable":
        return 0.0, 0.0
    return (0.0 if kind == "hand" else float(row["points"])), float(row["max_points"])


def _name(row: dict) -> str:
    suffix = {"hand": f" ({BY_HAND})", "unmeasurable": f" ({NOT_MEASURABLE} here)"}.get(_kind(row), "")
    return f"{row['notebook']}: {row['check']}{suffix}"


def gradescope_results(rows: list[dict], preamble: str, seconds: float) -> dict:
    tests = []
    for number, row in enumerate(rows, start=1):
        points, most = _counted(row)
        test = {"name": _name(row), "number": str(number), "score": points, "max_score": most,
                "output": str(row["message"]), "visibility": "after_published" if row["hidden"] else "visible",
                "tags": [row["notebook"], row["status"]]}
        if _kind(row) == "scored":
            test["status"] = "passed" if points >= most else "failed"
        tests.append(test)
    return {"score": sum(t["score"] for t in tests), "execution_time": int(round(seconds)),
            "output": preamble, "stdout_visibility": "hidden", "tests": tests}


def refused(rows: list[dict]) -> str | None:
    """The reason, where every check has the same error: the notebook itself could not be
    graded (not a notebook, not UTF-8, a link: grading.submissions refused it)."""
    reasons = {str(row["message"]) for row in rows}
    return reasons.pop() if rows and all(row["status"] == "error" for row in rows) and len(reasons) == 1 else None


def prairielearn_results(rows: list[dict], preamble: str, show_hidden: bool = False) -> dict:
    if refused(rows):  # not the student's answers but the file: no attempt lost
        return not_gradable(PRAIRIELEARN, refused(rows))
    tests, hidden = [], 0
    for row in rows:
        points, most = _counted(row)
        if row["hidden"] and not show_hidden:
            hidden += 1
            tests.append({"name": f"{row['notebook']}: hidden check {hidden}", "points": points,
                          "max_points": most, "message": "shown once the instructor publishes it", "output": ""})
            continue
        tests.append({"name": _name(row), "points": points, "max_points": most,
                      "message": str(row["message"]).splitlines()[0][:300] if str(row["message"]) else "",
                      "output": str(row["message"])})
    total = sum(t["max_points"] for t in tests)
    return {"gradable": True, "score": (sum(t["points"] for t in tests) / total) if total else 0.0,
            "message": preamble.splitlines()[0] if preamble else "", "output": preamble, "tests": tests}


def not_gradable(platform: Platform, why: str) -> dict:
    """Results for a submission that cannot be graded (no notebook, a broken file): on
    PrairieLearn not gradable (no attempt lost), on Gradescope 0 with the reason."""
    if platform is PRAIRIELEARN:
        return {"gradable": False, "format_errors": [why]}
    return {"score": 0.0, "output": why, "stdout_visibility": "hidden", "tests": []}

"""Gradescope and PrairieLearn as declarations: where a submission and its results lie, and
how labkit's gradebook rows (course.class_grades' COLUMNS) become the platform's results.json.

The mapping, the same on both:
  * a test per check, named "<notebook>: <check>", its points and maximum as labkit gave them;
  * a hidden check: on Gradescope shown once the instructor publishes the grades
    (visibility "after_published"); on PrairieLearn, which has no such step (a test is shown
    to the student as soon as it is graded), its points count but its name and message are
    withheld for good (unless show_hidden);
  * a written answer is no test: it is marked by a person (Gradescope: a manually graded
    question beside the autograder; PrairieLearn: a manually graded question), so it is
    neither a failed test nor part of PrairieLearn's score; the output lists each with its
    points and the start of the answer;
  * a check the platform's container could not measure (labkit's "not measurable" message:
    no perf, no namespaces, an exercise not done) is not a failure: 0 of 0, and it says why;
  * what the container cannot do (labkit doctor's findings) heads the output;
  * every text is cut to fit the platform (PrairieLearn refuses a results.json over 1 MB), and
    says where it was cut.

Gradescope's format: gradescope/autograder_samples docs/specs.md; PrairieLearn's:
PrairieLearn docs/externalGrading.md ("Grading results").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...exercises.checks import ERROR, PASSED
from ...perf.parse import UNMEASURABLE

CONFIG = "autograder.json"  # beside the lab in the package: its notebooks, profile, timeouts

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


MAX_TEST_TEXT = 8_000      # characters of one test's output or message
MAX_OUTPUT_TEXT = 40_000   # characters of the results' own output
MAX_ANSWER_SHOWN = 300     # characters of a written answer listed in the output
MAX_RESULTS_BYTES = 1_000_000  # PrairieLearn's limit on results.json (docs/externalGrading.md)


def _kind(row: dict) -> str:
    """How a gradebook row counts on a platform: "hand", "unmeasurable" or "scored"."""
    from ..grading import hand

    if row["status"] == hand.BY_HAND or row.get("by_hand"):  # answered or not, a person marks it
        return "hand"
    if row["status"] != PASSED and UNMEASURABLE in str(row["message"]):
        return "unmeasurable"
    return "scored"


def _counted(row: dict) -> tuple[float, float]:
    """(points, most) a test row counts for on a platform."""
    if _kind(row) == "unmeasurable":
        return 0.0, 0.0
    return float(row["points"]), float(row["max_points"])


def _name(row: dict) -> str:
    suffix = f" ({UNMEASURABLE} here)" if _kind(row) == "unmeasurable" else ""
    return f"{row['notebook']}: {row['check']}{suffix}"


def cut(text: str, most: int) -> str:
    """`text` at most `most` characters, saying where it was cut and how much was left out."""
    text = str(text)
    if len(text) <= most:
        return text
    note = f"\n[... cut by the grader: {len(text) - most:,} more characters]"
    return text[:max(0, most - len(note))] + note


def by_hand(rows: list[dict]) -> str:
    """The written answers, listed for the output: each with its points, marked by a person."""
    answers = [row for row in rows if _kind(row) == "hand"]
    if not answers:
        return ""
    lines = [f"written answers, to be marked by hand (not counted in this score): "
             f"{len(answers)}, up to {sum(float(r['max_points']) for r in answers):g} points"]
    for row in answers:
        answer = " ".join(str(row.get("answer") or row["message"]).split())
        points = float(row["max_points"])
        shown = answer if len(answer) <= MAX_ANSWER_SHOWN else \
            f"{answer[:MAX_ANSWER_SHOWN]} [... cut by the grader: {len(answer) - MAX_ANSWER_SHOWN:,} more characters]"
        lines.append(f"  {row['notebook']}: {row['check']} ({points:g} point{'' if points == 1 else 's'}): {shown}")
    return "\n".join(lines)


def _preamble(rows: list[dict], preamble: str) -> str:
    return cut("\n".join(part for part in (preamble, by_hand(rows)) if part), MAX_OUTPUT_TEXT)


def gradescope_results(rows: list[dict], preamble: str, seconds: float) -> dict:
    tests = []
    for row in rows:
        if _kind(row) == "hand":
            continue
        points, most = _counted(row)
        test = {"name": _name(row), "number": str(len(tests) + 1), "score": points, "max_score": most,
                "output": cut(row["message"], MAX_TEST_TEXT),
                "visibility": "after_published" if row["hidden"] else "visible",
                "tags": [row["notebook"], row["status"]]}
        if _kind(row) == "scored":
            test["status"] = "passed" if points >= most else "failed"  # Gradescope's words for a test
        tests.append(test)
    return {"score": sum(t["score"] for t in tests), "execution_time": int(round(seconds)),
            "output": _preamble(rows, preamble), "stdout_visibility": "hidden", "tests": tests}


def refused(rows: list[dict]) -> str | None:
    """The reason, where every check has the same error: the notebook itself could not be
    graded (not a notebook, not UTF-8, a link: basics.submissions refused it)."""
    reasons = {str(row["message"]) for row in rows}
    return reasons.pop() if rows and all(row["status"] == ERROR for row in rows) and len(reasons) == 1 else None


def prairielearn_results(rows: list[dict], preamble: str, show_hidden: bool = False) -> dict:
    if refused(rows):  # not the student's answers but the file: no attempt lost
        return not_gradable(PRAIRIELEARN, refused(rows))
    tests, hidden = [], 0
    for row in rows:
        if _kind(row) == "hand":
            continue
        points, most = _counted(row)
        if row["hidden"] and not show_hidden:
            hidden += 1
            tests.append({"name": f"{row['notebook']}: hidden check {hidden}", "points": points,
                          "max_points": most, "message": "a hidden check: its name and message are not shown",
                          "output": ""})
            continue
        message = str(row["message"])
        tests.append({"name": _name(row), "points": points, "max_points": most,
                      "message": cut(message.splitlines()[0] if message else "", 300),
                      "output": cut(message, MAX_TEST_TEXT)})
    total = sum(t["max_points"] for t in tests)
    output = _preamble(rows, preamble)
    return fit({"gradable": True, "score": (sum(t["points"] for t in tests) / total) if total else 0.0,
                "message": output.splitlines()[0] if output else "", "output": output, "tests": tests})


def fit(results: dict, most: int = MAX_RESULTS_BYTES) -> dict:
    """`results` cut until its JSON is under `most` bytes: the tests' outputs first, then the
    output's, each saying it was cut (scores and names are never cut)."""
    import json

    size = len(json.dumps(results).encode())
    share = MAX_TEST_TEXT
    while size > most and share > 100:
        share //= 2
        for test in results.get("tests", []):
            test["output"] = cut(test.get("output", ""), share)
        results["output"] = cut(results.get("output", ""), share * 4)
        size = len(json.dumps(results).encode())
    return results


def not_gradable(platform: Platform, why: str) -> dict:
    """Results for a submission that cannot be graded (no notebook, a broken file): on
    PrairieLearn not gradable (no attempt lost), on Gradescope 0 with the reason."""
    if platform is PRAIRIELEARN:
        return {"gradable": False, "format_errors": [why]}
    return {"score": 0.0, "output": why, "stdout_visibility": "hidden", "tests": []}

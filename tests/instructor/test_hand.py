"""Written answers marked by hand (labkit.instructor.grading.hand): the file that goes out, the marks
that come back, and every way a mark can be wrong, as tables."""

import csv

import pytest

from labkit.errors import LabError
from labkit.instructor.grading import hand


def answer_row(student="ana", check="answer_q1", answer="forty words about the accept queue", status="by hand"):
    return {"student": student, "notebook": "01_proc_service", "check": check, "points": 0.0, "max_points": 2.0,
            "status": status, "hidden": False, "message": f"answer: {answer}", "answer": answer,
            "look_for": ["queue"]}


def marks_file(tmp_path, *rows, columns=("student", "notebook", "question", "answer", "points", "comment")):
    path = tmp_path / "marked.csv"
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(columns)
        writer.writerows(rows)
    return path


ANSWER = "forty words about the accept queue"

REFUSED = [
    ("points not a number", [("ana", "01_proc_service", "answer_q1", ANSWER, "two", "")], "is not a number"),
    ("points below zero", [("ana", "01_proc_service", "answer_q1", ANSWER, "-1", "")], "below 0"),
    ("one answer marked twice", [("ana", "01_proc_service", "answer_q1", ANSWER, "1", ""),
                                 ("ana", "01_proc_service", "answer_q1", ANSWER, "2", "")], "marked twice"),
]


@pytest.mark.parametrize("name, rows, says", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_file_with_a_bad_mark_is_refused_whole_naming_its_line(tmp_path, name, rows, says):
    with pytest.raises(LabError) as refused:
        hand.read(marks_file(tmp_path, *rows))
    assert says in str(refused.value) and "line " in str(refused.value)


def test_a_file_without_the_columns_is_refused(tmp_path):
    with pytest.raises(LabError, match="no column points"):
        hand.read(marks_file(tmp_path, ("ana", "01", "q"), columns=("student", "notebook", "question")))


SETTLED = [
    # (mark given, answer now, status after, points after, in the message)
    ("2", ANSWER, "marked by hand", 2.0, "marked by hand: 2/2 -- clear"),
    ("1.5", "  forty words about\nthe accept queue ", "marked by hand", 1.5, "1.5/2"),  # spacing is not a change
    ("", ANSWER, "by hand", 0.0, "answer: "),                                          # not marked yet
    ("2", "a different answer handed in later", "by hand", 0.0, "changed since it was marked 2: mark it again"),
]


@pytest.mark.parametrize("given, now, status, points, says", SETTLED)
def test_a_mark_applies_to_the_answer_it_was_given_for(tmp_path, given, now, status, points, says):
    marks = hand.read(marks_file(tmp_path, ("ana", "01_proc_service", "answer_q1", ANSWER, given, "clear")))
    row = answer_row(answer=now)
    line = hand.settle(tmp_path, [row], marks)
    assert (row["status"], row["points"]) == (status, points) and says in row["message"]
    with open(tmp_path / hand.ANSWERS, newline="") as written:
        kept = list(csv.DictReader(written))
    assert [k["points"] for k in kept] == ([f"{points:g}"] if status == "marked by hand" else [""])
    assert kept[0]["look_for"] == "queue" and kept[0]["max_points"] == "2"
    assert ("1 marked by hand" if status == "marked by hand" else "0 marked by hand") in line


@pytest.mark.parametrize("row, says", [
    (("bob", "01_proc_service", "answer_q1", ANSWER, "1", ""), "no answer bob/01_proc_service/answer_q1"),
    (("ana", "01_proc_service", "answer_q1", ANSWER, "3", ""),
     "3 points for ana/01_proc_service/answer_q1, which is worth 2"),
])
def test_bad_mark_is_refused(tmp_path, row, says):
    """A mark for no such answer or above its points is refused before anything is written."""
    marks = hand.read(marks_file(tmp_path, row))
    answer = answer_row()
    with pytest.raises(LabError, match=says):
        hand.settle(tmp_path, [answer], marks)
    assert answer["status"] == "by hand" and not (tmp_path / hand.ANSWERS).exists()


def test_marks_are_read_back(tmp_path):
    """Marks kept in the out folder are read back and a missing file is no marks."""
    assert hand.kept(tmp_path) == {}
    hand.settle(tmp_path, [answer_row()], hand.read(marks_file(
        tmp_path, ("ana", "01_proc_service", "answer_q1", ANSWER, "2", "ok"))))
    assert hand.kept(tmp_path)[("ana", "01_proc_service", "answer_q1")].points == 2.0

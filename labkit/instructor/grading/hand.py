"""Written answers, marked by a person: out to answers.csv, back into the gradebook.

    labkit grade SUBMISSIONS --out OUT                      -> OUT/answers.csv, points empty
    (the instructor fills in points, and a comment if they like)
    labkit grade SUBMISSIONS --out OUT --manual marked.csv  -> the marks in gradebook.csv and
                                                              every feedback page

Invariants:
  * no machine gives a written answer a point: the notebook's ex.answer(...) checks only
    effort (a number of words); its row waits as "by hand" with 0 points until marked;
  * a mark belongs to the answer it was given for: if the student hands in a different
    answer, the mark is not applied (the row says so and answers.csv asks again);
  * a mark is never lost: OUT/answers.csv keeps every mark given so far, and a later run
    (a resubmission, a regrade) starts from it;
  * a bad file is refused whole, naming its line, before a mark of it is used: points that
    are not a number, below 0 or above the question's points, a student, notebook or
    question the gradebook does not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ... import spreadsheet
from ...errors import LabError

ANSWERS = "answers.csv"
COLUMNS = ["student", "notebook", "question", "answer", "look_for", "max_points", "points", "comment"]
BY_HAND = "by hand"          # waiting for a mark
MARKED = "marked by hand"    # its points are a person's


@dataclass
class Mark:
    points: float | None     # None: not marked yet
    comment: str
    answer: str              # the answer as it was when marked
    line: int                # where in its file, for messages
    source: str


def read(path: Path | str) -> dict[tuple[str, str, str], Mark]:
    """The marks of a filled-in answers.csv, by (student, notebook, question)."""
    path = Path(path)
    if not path.is_file():
        raise LabError(f"{path} is not a file", "give the answers.csv that labkit grade wrote, with points filled in")
    with open(path, newline="", encoding="utf-8") as source:
        reader = spreadsheet.Reader(source)
        missing = [c for c in ("student", "notebook", "question", "points") if c not in (reader.fieldnames or [])]
        if missing:
            raise LabError(f"{path} has no column {', '.join(missing)}",
                           f"keep the columns labkit grade wrote: {', '.join(COLUMNS)}")
        marks, problems = {}, []
        for line, row in enumerate(reader, start=2):
            key = (row["student"], row["notebook"], row["question"])
            text = (row.get("points") or "").strip()
            try:
                points = float(text) if text else None
            except ValueError:
                problems.append(f"line {line}: points {text!r} is not a number")
                continue
            if points is not None and not points >= 0:
                problems.append(f"line {line}: points {text} is below 0")
                continue
            if key in marks:
                problems.append(f"line {line}: {'/'.join(key)} is marked twice (first on line {marks[key].line})")
                continue
            marks[key] = Mark(points, (row.get("comment") or "").strip(), row.get("answer") or "", line, str(path))
    if problems:
        raise LabError(f"{path}: {len(problems)} mark(s) cannot be used: " + "; ".join(problems[:5])
                       + ("; ..." if len(problems) > 5 else ""),
                       "correct those lines (points: a number from 0 to max_points, or empty) and run again")
    return marks


def kept(out_dir: Path) -> dict[tuple[str, str, str], Mark]:
    """The marks OUT_DIR/answers.csv holds from earlier runs (none if it is not there)."""
    path = Path(out_dir) / ANSWERS
    return read(path) if path.is_file() else {}


def _same(first: str, second: str) -> bool:
    return " ".join(first.split()) == " ".join(second.split())


def settle(out_dir: Path, rows: list[dict], marks: dict[tuple[str, str, str], Mark]) -> str:
    """Apply `marks` to the answer rows among `rows` (changed in place), write OUT_DIR/answers.csv
    with every answer and its mark, and say in a line how many are marked."""
    answers = [row for row in rows if "answer" in row]
    by_key = {(row["student"], row["notebook"], row["check"]): row for row in answers}
    unknown = [key for key, mark in marks.items() if key not in by_key and mark.points is not None]
    too_many = [(key, mark) for key, mark in marks.items()
                if key in by_key and mark.points is not None and mark.points > by_key[key]["max_points"]]
    if unknown or too_many:
        said = [f"line {marks[key].line}: no answer {'/'.join(key)} in this gradebook" for key in unknown]
        said += [f"line {mark.line}: {mark.points:g} points for {'/'.join(key)}, which is worth "
                 f"{by_key[key]['max_points']:g}" for key, mark in too_many]
        source = next(iter(marks.values())).source
        raise LabError(f"{source}: {len(said)} mark(s) cannot be used: " + "; ".join(said[:5]),
                       "correct the student, notebook and question names (as labkit grade wrote them) "
                       "and the points (at most max_points), then run again")
    table = []
    for key, row in by_key.items():
        mark = marks.get(key)
        points, comment = None, ""
        if mark is not None and mark.points is not None:
            if _same(mark.answer, row["answer"]):
                points, comment = mark.points, mark.comment
                row["points"], row["status"] = points, MARKED
                row["message"] += f"\nmarked by hand: {points:g}/{row['max_points']:g}" + (
                    f" -- {comment}" if comment else "")
            else:
                comment = f"the answer changed since it was marked {mark.points:g}: mark it again"
                row["message"] += f"\n{comment}"
        table.append({"student": key[0], "notebook": key[1], "question": key[2], "answer": row["answer"],
                      "look_for": ", ".join(row.get("look_for") or []), "max_points": f"{row['max_points']:g}",
                      "points": "" if points is None else f"{points:g}", "comment": comment})
    target = Path(out_dir) / ANSWERS
    spreadsheet.write_dicts(target, COLUMNS, table)  # an answer is the student's text: never a formula
    marked = sum(1 for row in table if row["points"] != "")
    return (f"written answers: {len(table)}, {marked} marked by hand, {len(table) - marked} to mark "
            f"(points in {target}, then labkit grade ... --manual {target})")

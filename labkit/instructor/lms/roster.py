"""The class list: who the students are, and how each LMS names them.

    roster.csv (a header row; columns in any order, names as below, case and spaces ignored)

    student_id       required: the lab's name for the student -- their submissions folder, their
                     rows in gradebook.csv (letters, digits, . _ -, as a file name takes it)
    first_name       } the name: Moodle's download and nbgrader's export use it
    last_name        }
    email            Gradescope's download names submitters by it; Moodle's and nbgrader's columns
    canvas_user_id   Canvas's user ID: in its download's file names and the "ID" column of its
                     gradebook (Grades > Export)
    sis_user_id      } Canvas's gradebook columns (copy them from its export); sis_user_id is
    sis_login_id     } also the SID Gradescope may name a submitter by
    section          }

Invariants: a roster is refused whole, naming the line, before anything is collected or
written -- a missing student_id column or value, a student_id that is not a safe folder
name, two rows with the same student_id, or two with the same value in a column a download
is matched by (two students with one email would make a file's owner a guess).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, fields
from pathlib import Path

from ...errors import LabError
from ..basics.submissions import safe_name


@dataclass(frozen=True)
class Student:
    student_id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    canvas_user_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""

    @property
    def name(self) -> str:
        return " ".join(part for part in (self.first_name, self.last_name) if part) or self.student_id


COLUMNS = [f.name for f in fields(Student)]
UNIQUE = ("student_id", "email", "canvas_user_id", "sis_user_id", "sis_login_id")


def squashed(text: str) -> str:
    """A name as matched across systems: case, accents kept, every non-letter dropped."""
    return re.sub(r"[\W_]+", "", text.casefold())


class Roster:
    def __init__(self, students: list[Student], source: str = "the roster"):
        self.students = students
        self.source = source
        self._by = {column: {getattr(s, column).casefold(): s for s in students if getattr(s, column)}
                    for column in UNIQUE}
        names: dict[str, list[Student]] = {}
        for student in students:
            names.setdefault(squashed(student.name), []).append(student)
        self._names = names

    def by(self, column: str, value: str) -> Student | None:
        return self._by[column].get(value.strip().casefold())

    def by_name(self, name: str) -> list[Student]:
        """Every student whose first and last name squash to `name`'s (several: a tie to report)."""
        return self._names.get(squashed(name), [])

    def require(self, columns: tuple[str, ...], why: str) -> None:
        """Refuse a roster where no student has any of `columns` filled in."""
        if not any(getattr(s, c) for s in self.students for c in columns):
            raise LabError(f"{self.source} has no {' or '.join(columns)} for any student, and {why}",
                           f"add the column{'s' if len(columns) > 1 else ''} {', '.join(columns)} to it "
                           f"(labkit.instructor.lms.roster lists every column)")

    def __iter__(self):
        return iter(self.students)

    def __len__(self) -> int:
        return len(self.students)


def read(path: Path | str) -> Roster:
    path = Path(path)
    if not path.is_file():
        raise LabError(f"the roster {path} is not a file",
                       "give a CSV with a student_id column and one row per student (--roster roster.csv)")
    with open(path, newline="", encoding="utf-8-sig") as source:  # -sig: a spreadsheet's byte-order mark
        reader = csv.reader(source)
        header = next(reader, None)
        if not header:
            raise LabError(f"the roster {path} is empty", "its first line names the columns: student_id, ...")
        keys = [re.sub(r"\s+", "_", h.strip().casefold()) for h in header]
        if "student_id" not in keys:
            raise LabError(f"the roster {path} has no student_id column (its columns: {', '.join(header)})",
                           "name the column with the lab's id for each student student_id (other columns: "
                           f"{', '.join(COLUMNS[1:])})")
        known = {i: key for i, key in enumerate(keys) if key in COLUMNS}
        students, problems, first_line = [], [], {}
        for line, row in enumerate(reader, start=2):
            if not any(cell.strip() for cell in row):
                continue
            values = {key: (row[i].strip() if i < len(row) else "") for i, key in known.items()}
            student = Student(**values)
            if not student.student_id:
                problems.append(f"line {line}: no student_id")
            elif safe_name(student.student_id) != student.student_id:
                problems.append(f"line {line}: student_id {student.student_id!r} is not a folder name (use "
                                "letters, digits, '.', '_' and '-', not starting with '.')")
            for column in UNIQUE:
                value = getattr(student, column).casefold()
                if value and (column, value) in first_line:
                    problems.append(f"line {line}: {column} {getattr(student, column)!r} is on line "
                                    f"{first_line[(column, value)]} too")
                first_line.setdefault((column, value), line)
            students.append(student)
    if problems:
        raise LabError(f"the roster {path} cannot be used: " + "; ".join(problems[:5])
                       + ("; ..." if len(problems) > 5 else ""), "correct those lines and run again")
    if not students:
        raise LabError(f"the roster {path} has no students", "one row per student, under the header")
    return Roster(students, str(path))

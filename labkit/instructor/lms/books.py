"""`labkit gradebook`: the graded class as an LMS takes grades back.

    labkit gradebook OUT --format canvas|moodle|nbgrader|wide --roster roster.csv
                     [--due DATE ...] [--late-penalty RULE] [--manual answers.csv] [-o FILE]

From OUT (what `labkit grade` wrote: gradebook.csv, one row per check, and submitted.csv,
when each notebook was handed in) one row per student of the roster:

wide       student_id, last_name, first_name, email, section, a column per notebook, total,
           max_total; with a penalty rule, `<notebook> late_penalty` per notebook too.
canvas     Canvas's gradebook import (instructure/canvas-lms, lib/gradebook_importer.rb):
           Student ("Last, First"), ID (canvas_user_id: what Canvas matches a student by), SIS User
           ID, SIS Login ID, Section, then a column per notebook titled with its name (Canvas
           matches it to the assignment of that title, or offers to create one) and a row
           "    Points Possible" first.  No total: Canvas computes its own, and would take a
           "total" column for one more assignment.
moodle     Moodle's gradebook import (Grades > Import > CSV file), in the columns of its own
           export: First name, Last name, ID number (sis_user_id), Email address (map it to
           "email address" to match students), a column per notebook; no total, as above.
nbgrader   `nbgrader export`'s columns, a row per student and notebook (the notebook is the
           assignment): assignment, duedate, timestamp, student_id, last_name, first_name,
           email, raw_score, late_submission_penalty, score, max_score; times in UTC.

A roster student who was not graded gets empty cells (the LMS keeps what it has; nbgrader:
0.0, as its export gives a missing submission); a graded student on no roster row is left
out of an LMS's file (it could not match them) and named in the summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ... import spreadsheet
from ...errors import LabError
from . import late as lateness
from .roster import Roster

FORMATS = ("canvas", "moodle", "nbgrader", "wide")
SUBMITTED = "submitted.csv"
SUBMITTED_COLUMNS = ["student", "notebook", "submitted_at", "lms", "handed_in_as", "late_by_lms"]
NBGRADER_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
                    "raw_score", "late_submission_penalty", "score", "max_score"]


@dataclass
class Grade:
    raw: float | None               # None: not graded
    max_points: float
    submitted: datetime | None
    late_s: float | None
    late_by_lms: bool
    penalty: float | None           # None: the rule cannot say (no time)

    @property
    def score(self) -> float | None:
        return None if self.raw is None else max(0.0, self.raw - (self.penalty or 0.0))


def read_submitted(out_dir: Path) -> dict[tuple[str, str], dict]:
    path = Path(out_dir) / SUBMITTED
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as source:
        return {(row["student"], row["notebook"]): row for row in spreadsheet.Reader(source)}


def grades(frame, submitted: dict, due: dict[str, datetime], rule: lateness.Rule):
    """Per (student, notebook): the Grade; and the notebooks in the gradebook's order."""
    notebooks = list(dict.fromkeys(frame["notebook"]))
    sums = frame.groupby(["student", "notebook"], sort=False)[["points", "max_points"]].sum()
    most = frame.groupby("notebook")["max_points"].sum() / frame.groupby("notebook")["student"].nunique()
    table = {}
    for (student, notebook), row in sums.iterrows():
        entry = submitted.get((student, notebook), {})
        when = datetime.fromisoformat(entry["submitted_at"]) if entry.get("submitted_at") else None
        late_s = (when - due[notebook]).total_seconds() if when and notebook in due else None
        by_lms = entry.get("late_by_lms") == "true"
        if notebook not in due and rule.kind != "zero":
            penalty = 0.0            # no due date: nothing is late by the clock
        else:
            penalty = rule.penalty(float(row["points"]), float(row["max_points"]),
                                   max(late_s, 0.0) if late_s is not None else None, by_lms)
        table[(student, notebook)] = Grade(float(row["points"]), float(row["max_points"]), when, late_s,
                                           by_lms, penalty)
    return table, notebooks, {n: float(most[n]) for n in notebooks}


def _points(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def rows_for(fmt: str, roster: Roster, table: dict, notebooks: list[str], most: dict[str, float],
             due: dict[str, datetime], rule: lateness.Rule) -> tuple[list[str], list[list[str]]]:
    def grade(student, notebook) -> Grade | None:
        return table.get((student.student_id, notebook))

    if fmt == "wide":
        penalties = rule.kind != "none"
        header = ["student_id", "last_name", "first_name", "email", "section", *notebooks, "total", "max_total"]
        header += [f"{n} late_penalty" for n in notebooks] if penalties else []
        rows = []
        for s in roster:
            got = [grade(s, n) for n in notebooks]
            scores = [g.score if g else None for g in got]
            total = None if all(v is None for v in scores) else sum(v or 0.0 for v in scores)
            row = [s.student_id, s.last_name, s.first_name, s.email, s.section, *map(_points, scores),
                   _points(total), _points(sum(most.values()))]
            if penalties:
                row += ["?" if g and g.penalty is None else _points(g.penalty if g else None) for g in got]
            rows.append(row)
        return header, rows
    if fmt == "canvas":
        header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *notebooks]
        rows = [["    Points Possible", "", "", "", "", *(_points(most[n]) for n in notebooks)]]
        for s in roster:
            sortable = ", ".join(p for p in (s.last_name, s.first_name) if p) or s.student_id
            rows.append([sortable, s.canvas_user_id, s.sis_user_id, s.sis_login_id, s.section,
                         *(_points(g.score if (g := grade(s, n)) else None) for n in notebooks)])
        return header, rows
    if fmt == "moodle":
        header = ["First name", "Last name", "ID number", "Email address", *notebooks]
        rows = [[s.first_name, s.last_name, s.sis_user_id, s.email,
                 *(_points(g.score if (g := grade(s, n)) else None) for n in notebooks)] for s in roster]
        return header, rows
    if fmt == "nbgrader":
        rows = []
        for n in notebooks:
            for s in roster:
                g = grade(s, n)
                rows.append([n, _utc(due.get(n), micro=False), _utc(g.submitted if g else None), s.student_id,
                             s.last_name, s.first_name, s.email, _float(g.raw if g else 0.0),
                             _float((g.penalty or 0.0) if g else 0.0), _float(g.score if g else 0.0),
                             _float(most[n])])
        return NBGRADER_COLUMNS, rows
    raise LabError(f"--format {fmt}: not a gradebook format", f"use one of {', '.join(FORMATS)}")


def _float(value: float | None) -> str:
    return str(float(value or 0.0))


def _utc(when: datetime | None, micro: bool = True) -> str:
    """A time as nbgrader's export writes one: naive UTC, str() of a datetime."""
    return "" if when is None else str(when.astimezone(timezone.utc).replace(tzinfo=None))


def export(frame, out_dir: Path | str, fmt: str, roster: Roster, *, due: list[str] | None = None,
           penalty: str | None = None, target: Path | str | None = None) -> tuple[Path, str]:
    """From `frame` (OUT_DIR's gradebook.csv, marks merged: course.class_grades.read_gradebook or
    remark) write OUT_DIR/gradebook_<fmt>.csv (or `target`); return it and a summary."""
    out_dir = Path(out_dir)
    if fmt not in FORMATS:
        raise LabError(f"--format {fmt}: not a gradebook format", f"use one of {', '.join(FORMATS)}")
    rule = lateness.rule(penalty)
    notebooks = list(dict.fromkeys(frame["notebook"]))
    dates = lateness.due_dates(due, notebooks)
    if rule.kind == "rate" and not dates:
        raise LabError(f"--late-penalty {rule.text} without --due", "say when the notebooks were due: --due DATE")
    table, notebooks, most = grades(frame, read_submitted(out_dir), dates, rule)
    header, rows = rows_for(fmt, roster, table, notebooks, most, dates, rule)
    path = Path(target) if target else out_dir / f"gradebook_{fmt}.csv"
    spreadsheet.write(path, header, rows)  # names come from the LMS, as each person set them
    on_roster = {s.student_id for s in roster}
    graded = dict.fromkeys(frame["student"])
    lines = [f"{fmt} gradebook: {path} ({len(roster)} student(s) of {roster.source}, "
             f"{len(notebooks)} notebook(s): {', '.join(notebooks)})"]
    left_out = [s for s in graded if s not in on_roster]
    if left_out:
        lines.append(f"graded but on no roster row (not in the file): {', '.join(left_out)}")
    missing = [s.student_id for s in roster if s.student_id not in graded]
    if missing:
        lines.append(f"on the roster, not graded (empty cells): {', '.join(missing)}")
    for name, when in dates.items():
        lines.append(f"{name} due {when.isoformat(timespec='minutes')}")
    late = [(k, g) for k, g in table.items() if (g.late_s or 0) > 0 or (g.late_s is None and g.late_by_lms)]
    for (student, notebook), g in late:
        how = (f"{g.late_s / 3600:.1f} h late" if g.late_s is not None else "late by the LMS's word (no time)")
        lost = "a rate needs the time: no penalty taken" if g.penalty is None else f"-{g.penalty:g} points"
        lines.append(f"late: {student}/{notebook}: {how}, {rule.text}: {lost}")
    no_time = sum(1 for g in table.values() if g.submitted is None)
    if dates and no_time:
        lines.append(f"{no_time} graded notebook(s) have no submission time (their download gave none): "
                     "late only by the LMS's own word")
    return path, "\n".join(lines)

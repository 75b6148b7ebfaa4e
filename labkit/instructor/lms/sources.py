"""How each LMS names what a student handed in: one declaration per LMS.

Each source turns a checked download (lms.archive) into Found items: the member, the roster
row it belongs to (or why none), the name the student gave the file, and when it was handed
in, where the download says so.  What each reads, from the LMS's own code:

canvas      Assignments > Download Submissions (instructure/canvas-lms, lib/content_zipper.rb):
            a flat zip of `<name>[_LATE]_<user id>_<attachment id>_<file name>`, <name> the
            sortable name lowercased with every non-word character removed; LATE when Canvas
            judged it late as the zip was made; only the latest attempt; anonymous grading
            names `anon_<id>`, whom no roster can match.  The zip's times are when the zip was
            made, not when the work was handed in: Canvas gives no submission time here.
moodle      Assignment > Download all submissions (moodle/moodle, mod/assign/classes/downloader.php):
            `<Full name>_<participant id>_assignsubmission_file/<file>` (as folders, the
            default; older versions `..._file_/<file>`) or `..._assignsubmission_file_<file>`;
            the participant id is the assignment's own, so students are matched by their name;
            only the latest attempt.  The zip's times are when it was made.
gradescope  Assignment > Review Grades > Export Submissions: `assignment_<id>_export/` with a folder
            per submission `submission_<id>/` and submission_metadata.yml, which names each
            submission's submitters (:name:, :sid:, :email:; several for a group) and its
            :created_at: time; submitters are matched by email, else SID (sis_user_id).
folder      `<student_id>/<files>` as a hub's exchange or a hand-made folder has it; the time
            from nbgrader's timestamp.txt in the student's folder when there is one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import PurePosixPath
from typing import Callable

from ...errors import LabError
from .archive import Member
from .roster import Roster, Student
from .times import TIMESTAMP, parse_time
from ..basics.submissions import Refused


@dataclass
class Found:
    member: Member
    student: Student | None
    why_unmatched: str           # when student is None
    file_name: str               # the name the student gave the file
    time: datetime | None        # when it was handed in (aware), if the download says
    late: bool | None = None     # the LMS's own verdict, where it gives one (Canvas)
    attempt: int = 0             # breaks ties between files of one time: the higher wins


@dataclass(frozen=True)
class Source:
    name: str
    folder: bool                                   # reads a folder, not a zip
    needs: tuple[str, ...]                         # roster columns, any one of them
    why: str                                       # what they are for
    find: Callable                                 # (download, roster) -> (found, ignored)

    def check_roster(self, roster: Roster) -> None:
        roster.require(self.needs, f"a {self.name} download is matched to students by {self.why}")


# ---------------------------------------------------------------------------
# canvas

_CANVAS_ANON = re.compile(r"^(?:LATE_)?anon_([A-Za-z0-9]+)_(\d+_)?(.+)$")
_CANVAS = re.compile(r"^(?P<name>.*?)_(?P<late>LATE_)?(?P<user>\d+)_(?:(?P<attachment>\d+)_)?(?P<file>.+)$")


def _canvas(download, roster: Roster):
    found, ignored = [], []
    for member in download.members:
        name = member.name
        if "/" in name:
            found.append(Found(member, None, "Canvas's download is flat; this file is in a folder", name, None))
            continue
        anonymous = _CANVAS_ANON.match(name)
        match = None if anonymous else _CANVAS.match(name)
        if anonymous:
            why = (f"anonymous grading: Canvas names the student anon_{anonymous[1]} "
                   "(turn anonymity off to collect, or hand the file in by hand)")
            found.append(Found(member, None, why, name, None))
        elif not match:
            found.append(Found(member, None, "not named as Canvas names a submission "
                                             "(<name>_<user id>_<attachment id>_<file>)", name, None))
        else:
            student = roster.by("canvas_user_id", match["user"])
            why = "" if student else f"no roster row has canvas_user_id {match['user']} ({match['name'] or '?'})"
            text_entry = match["attachment"] is None
            found.append(Found(member, student, why, match["file"], None, late=bool(match["late"]),
                               attempt=int(match["attachment"] or 0) if not text_entry else 0))
    return found, ignored


# ---------------------------------------------------------------------------
# moodle

_MOODLE = re.compile(r"^(?P<who>[^/]+?)(?:_(?P<id>\d+))?_assignsubmission_(?P<plugin>[a-z0-9]+)(?:_?/|_)(?P<file>.+)$")


def _moodle(download, roster: Roster):
    found = []
    for member in download.members:
        match = _MOODLE.match(member.name)
        if not match:
            found.append(Found(member, None, "not named as Moodle names a submission "
                                             "(<Full name>_<id>_assignsubmission_file/<file>)", member.name, None))
            continue
        who = match["who"]
        students = roster.by_name(who) or roster.by_name(" ".join(reversed(who.split(" ", 1))))
        if who.startswith("Participant"):
            why = "blind marking: Moodle names the student Participant <id> (reveal identities to collect)"
        elif len(students) > 1:
            why = f"{len(students)} roster rows are named {who!r}: " + ", ".join(s.student_id for s in students)
        else:
            why = "" if students else f"no roster row is named {who!r} (first_name last_name)"
        student = students[0] if len(students) == 1 and not who.startswith("Participant") else None
        file_name = PurePosixPath(match["file"]).name if match["plugin"] == "file" else match["file"]
        found.append(Found(member, student, why, file_name, None))
    return found, []


# ---------------------------------------------------------------------------
# gradescope

_GRADESCOPE = re.compile(r"^(?:assignment_\d+_export/)?(?P<submission>submission_\d+)/(?P<file>.+)$")
METADATA = "submission_metadata.yml"


def _gradescope(download, roster: Roster):
    import yaml

    metadata = [m for m in download.members if PurePosixPath(m.name).name == METADATA]
    if len(metadata) != 1:
        raise LabError(f"{download.path} has {'no' if not metadata else len(metadata)} {METADATA}",
                       "give the zip of Gradescope's Export Submissions, whole (it names who handed in what)")
    try:
        table = yaml.safe_load(download.read(metadata[0]).decode("utf-8")) or {}
    except Exception as error:  # noqa: BLE001 -- yaml's errors name the line, not the content
        raise LabError(f"{download.path}: {METADATA} cannot be read ({type(error).__name__})",
                       "download the export again from Gradescope") from None
    if not isinstance(table, dict):
        raise LabError(f"{download.path}: {METADATA} is not a table of submissions", "download the export again")
    found = []
    for member in download.members:
        if member is metadata[0]:
            continue
        match = _GRADESCOPE.match(member.name)
        entry = table.get(match["submission"]) if match else None
        if not isinstance(entry, dict):
            found.append(Found(member, None, "in no submission of the export's metadata", member.name, None))
            continue
        when = gradescope_time(entry.get(":created_at"))
        submitters = [s for s in entry.get(":submitters") or [] if isinstance(s, dict)]
        matched = False
        for submitter in submitters:
            email, sid = str(submitter.get(":email") or ""), str(submitter.get(":sid") or "")
            student = (roster.by("email", email) if email else None) or (roster.by("sis_user_id", sid) if sid else None)
            if student:
                matched = True
                found.append(Found(member, student, "", PurePosixPath(match["file"]).name, when,
                                   attempt=int(match["submission"].split("_")[1])))
        if not matched:
            named = ", ".join(f"{s.get(':name', '?')} <{s.get(':email', '?')}> SID {s.get(':sid', '?')}"
                              for s in submitters) or "no submitter"
            found.append(Found(member, None, f"no roster row has the email or sis_user_id of {named}",
                               member.name, when))
    return found, [metadata[0].name]


def gradescope_time(value) -> datetime | None:
    """:created_at: as YAML reads it (a datetime) or as text with Ruby's nanoseconds."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    match = re.match(r"^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:\.(\d+))? ?(Z|[+-]\d\d:?\d\d)?$", str(value or ""))
    if not match:
        return None
    zone = match[4] or "Z"
    zone = "+00:00" if zone == "Z" else (zone if ":" in zone else zone[:3] + ":" + zone[3:])
    return datetime.fromisoformat(f"{match[1]}T{match[2]}.{(match[3] or '0')[:6].ljust(6, '0')}{zone}")


# ---------------------------------------------------------------------------
# folder


def _folder(download, roster: Roster):

    found, ignored, times = [], [], {}
    for member in download.members:
        parts = member.path.parts
        if len(parts) < 2:
            found.append(Found(member, None, "not in a student's folder", member.name, None))
            continue
        if len(parts) == 2 and parts[1] == TIMESTAMP:
            try:
                times[parts[0]] = parse_time(download.read(member).decode("utf-8", "replace"))
            except Refused:
                times[parts[0]] = None
            ignored.append(member.name)
            continue
        student = roster.by("student_id", parts[0])
        found.append(Found(member, student, "" if student else f"no roster row has student_id {parts[0]!r}",
                           str(PurePosixPath(*parts[1:])), None))
    for item in found:
        if item.student is not None:
            item.time = times.get(item.student.student_id)
    return found, ignored


SOURCES = {
    "canvas": Source("canvas", False, ("canvas_user_id",), "the user ID in its file names", _canvas),
    "moodle": Source("moodle", False, ("first_name", "last_name"), "the full name in its file names", _moodle),
    "gradescope": Source("gradescope", False, ("email", "sis_user_id"), "the submitters' email or SID",
                         _gradescope),
    "folder": Source("folder", True, ("student_id",), "the folder names", _folder),
}

"""`labkit collect`: an LMS's download into the folders `labkit grade` reads.

    labkit collect --from canvas|moodle|gradescope|folder DOWNLOAD --roster roster.csv --out submissions/

    submissions/<student_id>/<notebook>.ipynb      a notebook of the lab, under its own name
    submissions/<student_id>/csrc/servers/mine.c   the capstone's server
    submissions/<student_id>/other/<name>          anything else they handed in (not graded)
    submissions/<student_id>/timestamp.txt         when they last handed in (nbgrader's format)
    submissions/<student_id>/collected.csv         per file: where it came from and when
    submissions/.unmatched/<lms>/<name>            files whose owner is on no roster row (kept)

Invariants:
  * the download is checked whole before a byte is written (lms.archive), and what it holds
    is written to a folder of its own inside OUT, then moved into place: an interrupted or
    refused collect leaves OUT as it was;
  * for each student and file the latest submission wins, within a download and across
    downloads collected into the same OUT (a resubmission collected later replaces the older
    file; an older download collected later replaces nothing);
  * nothing is dropped in silence: a file whose owner is on no roster row is kept under
    .unmatched and named in the report, as is every file refused, superseded or not the lab's.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from ... import paths, spreadsheet
from ...errors import LabError
from ..basics.submissions import Refused, read_regular, safe_name
from . import archive, roster as rosters
from .sources import SOURCES, Found, Source
from .times import TIMESTAMP, nbgrader_time, parse_time

CAPSTONE = PurePosixPath("csrc/servers/mine.c")
RECORD = "collected.csv"
RECORD_COLUMNS = ["file", "submitted_at", "lms", "handed_in_as", "late_by_lms", "attempt"]
UNMATCHED = ".unmatched"


def lab_files() -> dict[str, PurePosixPath]:
    """The file names a student hands in, and where each goes in their folder."""
    files = {p.name: PurePosixPath(p.name) for p in sorted(paths.NOTEBOOKS.glob("[0-9]*.ipynb"))}
    files[CAPSTONE.name] = CAPSTONE
    return files


def place(name: str, files: dict[str, PurePosixPath]) -> PurePosixPath | None:
    """Where a handed-in file called `name` goes, or None for a file that is not the lab's.
    An LMS or a browser numbers a name it has seen before (`01_proc_service-1.ipynb`,
    `01_proc_service (1).ipynb`): the number is dropped."""
    base = PurePosixPath(name).name
    if base in files:
        return files[base]
    stem, dot, suffix = base.rpartition(".")
    unnumbered = re.sub(r"(-\d+| ?\(\d+\))$", "", stem) + dot + suffix
    return files.get(unnumbered)


@dataclass
class Report:
    lms: str
    source: Path
    out: Path
    collected: list[str] = field(default_factory=list)      # "student: file (time)"
    unmatched: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    not_the_labs: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)         # roster students with nothing

    def text(self) -> str:
        lines = [f"collected from {self.lms} download {self.source} into {self.out}: "
                 f"{len(self.collected)} file(s) of {len({c.split(':')[0] for c in self.collected})} student(s)"]
        for title, items in (("files whose owner is on no roster row (kept in "
                              f"{self.out / UNMATCHED / self.lms})", self.unmatched),
                             ("refused (not collected)", self.refused),
                             ("older submissions of a file collected (the latest wins)", self.superseded),
                             ("not a file of the lab (kept under other/, not graded)", self.not_the_labs),
                             ("the LMS's own files (read, not collected)", self.ignored),
                             ("students on the roster who handed in nothing", self.missing)):
            if items:
                lines.append(f"{title}: {len(items)}")
                lines += [f"  {item}" for item in items[:50]] + ([f"  ... {len(items) - 50} more"]
                                                                 if len(items) > 50 else [])
        return "\n".join(lines)


def collect(lms: str, download: Path | str, roster: Path | str | rosters.Roster, out: Path | str) -> Report:
    """Collect `download` (a zip, or for lms "folder" a folder) into `out`; see the module docstring."""
    if lms not in SOURCES:
        raise LabError(f"--from {lms}: not an LMS the lab reads", f"use one of {', '.join(SOURCES)}")
    source: Source = SOURCES[lms]
    roster = roster if isinstance(roster, rosters.Roster) else rosters.read(roster)
    source.check_roster(roster)
    download, out = Path(download), Path(out)
    opened = archive.FolderDownload(download) if source.folder else archive.ZipDownload(download)
    report = Report(lms, download, out)
    try:
        found, report.ignored = source.find(opened, roster)
        report.refused += [f"{link}: a symbolic link, not followed" for link in getattr(opened, "links", [])]
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".collecting-", dir=out))
        try:
            chosen = _latest(found, report, lab_files())
            written = _stage(opened, chosen, staging, report)
            _move_into_place(written, staging, out, report)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        opened.close()
    handed_in = {c.split(":")[0] for c in report.collected}
    report.missing = [s.student_id for s in roster if s.student_id not in handed_in
                      and not (out / s.student_id / RECORD).is_file()]
    return report


@dataclass
class _Chosen:
    found: Found
    target: PurePosixPath      # inside the student's folder, or inside .unmatched/<lms>/


def _latest(found: list[Found], report: Report, files) -> dict[tuple[str, PurePosixPath], _Chosen]:
    chosen: dict[tuple[str, PurePosixPath], _Chosen] = {}
    for item in found:
        if item.student is None:
            key = (UNMATCHED, PurePosixPath(safe_name(item.member.name.replace("/", "__"), limit=150)))
            report.unmatched.append(f"{item.member.name}: {item.why_unmatched}")
        else:
            target = place(item.file_name, files)
            if target is None:
                target = PurePosixPath("other") / safe_name(item.file_name)
                report.not_the_labs.append(f"{item.student.student_id}: {item.member.name}")
            key = (item.student.student_id, target)
        earlier = chosen.get(key)
        if earlier is None or _order(item) >= _order(earlier.found):
            if earlier is not None and key[0] != UNMATCHED:
                report.superseded.append(f"{key[0]}: {earlier.found.member.name} (handed in "
                                         f"{_when(earlier.found)}), replaced by {item.member.name} ({_when(item)})")
            chosen[key] = _Chosen(item, key[1])
        elif key[0] != UNMATCHED:
            report.superseded.append(f"{key[0]}: {item.member.name} ({_when(item)}), older than "
                                     f"{earlier.found.member.name} ({_when(earlier.found)})")
    return chosen


def _order(item: Found):
    epoch = datetime.min.replace(tzinfo=timezone.utc)
    return (item.time or epoch, item.attempt)


def _when(item: Found) -> str:
    return item.time.isoformat(timespec="seconds") if item.time else "no time given"


def _stage(opened, chosen, staging: Path, report: Report) -> list[tuple[str, PurePosixPath, Found]]:
    written = []
    for (student, _), pick in chosen.items():
        folder = staging / (UNMATCHED if student == UNMATCHED else student)
        target = folder / (PurePosixPath(report.lms) / pick.target if student == UNMATCHED else pick.target)
        try:
            data = opened.read(pick.found.member)
        except Refused as refusal:
            report.refused.append(f"{pick.found.member.name}: {refusal}")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as handle:   # a fresh file, never through a link
            handle.write(data)
        written.append((student, pick.target, pick.found))
    return written


def _move_into_place(written, staging: Path, out: Path, report: Report) -> None:
    by_student: dict[str, list] = {}
    for student, target, found in written:
        by_student.setdefault(student, []).append((target, found))
    for student, items in sorted(by_student.items()):
        if student == UNMATCHED:
            for target, found in items:
                destination = out / UNMATCHED / report.lms / target
                destination.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / UNMATCHED / report.lms / target, destination)
            continue
        folder = out / student
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise LabError(f"{folder} is not a folder (a link?)", f"move it away and collect again into {out}")
        record = read_record(folder)
        for target, found in items:
            kept = record.get(str(target))
            when = found.time.isoformat() if found.time else ""
            if kept and _newer(kept, found, report.lms):
                report.superseded.append(f"{student}: {found.member.name} ({_when(found)}), older than the "
                                         f"{target} collected before ({kept['submitted_at']})")
                continue
            destination = folder / target
            destination.parent.mkdir(parents=True, exist_ok=True)
            if destination.is_symlink():
                destination.unlink()
            os.replace(staging / student / target, destination)
            record[str(target)] = {"file": str(target), "submitted_at": when, "lms": report.lms,
                                   "handed_in_as": found.member.name,
                                   "late_by_lms": "" if found.late is None else str(found.late).lower(),
                                   "attempt": str(found.attempt)}
            report.collected.append(f"{student}: {target} ({_when(found)})")
        _write_record(folder, record)


def _newer(kept: dict, found: Found, lms: str) -> bool:
    """Whether the file collected before is a later submission than `found`: by time where both
    have one, else (Canvas) by the attempt's number, which grows with each upload."""
    if kept["submitted_at"] and found.time:
        return datetime.fromisoformat(kept["submitted_at"]) > found.time
    if kept["lms"] == lms and not kept["submitted_at"] and not found.time and kept["attempt"].isdigit():
        return int(kept["attempt"]) > found.attempt
    return False


def read_record(folder: Path) -> dict[str, dict]:
    """collected.csv of a student's folder, by file (empty when there is none)."""
    import io

    try:
        text = read_regular(folder / RECORD, limit=1 << 20, what=RECORD).decode("utf-8", "replace")
    except Refused:
        return {}
    rows = spreadsheet.Reader(io.StringIO(text, newline=""))
    return {row["file"]: {c: row.get(c) or "" for c in RECORD_COLUMNS} for row in rows if row.get("file")}


def _write_record(folder: Path, record: dict[str, dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # handed_in_as is the file name a student gave: never a formula
    spreadsheet.write_dicts(folder / RECORD, RECORD_COLUMNS, sorted(record.values(), key=lambda row: row["file"]))
    times = [datetime.fromisoformat(row["submitted_at"]) for row in record.values() if row["submitted_at"]]
    if times:
        (folder / TIMESTAMP).write_text(nbgrader_time(max(times)))   # no newline, as nbgrader writes it


def submission_times(folder: Path) -> dict[str, datetime]:
    """When each notebook in a collected student folder was handed in, by notebook name
    (collected.csv; else nbgrader's timestamp.txt for all of them; else nothing)."""
    times = {}
    for file, row in read_record(folder).items():
        if row["submitted_at"] and file.endswith(".ipynb"):
            times[PurePosixPath(file).stem] = datetime.fromisoformat(row["submitted_at"])
    if times:
        return times
    try:
        when = parse_time(read_regular(folder / TIMESTAMP, limit=1024, what=TIMESTAMP).decode("utf-8", "replace"))
    except Refused:
        return {}
    return {p.stem: when for p in folder.glob("*.ipynb")} if when else {}


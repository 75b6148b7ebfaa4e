"""`labkit feedback OUT --zip`: each student's feedback, packed to hand back.

    OUT/upload/<student_id>.zip        every student: feedback.html and the executed notebooks
                                       (executed/<notebook>.ipynb), to mail or attach by hand
    OUT/upload/canvas_feedback.zip     --lms canvas: for Canvas's "Re-Upload Submissions" of an
                                       assignment, which attaches each file as a comment to the
                                       submission whose user ID and attachment ID are the first two
                                       all-digit parts of its name (instructure/canvas-lms,
                                       Assignment#infer_comment_context_from_filename): so each
                                       entry keeps the prefix of the file it answers,
                                       `<name>_<user id>_<attachment id>_feedback.html`.  Files of
                                       other assignments are ignored by Canvas: one zip serves all.
    OUT/upload/moodle_feedback.zip     --lms moodle: for "Upload multiple feedback files in a zip",
                                       named with the download's prefix
                                       `<Full name>_<participant id>_assignsubmission_file_`.

The prefixes come from OUT/submitted.csv (`labkit grade` copies what `labkit collect`
recorded); a student collected from elsewhere is only in their own zip, and the summary
says so.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from ...errors import LabError
from ..basics.submissions import safe_name
from .books import read_submitted

LMS_ZIPS = ("canvas", "moodle")
_CANVAS_PREFIX = re.compile(r"^(.*?_(?:LATE_)?\d+_\d+)_")
_MOODLE_PREFIX = re.compile(r"^(.+?_assignsubmission_file)(?:_?/|_)")


def _pages(out_dir: Path) -> dict[str, Path]:
    folder = out_dir / "feedback"
    pages = {p.stem: p for p in sorted(folder.glob("*.html"))} if folder.is_dir() else {}
    if not pages:
        raise LabError(f"{folder} has no feedback pages", f"grade the class first: labkit grade SUBMISSIONS --out "
                                                          f"{out_dir}")
    return pages


def _write_zip(path: Path, entries: list[tuple[str, Path]]) -> None:
    partial = path.with_name(path.name + ".part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, source in entries:
            archive.write(source, name)
    partial.replace(path)


def pack(out_dir: Path | str, lms: str | None = None) -> tuple[list[Path], str]:
    """The archives above; return them and a summary."""
    out_dir = Path(out_dir)
    if lms and lms not in LMS_ZIPS:
        raise LabError(f"--lms {lms}: the lab packs feedback for Canvas and Moodle's uploads",
                       f"use --lms {' or --lms '.join(LMS_ZIPS)}, or leave it out for one zip per student")
    pages = _pages(out_dir)
    upload = out_dir / "upload"
    upload.mkdir(exist_ok=True)
    written = []
    for student, page in pages.items():
        executed = sorted((out_dir / "executed" / student).glob("*.ipynb"))
        target = upload / f"{student}.zip"
        _write_zip(target, [("feedback.html", page)] + [(f"executed/{p.name}", p) for p in executed])
        written.append(target)
    lines = [f"{len(written)} student zip(s) in {upload}: feedback.html and executed/<notebook>.ipynb each"]
    if lms:
        entries, without = [], []
        pattern = _CANVAS_PREFIX if lms == "canvas" else _MOODLE_PREFIX
        submitted = read_submitted(out_dir)
        for (student, notebook), row in submitted.items():
            page = pages.get(safe_name(student))
            match = pattern.match(row.get("handed_in_as", "")) if row.get("lms") == lms else None
            if page is None or not match:
                without.append(f"{student}/{notebook}")
                continue
            entries.append((f"{match[1]}_feedback.html", page))
            executed = out_dir / "executed" / safe_name(student) / f"{notebook}.ipynb"
            if executed.is_file():
                entries.append((f"{match[1]}_{notebook}_executed.ipynb", executed))
        entries = list(dict(entries).items())       # a page once per submitted file's prefix
        target = upload / f"{lms}_feedback.zip"
        _write_zip(target, entries)
        written.append(target)
        lines.append(f"{target}: {len(entries)} file(s) named for {lms.capitalize()}'s upload")
        if without:
            lines.append(f"not collected from {lms} (only in their own zip): {', '.join(without)}")
    return written, "\n".join(lines)

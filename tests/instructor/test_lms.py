"""The course's round trip with its LMS: downloads collected, the class graded, grades and
feedback handed back.

The downloads are built here with zipfile, named as each LMS's own code names them
(labkit.instructor.lms.sources cites where): Canvas's flat `<name>[_LATE]_<user>_<attachment>_<file>`,
Moodle's `<Full name>_<id>_assignsubmission_file/<file>`, Gradescope's folders and
submission_metadata.yml.  Hostile zips are built by hand: a way out of the folder, links,
bombs, lying headers."""

import copy
import csv
import io
import os
import stat
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from labkit import paths
from labkit.errors import LabError
from labkit.instructor.lms import archive, collect as collecting, late, roster as rosters
from labkit.instructor.release.edition import release_notebook
from labkit.instructor.basics.submissions import safe_name

ROSTER = """student_id,first_name,last_name,email,canvas_user_id,sis_user_id,sis_login_id,section
alice,Ada,Lovelace,ada@uni.example,101,S1,ada,A
bob,Bob,Hopper,bob@uni.example,102,S2,bob,A
carol,Carol,Chen,carol@uni.example,103,S3,carol,B
dave,Dave,Dunn,dave@uni.example,104,S4,dave,B
"""
NB = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


@pytest.fixture
def roster(tmp_path) -> Path:
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER)
    return path


@pytest.fixture(autouse=True)
def _quiet_duplicate_names(recwarn):
    """zipfile warns as the "twice" zip is built; that zip is the point."""


def make_zip(path: Path, entries, link: str | None = None, encrypted: str | None = None) -> Path:
    """entries: (name, bytes); `link` a member that is a symbolic link, `encrypted` one flagged so."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 11, 20, 12, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            if name == link:
                info.create_system = 3
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, data)
            if name == encrypted:
                z.filelist[-1].flag_bits |= 0x1
    return path


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def record(out: Path, student: str) -> dict:
    with open(out / student / "collected.csv", newline="") as f:
        return {row["file"]: row for row in csv.DictReader(f)}


# ---------------------------------------------------------------------------
# each LMS's download


def test_canvas_download_every_name_it_makes(tmp_path, roster):
    download = make_zip(tmp_path / "submissions.zip", [
        ("lovelaceada_101_9001_01_proc_service.ipynb", NB),
        ("hopperbob_LATE_102_9002_01_proc_service-1.ipynb", NB + b" "),    # late; Canvas's -1 on a name seen before
        ("hopperbob_LATE_102_9003_mine.c", b"int main(void) { return 0; }\n"),
        ("chencarol_103_9004_00_setup.ipynb", NB),
        ("chencarol_103_9010_00_setup-1.ipynb", NB + b"  "),               # uploaded again: the later attachment
        ("chencarol_103_9005_notes.txt", b"my notes"),
        ("chencarol_103_text.html", b"<p>online text</p>"),
        ("strangerx_999_9006_01_proc_service.ipynb", NB),                  # on no roster row
        ("anon_ab12c_9007_01_proc_service.ipynb", NB),                     # anonymous grading
    ])
    out = tmp_path / "submissions"
    report = collecting.collect("canvas", download, roster, out)
    assert files_under(out) == [
        ".unmatched/canvas/anon_ab12c_9007_01_proc_service.ipynb",
        ".unmatched/canvas/strangerx_999_9006_01_proc_service.ipynb",
        "alice/01_proc_service.ipynb", "alice/collected.csv",
        "bob/01_proc_service.ipynb", "bob/collected.csv", "bob/csrc/servers/mine.c",
        "carol/00_setup.ipynb", "carol/collected.csv", "carol/other/notes.txt", "carol/other/text.html",
    ]
    assert (out / "carol" / "00_setup.ipynb").read_bytes() == NB + b"  "
    assert record(out, "bob")["01_proc_service.ipynb"]["late_by_lms"] == "true"
    assert record(out, "alice")["01_proc_service.ipynb"]["late_by_lms"] == "false"
    assert record(out, "bob")["csrc/servers/mine.c"]["handed_in_as"] == "hopperbob_LATE_102_9003_mine.c"
    assert not (out / "alice" / "timestamp.txt").exists(), "Canvas's zip times are when the zip was made"
    assert report.missing == ["dave"]
    assert any("canvas_user_id 999" in line for line in report.unmatched)
    assert any("anonymous grading" in line for line in report.unmatched)
    assert any("9004" in line and "9010" in line for line in report.superseded)
    assert "students on the roster who handed in nothing: 1" in report.text()


def test_moodle_download_as_folders_flat_and_before_4_1(tmp_path, roster):
    download = make_zip(tmp_path / "moodle.zip", [
        ("Ada Lovelace_5551_assignsubmission_file/01_proc_service.ipynb", NB),
        ("Bob Hopper_5552_assignsubmission_file_01_proc_service.ipynb", NB),
        ("Carol Chen_5553_assignsubmission_file_/07_your_server.ipynb", NB),
        ("Carol Chen_5553_assignsubmission_file_/mine.c", b"/* mine */\n"),
        ("Carol Chen_5553_assignsubmission_onlinetext/onlinetext.html", b"<p>hi</p>"),
        ("Mallory Evil_5559_assignsubmission_file/01_proc_service.ipynb", NB),
    ])
    out = tmp_path / "submissions"
    report = collecting.collect("moodle", download, roster, out)
    assert files_under(out) == [
        ".unmatched/moodle/" + safe_name("Mallory Evil_5559_assignsubmission_file__01_proc_service.ipynb", 150),
        "alice/01_proc_service.ipynb", "alice/collected.csv",
        "bob/01_proc_service.ipynb", "bob/collected.csv",
        "carol/07_your_server.ipynb", "carol/collected.csv", "carol/csrc/servers/mine.c",
        "carol/other/onlinetext.html",
    ]
    assert any("no roster row is named 'Mallory Evil'" in line for line in report.unmatched)


GRADESCOPE_METADATA = """\
submission_1001:
  :submitters:
  - :name: Ada Lovelace
    :sid: 'S1'
    :email: ada@uni.example
  :created_at: 2026-11-20 10:00:00.123456000 +00:00
  :score: 0.0
submission_1002:
  :submitters:
  - :name: Carol Chen
    :sid: 'S3'
    :email: CAROL@uni.example
  - :name: Dave Dunn
    :sid: S4
    :email: someone-else@uni.example
  :created_at: 2026-11-22 02:30:00.000000000 Z
submission_1003:
  :submitters:
  - :name: Eve Outsider
    :sid: 'S9'
    :email: eve@elsewhere.example
  :created_at: 2026-11-20 09:00:00.000000000 -05:00
"""


def gradescope_zip(path: Path, metadata: str = GRADESCOPE_METADATA, alice: bytes = NB) -> Path:
    return make_zip(path, [
        ("assignment_77_export/submission_metadata.yml", metadata.encode()),
        ("assignment_77_export/submission_1001/01_proc_service.ipynb", alice),
        ("assignment_77_export/submission_1002/01_proc_service.ipynb", NB),
        ("assignment_77_export/submission_1003/01_proc_service.ipynb", NB),
    ])


def test_gradescope_export_times_groups_and_strangers(tmp_path, roster):
    out = tmp_path / "submissions"
    report = collecting.collect("gradescope", gradescope_zip(tmp_path / "gs.zip"), roster, out)
    assert files_under(out) == [
        ".unmatched/gradescope/assignment_77_export__submission_1003__01_proc_service.ipynb",
        "alice/01_proc_service.ipynb", "alice/collected.csv", "alice/timestamp.txt",
        "carol/01_proc_service.ipynb", "carol/collected.csv", "carol/timestamp.txt",
        "dave/01_proc_service.ipynb", "dave/collected.csv", "dave/timestamp.txt",   # by SID, a group's second
    ]
    assert (out / "alice" / "timestamp.txt").read_text() == "2026-11-20 10:00:00.123456 UTC"
    assert (out / "carol" / "timestamp.txt").read_text() == "2026-11-22 02:30:00.000000 UTC"
    assert record(out, "carol")["01_proc_service.ipynb"]["submitted_at"] == "2026-11-22T02:30:00+00:00"
    assert any("eve@elsewhere.example" in line for line in report.unmatched)
    assert report.missing == ["bob"]


def test_resubmission_replaces_older_file(tmp_path, roster):
    """A resubmission replaces the older file whatever order the downloads come in."""
    older = gradescope_zip(tmp_path / "older.zip", alice=b'{"old": 1}')
    newer = gradescope_zip(tmp_path / "newer.zip", GRADESCOPE_METADATA.replace("2026-11-20 10:00", "2026-11-21 10:00"),
                           alice=b'{"new": 2}')
    for order in ([older, newer], [newer, older]):
        out = tmp_path / f"out-{order[0].stem}"
        reports = [collecting.collect("gradescope", zip_, roster, out) for zip_ in order]
        assert (out / "alice" / "01_proc_service.ipynb").read_bytes() == b'{"new": 2}'
        assert (out / "alice" / "timestamp.txt").read_text() == "2026-11-21 10:00:00.123456 UTC"
        if order[0] is newer:
            assert any("older than the 01_proc_service.ipynb collected before" in s for s in reports[1].superseded)


def test_an_older_canvas_download_collected_later_replaces_nothing(tmp_path, roster):
    newer = make_zip(tmp_path / "newer.zip", [("lovelaceada_101_9100_01_proc_service.ipynb", b'{"new": 2}')])
    older = make_zip(tmp_path / "older.zip", [("lovelaceada_101_9001_01_proc_service.ipynb", b'{"old": 1}')])
    out = tmp_path / "submissions"
    collecting.collect("canvas", newer, roster, out)
    report = collecting.collect("canvas", older, roster, out)
    assert (out / "alice" / "01_proc_service.ipynb").read_bytes() == b'{"new": 2}'
    assert report.collected == [] and len(report.superseded) == 1


def test_a_folder_with_nbgraders_timestamps_and_a_link(tmp_path, roster):
    source = tmp_path / "exchange"
    (source / "alice").mkdir(parents=True)
    (source / "alice" / "01_proc_service.ipynb").write_bytes(NB)
    (source / "alice" / "timestamp.txt").write_text("2026-11-20 10:00:00.5 UTC")
    (source / "bob").mkdir()
    (source / "bob" / "01_proc_service.ipynb").symlink_to("/etc/shadow")
    out = tmp_path / "submissions"
    report = collecting.collect("folder", source, roster, out)
    assert files_under(out) == ["alice/01_proc_service.ipynb", "alice/collected.csv", "alice/timestamp.txt"]
    assert (out / "alice" / "timestamp.txt").read_text() == "2026-11-20 10:00:00.500000 UTC"
    assert report.refused == ["bob/01_proc_service.ipynb: a symbolic link, not followed"]


# ---------------------------------------------------------------------------
# hostile downloads: refused whole, with a clear message, and nothing written


def overlapping(path: Path) -> Path:
    """Two names for one compressed stream (the overlapping-files zip bomb)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("lovelaceada_101_1_01_proc_service.ipynb", b"0" * 100_000)
        z.writestr("hopperbob_102_2_01_proc_service.ipynb", b"1")
        z.filelist[1].header_offset = z.filelist[0].header_offset
    return path


HOSTILE = [
    ("zip_slip", lambda p: make_zip(p, [("../../evil.ipynb", NB)]), "'..' in its path"),
    ("absolute", lambda p: make_zip(p, [("/tmp/evil.ipynb", NB)]), "is an absolute path"),
    ("backslash", lambda p: make_zip(p, [("..\\..\\evil.ipynb", NB)]), "backslash"),
    ("symlink", lambda p: make_zip(p, [("lovelaceada_101_1_01_proc_service.ipynb", b"/etc/shadow")],
                                   link="lovelaceada_101_1_01_proc_service.ipynb"), "is a symbolic link"),
    ("twice", lambda p: make_zip(p, [("a_101_1_x.ipynb", NB), ("a_101_1_x.ipynb", NB)]), "appears twice"),
    ("encrypted", lambda p: make_zip(p, [("a_101_1_x.ipynb", NB)], encrypted="a_101_1_x.ipynb"), "is encrypted"),
    ("overlap", overlapping, "one compressed stream under two names"),
    ("not_a_zip", lambda p: p.write_bytes(b"PK\x03\x04 this is not a zip") and p, "is not a zip file"),
]


@pytest.mark.parametrize("name,build,said", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_zip_is_refused_whole_and_collects_nothing(tmp_path, roster, name, build, said):
    out = tmp_path / "deep" / "submissions"
    out.mkdir(parents=True)
    (out / "alice").mkdir()
    (out / "alice" / "kept.ipynb").write_bytes(NB)
    before = files_under(tmp_path)
    download = build(tmp_path / "deep" / "download.zip")
    with pytest.raises(LabError) as error:
        collecting.collect("canvas", download, roster, out)
    assert said in error.value.what, error.value.what
    assert "nothing collected" in error.value.what or name == "not_a_zip"
    assert files_under(tmp_path) == sorted(before + [str(download.relative_to(tmp_path))])
    assert not Path("/tmp/evil.ipynb").exists()


def test_a_bomb_member_is_refused_alone_whatever_its_header_says(tmp_path, roster, monkeypatch):
    monkeypatch.setattr(archive, "MAX_FILE_BYTES", 1 << 20)
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("lovelaceada_101_1_01_proc_service.ipynb", b"\0" * (8 << 20))      # 8 MiB of zeros, ~8 KiB
        z.writestr("hopperbob_102_2_01_proc_service.ipynb", b"\0" * (8 << 20))
        z.writestr("chencarol_103_3_01_proc_service.ipynb", NB)
        z.filelist[1].file_size = 100                                                 # this header lies
    assert path.stat().st_size < 64 << 10
    out = tmp_path / "submissions"
    report = collecting.collect("canvas", path, roster, out)
    assert files_under(out) == ["carol/01_proc_service.ipynb", "carol/collected.csv"]
    assert report.refused == [
        "lovelaceada_101_1_01_proc_service.ipynb: it inflates to more than 1 MiB (its header said 8,388,608 "
        "bytes): not collected",
        "hopperbob_102_2_01_proc_service.ipynb: it cannot be unpacked (Bad CRC-32 for file "
        "'hopperbob_102_2_01_proc_service.ipynb'): not collected"]


def test_oversized_download_is_refused(tmp_path, roster, monkeypatch):
    """A download declaring more than a class takes is refused before reading."""
    monkeypatch.setattr(archive, "MAX_TOTAL_BYTES", 3 << 20)
    path = make_zip(tmp_path / "big.zip", [(f"a_101_{i}_x{i}.ipynb", b"\0" * (1 << 20)) for i in range(4)])
    with pytest.raises(LabError, match="unpack to 0.0 GiB, more than"):
        collecting.collect("canvas", path, roster, tmp_path / "out")
    assert not (tmp_path / "out").exists() or files_under(tmp_path / "out") == []


def test_odd_names_become_safe_file_names(tmp_path, roster):
    download = make_zip(tmp_path / "odd.zip", [
        ("lovelaceada_101_1_Ünïcödé notes (final).txt", b"x"),
        ("lovelaceada_101_2_" + "n" * 300 + ".txt", b"y"),
        ("lovelaceada_101_3_.hidden", b"z"),
    ])
    out = tmp_path / "submissions"
    collecting.collect("canvas", download, roster, out)
    names = [p.name for p in (out / "alice" / "other").iterdir()]
    assert len(names) == 3 and all(len(n) < 200 and not n.startswith(".") and "/" not in n for n in names)


# ---------------------------------------------------------------------------
# rosters

BAD_ROSTERS = [
    ("no_id_column", "name,email\nAda,ada@x\n", "has no student_id column"),
    ("empty_id", "student_id,email\n,ada@x\n", "line 2: no student_id"),
    ("id_not_a_folder", "student_id\n../alice\n", "is not a folder name"),
    ("same_id_twice", "student_id\nalice\nalice\n", "student_id 'alice' is on line 2 too"),
    ("same_email_twice", "student_id,email\nalice,a@x\nbob,A@X\n", "email 'A@X' is on line 2 too"),
    ("empty", "", "is empty"),
]


@pytest.mark.parametrize("name,text,said", BAD_ROSTERS, ids=[b[0] for b in BAD_ROSTERS])
def test_a_bad_roster_is_refused_naming_the_line(tmp_path, name, text, said):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(LabError, match=said.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        rosters.read(path)


def test_roster_without_lms_ids_is_refused(tmp_path):
    """A roster without the lms ids is refused before the download is read."""
    path = tmp_path / "roster.csv"
    path.write_text("student_id,email\nalice,ada@uni.example\n")
    download = make_zip(tmp_path / "canvas.zip", [("lovelaceada_101_1_01_proc_service.ipynb", NB)])
    with pytest.raises(LabError, match="has no canvas_user_id for any student"):
        collecting.collect("canvas", download, path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------
# late penalties, by the rule

PENALTIES = [  # rule, score, max, seconds late (None: no time), late by the LMS, points lost
    ("none", 8, 10, 3 * 86400, True, 0.0),
    ("zero", 8, 10, 1, False, 8.0),
    ("zero", 8, 10, 0, False, 0.0),
    ("zero", 8, 10, None, True, 8.0),
    ("10%/day", 8, 10, 1, False, 1.0),
    ("10%/day", 8, 10, 86400, False, 1.0),
    ("10%/day", 8, 10, 86401, False, 2.0),
    ("1/hour", 8, 10, 3 * 3600 + 5, False, 4.0),
    ("25%/day", 3, 10, 5 * 86400, False, 3.0),                 # never more than it earned
    ("10%/day", 8, 10, None, True, None),                      # a rate needs the time
    ("10%/day", 8, 10, None, False, 0.0),
]


@pytest.mark.parametrize("text,score,most,late_s,by_lms,lost", PENALTIES)
def test_penalties(text, score, most, late_s, by_lms, lost):
    assert late.rule(text).penalty(score, most, late_s, by_lms) == lost


@pytest.mark.parametrize("text", ["10", "10%", "ten%/day", "10%/week", "-1/day"])
def test_a_rule_the_lab_does_not_know_is_refused(text):
    with pytest.raises(LabError, match="not a rule the lab knows"):
        late.rule(text)


def test_due_dates_one_for_all_and_one_per_notebook():
    dates = late.due_dates(["2026-12-01T23:59+01:00", "01_proc_service=2026-11-01T23:59Z"], ["00_setup",
                                                                                           "01_proc_service"])
    assert dates["00_setup"] == datetime(2026, 12, 1, 22, 59, tzinfo=timezone.utc)
    assert dates["01_proc_service"] == datetime(2026, 11, 1, 23, 59, tzinfo=timezone.utc)
    with pytest.raises(LabError, match="02_multiplexing is not a graded notebook"):
        late.due_dates(["02_multiplexing=2026-12-01"], ["00_setup"])


# ---------------------------------------------------------------------------
# the round trip: collect from Canvas and Gradescope, grade, export, hand back

GRADED = "00_setup"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="grading in sandboxes needs root")


def student_notebooks() -> tuple[bytes, bytes]:
    """The released notebook as handed out, and one with the instructor's answers in it."""
    instructor = nbformat.read(paths.NOTEBOOKS / f"{GRADED}.ipynb", as_version=4)
    released, _ = release_notebook(copy.deepcopy(instructor), GRADED)
    solved = copy.deepcopy(released)
    solutions = {c.id: c.source for c in instructor.cells if "BEGIN SOLUTION" in c.source}
    for cell in solved.cells:
        cell.source = solutions.get(cell.id, cell.source)
    return nbformat.writes(released).encode(), nbformat.writes(solved).encode()


def labkit(*args) -> str:
    result = subprocess.run([sys.executable, "-m", "labkit", *map(str, args)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def read_csv(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text())))


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    """A term's round trip: alice on time and bob late (Canvas's LATE) from Canvas, carol from
    Gradescope 26 hours after the due date, dave nothing; graded; alice's answer marked."""
    root = tmp_path_factory.mktemp("term")
    (root / "roster.csv").write_text(ROSTER)
    untouched, solved = student_notebooks()
    make_zip(root / "canvas.zip", [(f"lovelaceada_101_9001_{GRADED}.ipynb", solved),
                                   (f"hopperbob_LATE_102_9002_{GRADED}.ipynb", untouched),
                                   (f"strangerx_999_9003_{GRADED}.ipynb", untouched)])
    make_zip(root / "gradescope.zip", [
        ("assignment_5_export/submission_metadata.yml", b"submission_1:\n  :submitters:\n  - :name: Carol Chen\n"
         b"    :email: carol@uni.example\n  :created_at: 2026-12-03 01:00:00.000000000 Z\n"),
        (f"assignment_5_export/submission_1/{GRADED}.ipynb", solved)])
    collected = labkit("collect", "--from", "canvas", root / "canvas.zip", "--roster", root / "roster.csv",
                       "--out", root / "submissions")
    labkit("collect", "--from", "gradescope", root / "gradescope.zip", "--roster", root / "roster.csv",
           "--out", root / "submissions")
    labkit("grade", root / "submissions", "--out", root / "grades", "--jobs", "2", "--notebooks", GRADED,
           "--timeout", "240")
    with open(root / "grades" / "answers.csv", newline="") as f:
        answers = list(csv.DictReader(f))
    for row in answers:
        row["points"] = "1" if row["student"] == "alice" else ""
        row["comment"] = "well argued" if row["student"] == "alice" else ""
    with open(root / "marked.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(answers[0]))
        writer.writeheader()
        writer.writerows(answers)
    return {"root": root, "collected": collected}


DUE = ["--due", f"{GRADED}=2026-12-01T23:00Z"]


@pytest.mark.slow
@ROOT_ONLY
@pytest.mark.timeout(900)
def test_the_term_exports_each_lms_format_exactly(term):
    root, grades = term["root"], term["root"] / "grades"
    assert "files whose owner is on no roster row" in term["collected"]
    book = read_csv(grades / "gradebook.csv")
    points = {}
    for student, _, check, got, *_ in book[1:]:
        points.setdefault(student, {})[check] = float(got)
    # what the checks gave, before any mark: the answers wait for a person
    assert points["alice"] == {"counted_events": 2.0, "perf_event_paranoid": 1.0,
                               "counted_events_no_hardware_invented": 1.0, "answer_pinning": 0.0}
    assert points["carol"] == points["alice"]
    assert sum(points["bob"].values()) == 0.0

    labkit("gradebook", grades, "--format", "wide", "--roster", root / "roster.csv", *DUE,
           "--late-penalty", "10%/day", "--manual", root / "marked.csv")
    assert read_csv(grades / "gradebook_wide.csv") == [
        ["student_id", "last_name", "first_name", "email", "section", GRADED, "total", "max_total",
         f"{GRADED} late_penalty"],
        ["alice", "Lovelace", "Ada", "ada@uni.example", "A", "5", "5", "5", "0"],
        ["bob", "Hopper", "Bob", "bob@uni.example", "A", "0", "0", "5", "?"],      # late by Canvas, no time
        ["carol", "Chen", "Carol", "carol@uni.example", "B", "3", "3", "5", "1"],  # 26 h: 2 started days, 10% each
        ["dave", "Dunn", "Dave", "dave@uni.example", "B", "", "", "5", ""],
    ]
    labkit("gradebook", grades, "--format", "canvas", "--roster", root / "roster.csv")
    assert read_csv(grades / "gradebook_canvas.csv") == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", GRADED],
        ["    Points Possible", "", "", "", "", "5"],
        ["Lovelace, Ada", "101", "S1", "ada", "A", "5"],
        ["Hopper, Bob", "102", "S2", "bob", "A", "0"],
        ["Chen, Carol", "103", "S3", "carol", "B", "4"],
        ["Dunn, Dave", "104", "S4", "dave", "B", ""],
    ]
    labkit("gradebook", grades, "--format", "moodle", "--roster", root / "roster.csv", "-o", root / "moodle.csv")
    assert read_csv(root / "moodle.csv") == [
        ["First name", "Last name", "ID number", "Email address", GRADED],
        ["Ada", "Lovelace", "S1", "ada@uni.example", "5"],
        ["Bob", "Hopper", "S2", "bob@uni.example", "0"],
        ["Carol", "Chen", "S3", "carol@uni.example", "4"],
        ["Dave", "Dunn", "S4", "dave@uni.example", ""],
    ]
    said = labkit("gradebook", grades, "--format", "nbgrader", "--roster", root / "roster.csv", *DUE,
                  "--late-penalty", "zero")
    assert read_csv(grades / "gradebook_nbgrader.csv") == [
        ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
         "late_submission_penalty", "score", "max_score"],
        [GRADED, "2026-12-01 23:00:00", "", "alice", "Lovelace", "Ada", "ada@uni.example", "5.0", "0.0", "5.0",
         "5.0"],
        [GRADED, "2026-12-01 23:00:00", "", "bob", "Hopper", "Bob", "bob@uni.example", "0.0", "0.0", "0.0", "5.0"],
        [GRADED, "2026-12-01 23:00:00", "2026-12-03 01:00:00", "carol", "Chen", "Carol", "carol@uni.example",
         "4.0", "4.0", "0.0", "5.0"],
        [GRADED, "2026-12-01 23:00:00", "", "dave", "Dunn", "Dave", "dave@uni.example", "0.0", "0.0", "0.0",
         "5.0"],
    ]
    assert f"late: carol/{GRADED}: 26.0 h late, zero: -4 points" in said
    assert "on the roster, not graded (empty cells): dave" in said
    # the mark is in the instructor's gradebook and alice's feedback page too
    assert "marked by hand: 1/1 -- well argued" in (grades / "feedback" / "alice.html").read_text()


@pytest.mark.slow
@ROOT_ONLY
@pytest.mark.timeout(900)
def test_the_term_hands_feedback_back_per_student_and_for_canvas(term):
    grades = term["root"] / "grades"
    said = labkit("feedback", grades, "--zip", "--lms", "canvas")
    for student in ("alice", "bob", "carol"):
        with zipfile.ZipFile(grades / "upload" / f"{student}.zip") as z:
            assert sorted(z.namelist()) == ["executed/00_setup.ipynb", "feedback.html"]
            assert f"Feedback for {student}" in z.read("feedback.html").decode()
    with zipfile.ZipFile(grades / "upload" / "canvas_feedback.zip") as z:
        assert sorted(z.namelist()) == [
            "hopperbob_LATE_102_9002_00_setup_executed.ipynb", "hopperbob_LATE_102_9002_feedback.html",
            "lovelaceada_101_9001_00_setup_executed.ipynb", "lovelaceada_101_9001_feedback.html"]
        assert "Feedback for bob" in z.read("hopperbob_LATE_102_9002_feedback.html").decode()
        # Canvas takes the user and attachment from the first two all-digit parts of each name
        for name in z.namelist():
            assert [p for p in name.split("_") if p.isdigit()][:2] in (["101", "9001"], ["102", "9002"])
    assert f"not collected from canvas (only in their own zip): carol/{GRADED}" in said


CLI_MISTAKES = [  # the command line, what the message says
    (["collect", "--from", "canvas", "{root}/no.zip", "--roster", "{root}/roster.csv", "--out", "{root}/s"],
     "is not a zip file that can be read"),
    (["collect", "--from", "canvas", "{root}/c.zip", "--roster", "{root}/none.csv", "--out", "{root}/s"],
     "the roster {root}/none.csv is not a file"),
    (["gradebook", "{root}", "--format", "wide", "--roster", "{root}/roster.csv"], "gradebook.csv is not there"),
    (["feedback", "{root}", "--zip"], "has no feedback pages"),
]


@pytest.mark.parametrize("argv,said", CLI_MISTAKES, ids=["no_zip", "no_roster", "not_graded", "no_pages"])
def test_a_mistake_on_the_command_line_gets_a_message_and_exit_2(tmp_path, roster, argv, said):
    make_zip(tmp_path / "c.zip", [("lovelaceada_101_1_00_setup.ipynb", NB)])
    argv = [a.format(root=tmp_path) for a in argv]
    result = subprocess.run([sys.executable, "-m", "labkit", *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and said.format(root=tmp_path) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "s").exists()

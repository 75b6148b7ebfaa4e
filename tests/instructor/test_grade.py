"""Batch grading: the hidden checks go back in, every instructor check gets a
row, and each notebook runs isolated -- a hang, a kernel crash, a fork bomb,
a full disk or a squatted port is recorded and the batch goes on, leaving no
process behind.

The synthetic class is built at test time from `labkit release` output (no
notebook copies are committed): students are edited copies of the released
notebook 01, the one with the C exercises."""

import copy
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pandas as pd
import psutil
import pytest

from labkit import paths
from labkit.instructor.grading import grader
from labkit.instructor.course import class_grades
from labkit.instructor.basics import exports
from labkit.instructor.release import edition as release
from labkit.instructor.sandbox import outside as sandbox
from labkit.instructor.grading.check_cells import CheckSpec, check_catalog, graded_copy
from labkit.instructor.sandbox.uids import FIRST_GRADING_UID, UidLease
from labkit.bench import free_port
from waits import port_is_free

NOTEBOOK = "01_proc_service"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="per-run uids need root (non-root isolation is weaker)")


# ---------------------------------------------------------------------------
# the synthetic class


@pytest.fixture(scope="module")
def instructor():
    return nbformat.read(paths.NOTEBOOKS / f"{NOTEBOOK}.ipynb", as_version=4)


@pytest.fixture(scope="module")
def released(tmp_path_factory, instructor):
    """The released notebook, written by `labkit release`."""
    out = tmp_path_factory.mktemp("release")
    subprocess.run([sys.executable, "-m", "labkit", "release", "--out", str(out)], check=True,
                   capture_output=True, timeout=120)
    nb = nbformat.read(out / "notebooks" / f"{NOTEBOOK}.ipynb", as_version=4)
    assert len(nb.cells) < len(instructor.cells), "the release should have dropped the hidden checks"
    return nb


def solved(released_nb, instructor_nb):
    """The released notebook with the instructor's solutions put in place."""
    nb = copy.deepcopy(released_nb)
    solutions = {c.id: c.source for c in instructor_nb.cells if "BEGIN SOLUTION" in c.source}
    for cell in nb.cells:
        if cell.id in solutions:
            cell.source = solutions[cell.id]
    return nb


def cell_with(nb, text):
    return next(cell for cell in nb.cells if text in cell.source)


def insert_after(nb, text, source):
    at = nb.cells.index(cell_with(nb, text)) + 1
    nb.cells.insert(at, nbformat.v4.new_code_cell(source))
    return nb


FORK_BOMB = """import os
while True:          # forks without end; a failed fork is retried
    try:
        os.fork()
    except OSError:
        pass
"""


def squatter(port: int) -> str:
    """A cell that leaves a process in its own session holding `port`, then goes on."""
    return f"""import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", '''
import os, socket, time
if os.fork():
    os._exit(0)          # the parent exits: the squatter is nobody's child
os.setsid()              # and in no process group or session of the notebook's
s = socket.socket(); s.bind(("127.0.0.1", {port})); s.listen()
time.sleep(3600)
'''])
time.sleep(1)
"""


def write_student(root: Path, student: str, nb) -> None:
    folder = root / student
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{NOTEBOOK}.ipynb")


def rows_of(book: pd.DataFrame, student: str) -> dict[str, tuple[str, float, str]]:
    mine = book[book["student"] == student]
    return {r.check: (r.status, r.points, str(r.message)) for r in mine.itertuples()}


def processes_of_grading_uids() -> list[psutil.Process]:
    """Live processes of grading uids no grader holds (other tests of the parallel phase grade
    beside this one, under uids of their own).  A uid is free only if its lease file is
    locked by us and is still the file at its path (UidLease.lock_if_free): a grader that
    just released it unlinked the file, and one that leased it again since made a new one."""
    # the uids a lease hands out, and no other: nobody (65534) runs test_netlink's links as a user
    uids = {p.info["uids"].real for p in psutil.process_iter(["uids"])
            if p.info["uids"] and FIRST_GRADING_UID <= p.info["uids"].real < FIRST_GRADING_UID + UidLease.SPAN}
    left = []
    for uid in uids:
        lock = UidLease.lock_if_free(uid)
        if lock is None:
            continue  # leased by a grader that is running now
        with lock:
            left += [p for p in psutil.process_iter(["uids", "status"])
                     if p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE]
            os.unlink(lock.name)  # while locked, as a lease does: nothing left in /tmp
    return left


@pytest.mark.skipif(os.geteuid() != 0, reason="grading uids are leased by root only")
def test_a_lease_leaves_no_lock_file_and_two_leases_never_share_a_uid():
    first, second = UidLease(2), UidLease(2)
    try:
        assert not set(first.uids) & set(second.uids)
        files = [UidLease.LOCKS / f"labkit-grade-uid-{uid}.lock" for uid in first.uids + second.uids]
        assert all(path.exists() for path in files)
    finally:
        first.close()
        second.close()
    assert not any(path.exists() for path in files)
    third = UidLease(1)  # the removed files are made again
    try:
        assert third.uids[0] == min(first.uids + second.uids)
    finally:
        third.close()


# ---------------------------------------------------------------------------
# fast: catalog, hidden checks back in place, rows


def test_catalog_lists_every_check_with_points(instructor):
    catalog = {spec.name: spec for spec in check_catalog(instructor)}
    assert {n for n, s in catalog.items() if s.hidden} == set(release.hidden_check_names(instructor))
    assert catalog["procstat_parse_tricky_names"] == CheckSpec("procstat_parse_tricky_names", 3, False)
    assert catalog["ev_poll_dispatch_many_clients"].hidden
    assert catalog["answer_q1"].max_points == 1  # ex.answer(...) is a check too
    assert {"procstat_parse_edge_cases", "ev_poll_dispatch_echo", "iterative_ratio"} <= set(catalog)


def test_graded_copy_restores_checks(released, instructor):
    """The graded copy restores checks by what they check and never holds a hidden one."""
    student = copy.deepcopy(released)
    visible = cell_with(student, '@ex.check("procstat_parse_tricky_names"')
    visible.source = '@ex.check("procstat_parse_tricky_names", points=3)\ndef _():\n    pass  # always passes'
    visible.id = "re-identified"                     # edited and given another id
    poll_check = cell_with(student, '@ex.check("ev_poll_dispatch_echo"')
    student.cells.remove(poll_check)                 # deleted
    moved = cell_with(student, '@ex.check("iterative_ratio"')
    student.cells.remove(moved)
    student.cells.append(moved)                      # moved to the end (left as it is)
    fake = nbformat.v4.new_code_cell('@ex.check("ev_poll_dispatch_many_clients", points=1, hidden=True)\n'
                                     'def _():\n    pass', metadata={"tags": ["hidden-check"]})
    student.cells.append(fake)

    prepared = graded_copy(student, instructor)
    graded = prepared.notebook
    sources = "".join(c.source for c in graded.cells)
    for cell in instructor.cells:
        if release.HIDDEN_TAG in cell.metadata.get("tags", []):
            assert cell.source not in sources, "a hidden check must never be in the student's run"
    assert fake.id not in [c.id for c in graded.cells], "a hidden-check cell the student wrote must be dropped"
    restored = next(c for c in graded.cells if c.id == "re-identified")
    assert "check_procstat_parse" in restored.source, "an edited check cell must be the instructor's again"
    assert sum('@ex.check("ev_poll_dispatch_echo"' in c.source for c in graded.cells) == 1, "deleted: put back"
    assert any("was missing" in note for note in prepared.notes)
    assert any("was changed" in note for note in prepared.notes)
    exports = [c for c in graded.cells if "labkit-export" in c.metadata.get("tags", [])]
    exported = {name for c in exports for name in check_catalog(instructor) if f"'{name.name}'" in c.source}
    assert {spec.name for spec in exported} == {spec.name for spec in check_catalog(instructor)}
    at = [c.id for c in graded.cells].index("re-identified")
    assert "procstat_parse_tricky_names" in graded.cells[at + 1].source  # its values, right after it
    assert "procstat_parse_edge_cases" in graded.cells[at + 2].source   # and the hidden check's, after that
    assert "BEGIN SOLUTION" not in sources, "restoring must not add solutions"


def test_rows_take_points_from_the_catalog_and_say_why_a_check_never_ran(tmp_path):
    catalog = [CheckSpec("a", 2, False), CheckSpec("b", 1, True), CheckSpec("c", 3, False)]
    records = {"a": {"check": "a", "status": "passed", "points": 99, "message": ""},   # points from the catalog
               "b": {"check": "b", "status": "error", "points": 0, "message": "ValueError: x"},
               "zz": {"check": "zz", "status": "passed", "points": 50, "message": ""}}  # not a check: ignored
    run = sandbox.RunResult("timeout", "the notebook ran over the 5 s time limit", 5.0, None, b"",
                            tmp_path / "log")
    rows = grader.rows_for(grader.Task("s", "nb", tmp_path), catalog, run, records)
    assert [(r["check"], r["status"], r["points"], r["max_points"]) for r in rows] == [
        ("a", "passed", 2, 2), ("b", "error", 0, 1), ("c", "timeout", 0, 3)]
    assert "5 s time limit" in rows[2]["message"]


def test_a_missing_notebook_gives_every_check_an_error_row(tmp_path):
    (tmp_path / "class" / "nobody").mkdir(parents=True)
    book, text = class_grades.grade(tmp_path / "class", tmp_path / "out", notebooks=[NOTEBOOK], progress=False)
    assert set(book["status"]) == {"error"} and set(book["message"]) == {"notebook not submitted"}
    assert len(book) == len(check_catalog(nbformat.read(paths.NOTEBOOKS / f"{NOTEBOOK}.ipynb", 4)))
    page = (tmp_path / "out" / "feedback" / "nobody.html").read_text()
    assert "nobody" in page
    # a page a screen reader reads: its language set, each table captioned, its headers column headers
    assert page.startswith("<!doctype html><html lang='en'>")
    assert "<caption>01_proc_service: each check</caption>" in page
    assert page.count("<th scope='col'>") == 4 and "<th>" not in page
    assert "statuses: error" in text


def test_grading_refuses_a_notebook_without_checks(tmp_path):
    (tmp_path / "class" / "someone").mkdir(parents=True)
    (tmp_path / "instructor").mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]),
                   tmp_path / "instructor" / "99_no_exercises.ipynb")
    with pytest.raises(class_grades.LabError, match="no checks to grade in 99_no_exercises"):
        class_grades.grade(tmp_path / "class", tmp_path / "out", notebooks=["99_no_exercises"],
                    instructor_dir=tmp_path / "instructor", progress=False)


# ---------------------------------------------------------------------------
# the sandbox on tiny notebooks: a kernel crash, a full disk, a file too large


def tiny_notebook(cell: str):
    record = ('from labkit.instructor.basics import exports\n'
              'def record(name):\n'
              '    exports.save([name], {}, [])\n'
              'record("before")')
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "labkit", "display_name": "labkit",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell('profile = "full"', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(record), nbformat.v4.new_code_cell(cell),
                nbformat.v4.new_code_cell('record("after")')]
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("cell, outcome, after_ran", [
    ("import os; os._exit(3)", "kernel_died", False),
    # Four files of 40 MiB, each under the file-size limit, together over the workdir's.
    ("for i in range(4):\n    open(f'f{i}', 'wb').write(b'x' * (40 << 20))\nimport time; time.sleep(30)",
     "disk_full", False),
    ("open('big', 'wb').write(b'x' * (80 << 20))", "completed", True),  # over RLIMIT_FSIZE: OSError
    # The same four, deleted once opened and held open: no walk of the disk finds them.
    ("import os\nheld = []\nfor i in range(4):\n    held.append(open(f'f{i}', 'wb')); os.unlink(f'f{i}')\n"
     "    held[-1].write(b'x' * (40 << 20)); held[-1].flush()\nimport time; time.sleep(30)", "disk_full", False),
])
def test_sandbox_records_a_crash_a_full_disk_and_a_file_too_large(tmp_path, cell, outcome, after_ran):
    lease = UidLease(1) if sandbox.running_as_root() else None
    uid = lease.uids[0] if lease else None
    limits = sandbox.Limits(timeout_s=60, file_bytes=64 << 20, disk_bytes=120 << 20)
    workdir = sandbox.make_base() / "work"  # reachable by the grading uid, unlike tmp_path
    try:
        path = sandbox.prepare_workdir(workdir, tiny_notebook(cell), "tiny", uid=uid)
        run = sandbox.run_notebook(path, workdir, profile=None, limits=limits, uid=uid)
        ran = set(exports.read(run.exports.decode()))
    finally:
        shutil.rmtree(workdir.parent)
        if lease:
            lease.close()
    assert run.outcome == outcome, run.message
    assert ("after" in ran) == after_ran and "before" in ran
    if outcome == "completed":
        assert any("File too large" in e for e in run.cell_errors), run.cell_errors
    assert run.elapsed_s < 60


# ---------------------------------------------------------------------------
# the synthetic class, graded with two jobs


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory, released, instructor):
    root = tmp_path_factory.mktemp("grading")
    submissions = root / "class"
    port = free_port()
    correct = solved(released, instructor)
    broken_c = solved(released, instructor)
    cell = cell_with(broken_c, "my_procstat_parse = r")
    cell.source = cell.source.replace("/* BEGIN SOLUTION */", "/* BEGIN SOLUTION */\n    int broken = ;", 1)
    # The correct student also leaves a port squatter behind (a process that outlives its cell
    # in a session of its own): every check still passes, and the squatter is killed afterwards.
    write_student(submissions, "correct", insert_after(correct, "checks.Checker(", squatter(port)))
    write_student(submissions, "compile_error", broken_c)
    write_student(submissions, "fork_bomb", insert_after(solved(released, instructor), "checks.Checker(",
                                                         FORK_BOMB))
    # The endless loop's class of one, graded beside this class: it waits out its limit asleep,
    # and one after the other the two take about 147 s of the parallel phase, side by side 81.
    endless = subprocess.Popen(grade_command(endless_loop_class(root / "endless", released, instructor),
                                            root / "endless" / "out", "--timeout", str(ENDLESS_LIMIT_S)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    result = subprocess.run(grade_command(submissions, root / "out", "--jobs", "2", "--timeout", "240"),
                            capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    _, endless_err = endless.communicate(timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert endless.returncode == 0, endless_err[-3000:]
    book = pd.read_csv(root / "out" / "gradebook.csv", keep_default_na=False)
    return {"book": book, "out": root / "out", "wall": wall, "port": port, "stdout": result.stdout,
            "stderr": result.stderr, "submissions": submissions,
            "endless": pd.read_csv(root / "endless" / "out" / "gradebook.csv", keep_default_na=False)}


def grade_command(submissions: Path, out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "labkit", "grade", str(submissions), "--out", str(out), "--notebooks", NOTEBOOK,
            *options]


# The limit must leave the cells before the loop time to end: 20 s is too little on 2 cores
# beside the parallel phase and a nice-19 spinner on each.
ENDLESS_LIMIT_S = 60


def endless_loop_class(folder: Path, released, instructor) -> Path:
    """A class of one whose notebook, solved, loops for ever (asleep) before its second C
    exercise, after the first one's checks have run: the folder of submissions."""
    looping = solved(released, instructor)
    cell = cell_with(looping, "my_ev_poll = r")
    # a loop that never ends, asleep: the time limit is wall-clock time, and a spinning one
    # would only take a core from the tests running beside it for the whole limit
    cell.source = "import time\nwhile True:  # the student's endless loop\n    time.sleep(0.1)\n" + cell.source
    write_student(folder / "class", "endless_loop", looping)
    return folder / "class"


PROCSTAT = ("procstat_parse_tricky_names", "procstat_parse_live_process", "procstat_parse_edge_cases")


def points_of(instructor, names=None) -> float:
    return sum(s.max_points for s in check_catalog(instructor) if names is None or s.name in names)


@pytest.mark.slow
@ROOT_ONLY
@pytest.mark.timeout(900)
def test_the_class_gets_the_expected_statuses_and_points(graded_class, instructor):
    book = graded_class["book"]
    total = points_of(instructor)
    assert list(book.columns[:6]) == ["student", "notebook", "check", "points", "max_points", "status"]
    # (the untouched release is test_grade_attacks.py's, graded there beside the attackers)
    assert sorted(book["student"].unique()) == ["compile_error", "correct", "fork_bomb"]
    assert (book.groupby("student")["max_points"].sum() == total).all(), "every student has the same total"

    answers = {s.name for s in check_catalog(instructor) if s.by_hand}
    assert answers, "the notebook has written answers"
    correct = rows_of(book, "correct")
    assert {status for check, (status, _, _) in correct.items() if check not in answers} == {"passed"}, correct
    # a written answer earns nothing by itself: it waits for the instructor's mark
    assert {correct[check][0] for check in answers} == {"by hand"}
    assert sum(points for _, points, _ in correct.values()) == total - points_of(instructor, answers)

    broken = rows_of(book, "compile_error")
    for check in PROCSTAT:
        status, points, message = broken[check]
        assert status == "error" and points == 0 and "does not compile" in message, broken[check]
    assert broken["ev_poll_dispatch_echo"][0] == "passed" and broken["answer_q1"][0] == "by hand"
    # its sweep ran the top service, whose parser is exercise 1.1: a run's programs are built from
    # the edition's stub with only what passes adopted (lab_copy), so, as on the student's own
    # machine, nothing was measured and the ratio cannot be computed
    assert broken["iterative_ratio"][0] == "failed" and "measure the iterative model" in broken["iterative_ratio"][2]
    assert sum(points for _, points, _ in broken.values()) == total - points_of(
        instructor, PROCSTAT + ("iterative_ratio",) + tuple(answers))

    bomb = rows_of(book, "fork_bomb")
    assert {status for status, _, _ in bomb.values()} == {"error"}, bomb
    assert all("fork bomb" in message for _, _, message in bomb.values()), bomb

    # The correct student's squatter outlived its cell, yet the checks ran (all passed, above)
    # and it was killed afterwards.
    assert "process(es) left running were killed" in graded_class["stderr"]


@pytest.mark.slow
@ROOT_ONLY
def test_grading_leaves_no_process_and_frees_the_squatted_port(graded_class):
    assert processes_of_grading_uids() == []
    assert port_is_free(graded_class["port"])
    assert graded_class["wall"] < 420, f"grading 4 notebooks with 2 jobs took {graded_class['wall']:.0f} s"


@pytest.mark.slow
@ROOT_ONLY
def test_feedback_executed_notebooks_and_summary(graded_class, instructor):
    out = graded_class["out"]
    for student in graded_class["book"]["student"].unique():
        page = (out / "feedback" / f"{student}.html").read_text()
        assert "Total: " in page and "procstat_parse_tricky_names" in page
    total = points_of(instructor)
    unmarked = total - points_of(instructor, {s.name for s in check_catalog(instructor) if s.by_hand})
    assert f"Total: {unmarked:g} / {total:g} points" in (out / "feedback" / "correct.html").read_text()
    assert "does not compile" in (out / "feedback" / "compile_error.html").read_text()
    executed = nbformat.read(out / "executed" / "correct" / f"{NOTEBOOK}.ipynb", as_version=4)
    hidden = [c.source for c in instructor.cells if release.HIDDEN_TAG in c.metadata.get("tags", [])]
    assert not any(c.source in hidden for c in executed.cells), \
        "the hidden checks run in the checks process, never in the student's notebook"
    assert any("labkit-export" in c.metadata.get("tags", []) for c in executed.cells)
    assert "per student:" in graded_class["stdout"] and "with 2 job(s)" in graded_class["stdout"]


@pytest.mark.slow
@ROOT_ONLY
def test_an_endless_loop_times_out_and_keeps_the_checks_before_it(graded_class, instructor):
    book = graded_class["endless"]
    rows = rows_of(book, "endless_loop")
    before = PROCSTAT
    assert all(rows[c][0] == "passed" for c in before), rows
    after = [c for c in rows if c not in before]
    assert all(rows[c][0] == "timeout" and f"{ENDLESS_LIMIT_S} s time limit" in rows[c][2] for c in after), rows
    assert book["points"].sum() == points_of(instructor, PROCSTAT)
    assert processes_of_grading_uids() == []


@pytest.mark.parametrize("name", ["02_multiplexing", "03_uploads", "04_write_strategies", "05_different_hosts",
                                  "06_what_breaks_first", "07_your_server"])
def test_graded_copies_export_check_values(name, tmp_path):
    """Grading other notebooks than 01: each check's values are exported for the checks
    process, and no hidden check or solution is in the student's run."""
    teacher = nbformat.read(paths.NOTEBOOKS / f"{name}.ipynb", as_version=4)
    student, _ = release.release_notebook(copy.deepcopy(teacher), name)
    prepared = graded_copy(student, teacher)
    catalog = check_catalog(teacher)
    assert catalog and any(spec.hidden for spec in catalog)
    exports_cells = [c for c in prepared.notebook.cells if "labkit-export" in c.metadata.get("tags", [])]
    exported = {spec.name for spec in catalog for c in exports_cells if f"'{spec.name}'" in c.source}
    assert exported == {spec.name for spec in catalog}
    sources = "".join(c.source for c in prepared.notebook.cells)
    assert "BEGIN SOLUTION" not in sources
    for cell in teacher.cells:
        if release.HIDDEN_TAG in cell.metadata.get("tags", []):
            assert cell.source not in sources


@pytest.mark.slow
@ROOT_ONLY
@pytest.mark.timeout(300)
def test_written_answers_round_trip(graded_class, instructor, tmp_path):
    """answers.csv out (points empty), marked by the instructor, back with --manual: the marks
    are in the gradebook and the feedback page; nothing is graded again; a bad mark is refused."""
    import csv
    import shutil

    out = tmp_path / "out"
    shutil.copytree(graded_class["out"], out)  # the module's other tests read the unmarked one
    with open(out / "answers.csv", newline="") as source:
        answers = list(csv.DictReader(source))
    questions = {s.name: s.max_points for s in check_catalog(instructor) if s.by_hand}
    ran = ["compile_error", "correct"]  # the fork bomb's checks never ran
    assert {(a["student"], a["question"]) for a in answers} == {(student, q) for student in ran for q in questions}
    assert {a["points"] for a in answers} == {""}
    correct = [a for a in answers if a["student"] == "correct"]
    assert all(len(a["answer"].split()) >= 15 for a in correct), "the answer's text goes out"
    for a in correct:
        a["points"], a["comment"] = a["max_points"], "well argued"
    marked = tmp_path / "marked.csv"

    def write(rows):
        with open(marked, "w", newline="") as target:
            writer = csv.DictWriter(target, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)

    def regrade():
        return subprocess.run([sys.executable, "-m", "labkit", "grade", str(graded_class["submissions"]),
                               "--out", str(out), "--notebooks", NOTEBOOK, "--manual", str(marked)],
                              capture_output=True, text=True, timeout=240)

    write([{**a, "points": str(float(a["max_points"]) + 1)} if a is correct[0] else a for a in answers])
    refused = regrade()
    assert refused.returncode != 0 and "which is worth" in refused.stderr, refused.stderr[-2000:]
    write(answers)
    result = regrade()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "graded in an earlier run and unchanged" in result.stderr  # marks, not runs
    book = pd.read_csv(out / "gradebook.csv", keep_default_na=False)
    rows = rows_of(book, "correct")
    assert {rows[q][0] for q in questions} == {"marked by hand"}
    total = points_of(instructor)
    assert sum(points for _, points, _ in rows.values()) == total
    assert f"Total: {total:g} / {total:g} points" in (out / "feedback" / "correct.html").read_text()
    assert "well argued" in (out / "feedback" / "correct.html").read_text()
    assert {rows_of(book, "compile_error")[q][0] for q in questions} == {"by hand"}  # no mark given: none applied
    with open(out / "answers.csv", newline="") as source:  # the marks are kept for the next run
        kept = {(a["student"], a["question"]): a["points"] for a in csv.DictReader(source)}
    assert all(kept[("correct", q)] == f"{questions[q]:g}" for q in questions)


def _plain(folder):
    (folder / "csrc" / "servers").mkdir(parents=True)
    (folder / "csrc" / "servers" / "mine.c").write_text("int main(void) { return 0; }\n")


def _linked_csrc(folder):
    elsewhere = folder.parent / "elsewhere"
    (elsewhere / "servers").mkdir(parents=True)
    (elsewhere / "servers" / "mine.c").write_text("/* not the student's folder */\n")
    (folder / "csrc").symlink_to(elsewhere)


def _big_server(folder):
    (folder / "csrc" / "servers").mkdir(parents=True)
    (folder / "csrc" / "servers" / "mine.c").write_bytes(b"x" * (256 * 1024 + 1))


def _linked_notebook(folder):
    (folder / "07_your_server.ipynb").unlink()
    (folder / "07_your_server.ipynb").symlink_to(paths.ROOT / "notebooks" / "07_your_server.ipynb")


# how the student's folder is made -> what handed_in gives for the notebook and the server
# (bytes: read; a string: refused, saying that; None: not part of the submission)
HANDED_IN = [
    ("07_your_server", _plain, b"{}", b"int main(void) { return 0; }\n"),
    ("01_proc_service", _plain, b"{}", None),  # only the capstone's notebook carries mine.c
    ("07_your_server", _linked_csrc, b"{}", "csrc is not a folder (a link?)"),
    ("07_your_server", _big_server, b"{}", "over the 256 KiB limit"),
    ("07_your_server", _linked_notebook, "is a symbolic link", "was not handed in"),
]


@pytest.mark.parametrize("notebook, make, expected_notebook, expected_server", HANDED_IN,
                         ids=[f"{case[0][:2]}-{case[1].__name__.strip('_')}" for case in HANDED_IN])
def test_a_submission_is_read_once_without_following_links(tmp_path, notebook, make, expected_notebook,
                                                           expected_server):
    from labkit.instructor.basics.submissions import CAPSTONE_SERVER, Refused, handed_in

    folder = tmp_path / "ana"
    folder.mkdir()
    (folder / f"{notebook}.ipynb").write_bytes(b"{}")
    (folder / "notes.c").write_text("not the lab's: not part of it\n")
    make(folder)
    got = handed_in(folder / f"{notebook}.ipynb", notebook)
    assert "notes.c" not in got
    for name, expected in [(f"{notebook}.ipynb", expected_notebook), (str(CAPSTONE_SERVER), expected_server)]:
        if expected is None:
            assert name not in got
        elif isinstance(expected, bytes):
            assert got[name] == expected
        else:
            assert isinstance(got[name], Refused) and expected in str(got[name]), got[name]

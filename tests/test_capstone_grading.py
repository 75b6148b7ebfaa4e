"""The capstone graded as a class is: notebook 07 handed in with a server that has the
partial-write bug (tests/capstone_servers.py), through `labkit grade`.
A file of its own: at over a minute it is the suite's longest test, and pytest-xdist
hands out whole files (--dist loadfile), so beside test_capstone's other tests it would
keep one worker busy long after the others are done."""

import os
import re
import subprocess
import sys

import pytest

from capstone_servers import with_bug
from labkit import capstone, paths
from labkit.exercises.catalog import C_EXERCISES
from labkit.instructor.release import edition as release

CAPSTONE = "07_your_server"


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run uids need root (non-root isolation is weaker)")
@pytest.mark.timeout(900)
def test_grading_gives_the_buggy_server_every_point_but_the_slow_readers(tmp_path):
    """A student hands in the solved notebook 07 with the partial-write bug's server
    (tests/capstone_servers.py), and their earlier notebooks with the C exercises solved: the
    server is built in the grading sandbox from what was handed in, the lab's programs from the
    edition's sources with the student's functions adopted (run_lab),
    and earns every point but the slow reader's, visible and hidden, whose message names the
    fix; its feedback lists each case and where mine stands.  (The reference server's every
    point is test_release's, through the checks process's code, and test_capstone's, case by
    case: graded beside this one it doubled the test's time, 122 s of CI's parallel phase.)"""
    import copy

    import nbformat
    import pandas as pd

    from labkit.instructor.grading.check_cells import check_catalog

    def solved(name):
        teacher = nbformat.read(paths.NOTEBOOKS / f"{name}.ipynb", as_version=4)
        student, _ = release.release_notebook(copy.deepcopy(teacher), name)
        solutions = {cell.id: cell.source for cell in teacher.cells if "BEGIN SOLUTION" in cell.source}
        for cell in student.cells:
            cell.source = solutions.get(cell.id, cell.source)
        return teacher, student

    teacher, student = solved(CAPSTONE)
    submissions = tmp_path / "class"
    folder = submissions / "partial_write"
    (folder / "csrc" / "servers").mkdir(parents=True)
    nbformat.write(student, folder / f"{CAPSTONE}.ipynb")
    # the C exercises of the earlier notebooks, solved: the run's programs are built from the
    # edition's stubs with this student's functions adopted (run_lab), the top service's parser
    # (exercise 1.1) among them, which the battery's top cases run
    for earlier in sorted({exercise.notebook for exercise in C_EXERCISES}):
        nbformat.write(solved(earlier)[1], folder / f"{earlier}.ipynb")
    (folder / "csrc" / capstone.SOURCE).write_text(with_bug())
    done = subprocess.run([sys.executable, "-m", "labkit", "grade", str(submissions), "--out", str(tmp_path / "out"),
                           "--timeout", "400", "--notebooks", CAPSTONE],
                          capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stderr[-3000:]
    book = pd.read_csv(tmp_path / "out" / "gradebook.csv", keep_default_na=False)
    rows = {r.check: r for r in book.itertuples()}
    battery_checks = sorted(check for check in rows if check.startswith("battery_"))
    assert battery_checks, sorted(rows)
    slow = {"battery_slow_reader", "battery_slow_reader_more_bytes"}
    assert slow <= set(battery_checks), battery_checks
    for check in battery_checks:
        assert (rows[check].status == "failed") == (check in slow), (check, rows[check].status, rows[check].message)
        assert check in slow or rows[check].status == "passed", (check, rows[check].status, rows[check].message)
    assert "session_did_write(n)" in rows["battery_slow_reader"].message
    assert "case(s) passed" in rows["battery_protocol"].message
    measured = [check for check in rows if check.startswith("mine_measured")]
    assert measured and all(rows[c].status == "passed" and re.search(r"mine (is|ties for) \d+\w\w of \d+",
                                                                     rows[c].message)
                            for c in measured), [(c, rows[c].message) for c in measured]
    catalog = check_catalog(teacher)
    earned = sum(spec.max_points for spec in catalog if not spec.by_hand and spec.name not in slow)
    assert book["points"].sum() == earned, book[book["points"] < book["max_points"]][["check", "status"]]
    log = (tmp_path / "out" / "logs" / "partial_write" / f"{CAPSTONE}.log").read_text()
    assert [e.label for e in C_EXERCISES if f"({e.function}) from {e.notebook}: adopted" in log] == \
        [e.label for e in C_EXERCISES], log[-3000:]  # each went through its visible check in the run
    feedback = (tmp_path / "out" / "feedback" / "partial_write.html").read_text()
    assert "echo: reads nothing until the output is full" in feedback

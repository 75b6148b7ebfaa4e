"""The capstone graded as a class is: the same notebook 07 handed in with two servers, the
reference and the partial-write bug (tests/capstone_servers.py), through `labkit grade`.
A file of its own: at over a minute it is the suite's longest test, and pytest-xdist
hands out whole files (--dist loadfile), so beside test_capstone's other tests it would
keep one worker busy long after the others are done."""

import os
import re
import subprocess
import sys

import pytest

from capstone_servers import reference, with_bug
from labkit import capstone, paths
from labkit.instructor import release

CAPSTONE = "07_your_server"


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run uids need root (non-root isolation is weaker)")
@pytest.mark.timeout(900)
def test_grading_gives_the_correct_server_every_battery_point_and_the_buggy_one_fewer(tmp_path):
    """Two students hand in the solved notebook 07 with a server each: the reference and the
    partial-write bug.  Both are built in the grading sandbox from what they handed in; the
    buggy one loses exactly the slow reader's points, visible and hidden, with a message that
    names the fix; the correct one's feedback lists each case and where mine stands."""
    import copy

    import nbformat
    import pandas as pd

    teacher = nbformat.read(paths.NOTEBOOKS / f"{CAPSTONE}.ipynb", as_version=4)
    student, _ = release.release_notebook(copy.deepcopy(teacher), CAPSTONE)
    solutions = {cell.id: cell.source for cell in teacher.cells if "BEGIN SOLUTION" in cell.source}
    for cell in student.cells:
        cell.source = solutions.get(cell.id, cell.source)
    submissions = tmp_path / "class"
    for name, server in (("correct", reference()), ("partial_write", with_bug())):
        folder = submissions / name
        (folder / "csrc" / "servers").mkdir(parents=True)
        nbformat.write(student, folder / f"{CAPSTONE}.ipynb")
        (folder / "csrc" / capstone.SOURCE).write_text(server)
    done = subprocess.run([sys.executable, "-m", "labkit", "grade", str(submissions), "--out", str(tmp_path / "out"),
                           "--jobs", "2", "--timeout", "400", "--notebooks", CAPSTONE],
                          capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stderr[-3000:]
    book = pd.read_csv(tmp_path / "out" / "gradebook.csv", keep_default_na=False)
    rows = {(r.student, r.check): r for r in book.itertuples()}
    battery_checks = sorted({check for _, check in rows if check.startswith("battery_")})
    assert battery_checks, sorted(rows)
    slow = {"battery_slow_reader", "battery_slow_reader_more_bytes"}
    for check in battery_checks:
        good, bad = rows[("correct", check)], rows[("partial_write", check)]
        assert good.status == "passed", (check, good.message)
        assert (bad.status == "failed") == (check in slow), (check, bad.status, bad.message)
    assert "session_did_write(n)" in rows[("partial_write", "battery_slow_reader")].message
    assert "case(s) passed" in rows[("correct", "battery_protocol")].message
    measured = [check for _, check in rows if check.startswith("mine_measured")]
    assert measured and all(rows[("correct", c)].status == "passed" and
                            re.search(r"mine (is|ties for) \d+\w\w of \d+", rows[("correct", c)].message)
                            for c in measured), [(c, rows[("correct", c)].message) for c in measured]
    points = book.groupby("student")["points"].sum()
    lost = sum(rows[("correct", c)].max_points for c in slow)
    assert points["correct"] - points["partial_write"] == lost, points
    feedback = (tmp_path / "out" / "feedback" / "correct.html").read_text()
    assert "echo: reads nothing until the output is full" in feedback

"""The capstone graded as a class is: notebook 07 handed in with a server that has the
partial-write bug (tests/capstone_servers.py), through `labkit grade`; and the capstone's
two servers (that one, and the reference) through the platforms' autograders
(`labkit autograder run`, in the simulated layouts of test_autograder), beside it.
A file of its own: at over a minute it is the suite's longest test, and pytest-xdist
hands out whole files (--dist loadfile), so beside test_capstone's other tests it would
keep one worker busy long after the others are done."""

import json
import os
import re
import subprocess
import sys
import time

import jsonschema
import pytest

from capstone_servers import reference, with_bug
from labkit import capstone, paths
from labkit.instructor.autograder import platforms
from test_autograder import GRADESCOPE_SCHEMA, PRAIRIELEARN_SCHEMA
from labkit.exercises.catalog import C_EXERCISES
from labkit.instructor.release import edition as release

CAPSTONE = "07_your_server"


def autograder(tmp_path, platform: str, handed_in: dict) -> tuple[subprocess.Popen, object]:
    """`labkit autograder run PLATFORM` started on a simulated container's root under
    tmp_path, grading 07 alone, with `handed_in` (relative path -> text) where an upload
    would put it (under a top folder, as a zip's); (the process, the root)."""
    layout = platforms.PLATFORMS[platform]
    root = tmp_path / platform
    upload = root / layout.submission / "my-lab"
    for name, text in handed_in.items():
        (upload / name).parent.mkdir(parents=True, exist_ok=True)
        (upload / name).write_text(text)
    lab = tmp_path / f"{platform}-lab"  # the package's autograder.json; the checkout's lab
    lab.mkdir()
    # the leaderboard's ladder cut to two rates here (its whole ladder took 34 s and a CPU)
    (lab / "autograder.json").write_text(json.dumps({"notebooks": [CAPSTONE], "instructor_dir": str(paths.NOTEBOOKS),
                                                     "timeout_s": 400, "profile": "quick",
                                                     "leaderboard_rates": [1000, 4000]}))
    started = subprocess.Popen([sys.executable, "-m", "labkit", "autograder", "run", platform, "--root", str(root),
                                "--lab", str(lab)], cwd=paths.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    return started, root


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
    # The same hand-in through Gradescope's entry point, and the reference server's through
    # PrairieLearn's, graded beside labkit grade (each mostly waits on its battery's clients)
    handed = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()}
    started = time.monotonic()
    gradescope = autograder(tmp_path, "gradescope", handed)
    prairielearn = autograder(tmp_path, "prairielearn", {**handed, f"csrc/{capstone.SOURCE}": reference()})
    done = subprocess.run([sys.executable, "-m", "labkit", "grade", str(submissions), "--out", str(tmp_path / "out"),
                           "--timeout", "400", "--notebooks", CAPSTONE],
                          capture_output=True, text=True, timeout=840)
    graded_s = time.monotonic() - started
    for process, _ in (gradescope, prairielearn):
        _, err = process.communicate(timeout=840)
        assert process.returncode == 0, err[-3000:]
    print(f"07 graded side by side: labkit grade {graded_s:.0f} s, both autograders {time.monotonic() - started:.0f} s")
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

    # Gradescope: a test per check with labkit grade's points, hidden ones after publishing,
    # written answers 0 of theirs, to be marked by hand
    results = json.loads((gradescope[1] / platforms.GRADESCOPE.results).read_text())
    jsonschema.validate(results, GRADESCOPE_SCHEMA)
    by_check = {test["name"].split(": ", 1)[1].split(" (")[0]: test for test in results["tests"]}
    assert list(by_check) == list(book["check"]), (list(by_check), list(book["check"]))
    for row in book.itertuples():
        test = by_check[row.check]
        assert test["score"] == row.points and test["max_score"] == row.max_points, (row.check, test, row.message)
        assert test["visibility"] == ("after_published" if row.hidden else "visible"), row.check
        assert (platforms.BY_HAND in test["name"]) == (row.status == "by hand"), (row.check, row.status)
    assert results["score"] == book["points"].sum()
    # its leaderboard, measured by the grader on the server handed in (its first rate at least:
    # the server answered), and an entry only where a rate met the target
    line = next(line for line in results["output"].splitlines() if line.startswith("leaderboard:"))
    print(line)
    first = re.search(r"1,000/s: ([\d,]+) completed/s, p99 [\d,]+-[\d,]+ µs", line)
    assert first and int(first.group(1).replace(",", "")) > 0, line
    if "leaderboard" in results:
        rate = results["leaderboard"][0]["value"]
        assert rate in (1000, 4000) and f"leaderboard: {rate:,} requests/s with p99" in line, line
        assert [entry["order"] for entry in results["leaderboard"]] == ["desc", "asc"]
    else:
        assert "leaderboard: no entry" in line, line

    # PrairieLearn, the reference server: every point but the written answers' (by hand),
    # the hidden checks' names withheld
    learned = json.loads((prairielearn[1] / platforms.PRAIRIELEARN.results).read_text())
    jsonschema.validate(learned, PRAIRIELEARN_SCHEMA)
    assert "leaderboard" not in learned and "leaderboard:" not in learned["output"]  # Gradescope's alone
    by_hand = {spec.name for spec in catalog if spec.by_hand}
    hidden = [spec.name for spec in catalog if spec.hidden]
    assert len(learned["tests"]) == len(catalog)
    for spec, test in zip(catalog, learned["tests"]):
        wanted = 0 if spec.name in by_hand else spec.max_points
        assert test["points"] == wanted and test["max_points"] == spec.max_points, (spec.name, test)
        assert (spec.name in test["name"]) == (not spec.hidden), test["name"]
    assert not any(name in json.dumps(learned) for name in hidden)
    scored = sum(spec.max_points for spec in catalog if spec.name not in by_hand)
    assert learned["gradable"] and learned["score"] == pytest.approx(scored / sum(spec.max_points for spec in catalog))

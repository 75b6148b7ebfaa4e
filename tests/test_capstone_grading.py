"""The capstone graded as a course grades it: notebook 07 handed in with a server that has
the partial-write bug (tests/capstone_servers.py) through Gradescope's autograder, and with
the reference server through PrairieLearn's (`labkit autograder run`, in the simulated
layouts of test_autograder), side by side; each grades with `labkit grade`'s own function.
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
from solved_notebooks import solved
from labkit import capstone, paths
from labkit.instructor.autograder import platforms
from test_autograder import GRADESCOPE_SCHEMA, PRAIRIELEARN_SCHEMA
from labkit.exercises.catalog import C_EXERCISES

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
def test_grading_gives_the_buggy_server_every_point_but_the_slow_readers_and_back_pressures(tmp_path):
    """A student hands in the solved notebook 07 with the partial-write bug's server
    (tests/capstone_servers.py), and their earlier notebooks with the C exercises solved: the
    server is built in the grading sandbox from what was handed in, the lab's programs from the
    edition's sources with the student's functions adopted (run_lab),
    and earns every point but the slow reader's and the back-pressure case's, visible and hidden,
    the slow reader's message naming the
    case and the fix, and says where mine stands; with the reference server it earns every
    point but the written answers'.  Gradescope's leaderboard is measured on the buggy one."""

    import nbformat

    from labkit.instructor.grading.check_cells import check_catalog

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
    # The hand-in through Gradescope's entry point, and with the reference server through
    # PrairieLearn's, side by side (each mostly waits on its battery's clients).  Each entry
    # point grades with `labkit grade`'s own function (grade.grade; test_autograder compares the
    # two on one submission): a third grading of 07 here, by the command, cost 45 CPU-s.
    handed = {p.relative_to(folder).as_posix(): p.read_text() for p in folder.rglob("*") if p.is_file()}
    started = time.monotonic()
    gradescope = autograder(tmp_path, "gradescope", handed)
    prairielearn = autograder(tmp_path, "prairielearn", {**handed, f"csrc/{capstone.SOURCE}": reference()})
    for process, _ in (gradescope, prairielearn):
        _, err = process.communicate(timeout=840)
        assert process.returncode == 0, err[-3000:]
    print(f"07 graded by both autograders side by side in {time.monotonic() - started:.0f} s")

    # Gradescope, the buggy server: a test per check in the catalog's order, tagged with its
    # status; every point but the slow readers', the back-pressure case's and the written answers' (0, to be marked by
    # hand), hidden checks after publishing
    results = json.loads((gradescope[1] / platforms.GRADESCOPE.results).read_text())
    jsonschema.validate(results, GRADESCOPE_SCHEMA)
    catalog = check_catalog(teacher)
    tests = {test["name"].split(": ", 1)[1].split(" (")[0]: test for test in results["tests"]}
    # written answers are no tests: a person marks them (platforms.py); the output lists them
    assert list(tests) == [spec.name for spec in catalog if not spec.by_hand], list(tests)
    assert all(f"{CAPSTONE}: {spec.name} (" in results["output"] for spec in catalog if spec.by_hand)
    status = {check: test["tags"][1] for check, test in tests.items()}
    message = {check: test["output"] for check, test in tests.items()}
    battery_checks = sorted(check for check in tests if check.startswith("battery_"))
    # the bug drops what a write could not take, so the server never holds a client back: the slow
    # reader's cases and the back-pressure case (resources: no CPU while a client reads nothing)
    # both catch it, visible and hidden
    slow = {"battery_slow_reader", "battery_slow_reader_more_bytes", "battery_resources", "battery_resources_longer"}
    assert slow <= set(battery_checks), battery_checks
    for check in battery_checks:  # the top cases among them run exercise 1.1's parser, adopted
        assert status[check] == ("failed" if check in slow else "passed"), (check, status[check], message[check])
    assert "session_did_write(n)" in message["battery_slow_reader"]
    assert "echo: reads nothing until the output is full" in message["battery_slow_reader"]
    assert "case(s) passed" in message["battery_protocol"]
    measured = [check for check in tests if check.startswith("mine_measured")]
    assert measured and all(status[c] == "passed" and re.search(r"mine (is|ties for) \d+\w\w of \d+", message[c])
                            for c in measured), [(c, message[c]) for c in measured]
    for spec in (spec for spec in catalog if not spec.by_hand):
        test = tests[spec.name]
        wanted = 0 if spec.name in slow else spec.max_points
        assert test["score"] == wanted and test["max_score"] == spec.max_points, (spec.name, test)
        assert test["visibility"] == ("after_published" if spec.hidden else "visible"), spec.name
    assert results["score"] == sum(spec.max_points for spec in catalog if not spec.by_hand and spec.name not in slow)
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
    machine = [spec for spec in catalog if not spec.by_hand]  # written answers: no tests, not in the score
    hidden = [spec.name for spec in catalog if spec.hidden]
    assert len(learned["tests"]) == len(machine)
    for spec, test in zip(machine, learned["tests"]):
        assert test["points"] == spec.max_points and test["max_points"] == spec.max_points, (spec.name, test)
        assert (spec.name in test["name"]) == (not spec.hidden), test["name"]
    assert not any(name in json.dumps(learned) for name in hidden)
    assert learned["gradable"] and learned["score"] == pytest.approx(1.0)

"""Grading where courses grade, tested in a reproduction of each platform's container
(tests/platform_container.py says what it reproduces and where it differs): the real
packages `labkit autograder gradescope|prairielearn` make, unpacked where the platform puts
them, built in the image, and each grading through the platform's own entry point
(/autograder/run_autograder, /lab/run-grader) as root with Docker's default capabilities
(no CAP_SYS_ADMIN: no namespaces, no mounts), no cgroup of its own, the platform's memory,
CPU, pids and network, killed at the platform's time limit.

Nothing is turned off to pass: the entry point protects the package's lab as it does on the
platform (`--lab`, the whole lab), and the graded runs go without the walls the container
does not allow, as they would there.

Notebook 01 is graded: its C exercises' checks compile the student's C in the checks'
process, which runs under a grading uid, so they fail where the lab's files are root's
alone and the checks' copy is not given to that uid (issue 63).  The instructor's solutions
must score every machine point there, as `labkit grade` gives them; a hostile copy of them
reads what it can of the instructor's files and the build into a written answer (which the
results show the student), forges results.json, prints a flood, forks and then hangs: it
must leak nothing, and its results must be written before the platform's limit.  A plain hang
(the hostile copy's forks end its run first) is tests/platform_image.py's --hang: its
grading took 49-81 s at Gradescope's half CPU (a notebook's 20 s, then 00 graded), more than
this file's share of make test has room for."""

import copy
import json
import os
import re
import subprocess
import sys
import time

import nbformat
import pytest

import platform_container as pc
from hostile_cells import RESULTS, forge_results
from solved_notebooks import solved
from labkit import paths
from labkit.instructor.grading.check_cells import check_catalog

NOTEBOOK = "01_proc_service"
PER_NOTEBOOK_S = 120  # the packages' --timeout: 01's whole grading took 50-56 s in the containers
# quiet: alone on the machine (make test's first phase).  A hostile hand-in forks up to the
# platform's 1,024 pids and fills its memory: beside the parallel phase that load slowed other
# tests' servers past their own bounds (a fresh-clone run: notebook 07's epoll ignored SIGTERM
# for 1 s), and their load would eat into the platform's 600 s here.
pytestmark = [pytest.mark.slow, pytest.mark.quiet, pytest.mark.timeout(1500)]


# Read what a graded run could of the instructor's files and the build, wherever the platform
# put the package, and hand it in as a written answer: the results show it to the student.
SNOOP = r'''
import glob, os
leaked = []
for pattern in [f"{lab}/{part}" for lab in ("/autograder/source/lab", "/lab")
                for part in ("notebooks/**", "csrc/**", "tests/**", "build/**", "autograder.json")] + [
        "/var/lib/labkit-grade*/**", "/grade/serverFilesCourse/**"]:
    for path in glob.glob(pattern, recursive=True):
        try:
            with open(path, "rb") as handle:
                leaked.append(f"{path}: {handle.read(40)!r}")
        except OSError:
            pass
answer_q1 = f"SNOOPED {len(leaked)} files " + " | ".join(leaked[:50])
print(answer_q1[:2000])
'''

# Before the last check: forge the platforms' results, print 200 MiB, take more memory (5 GiB) than the
# container has (its address-space limit raised to the hard one, which a container's memory
# limit leaves unlimited for the ASan build: the kernel must kill the taker, not the grader),
# fork all it may and hold the processes 5 s, then never finish (the notebook is stopped at the
# package's --timeout, PER_NOTEBOOK_S, and its checks after this cell say so: timed out).
WRECK = forge_results(RESULTS) + r'''
import os, resource, subprocess, sys, time
TAKE = "import resource; h = resource.getrlimit(resource.RLIMIT_AS)[1]; " \
       "resource.setrlimit(resource.RLIMIT_AS, (h, h)); b = bytearray(5 << 30)"
print("TOOK", subprocess.run([sys.executable, "-c", TAKE]).returncode)
for _ in range(200):
    sys.stdout.write("x" * (1 << 20))
children = []
for _ in range(3000):
    try:
        child = os.fork()
        if child == 0:
            os.execv("/bin/sleep", ["sleep", "3600"])
        children.append(child)
    except OSError:
        break
print("FORKED", len(children))
time.sleep(5)
for child in children:  # what is left is a plain hang: the notebook's time limit stops it
    os.kill(child, 9)
    os.waitpid(child, 0)
time.sleep(100000)
'''


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Each platform's real package, made by the command line, unpacked where the platform puts
    it, its C built in the image (the build's part of setup.sh / the Dockerfile: make build)."""
    assert os.geteuid() == 0, "the platforms' containers are made as root (namespaces, cgroups, overlays)"
    out = tmp_path_factory.mktemp("platforms")
    made = {"prairielearn-course": out / "prairielearn-grader" / "serverFilesCourse"}
    for platform, target, named in (("gradescope", out / "autograder.zip", f"{NOTEBOOK}.ipynb"),
                                    ("prairielearn", out / "prairielearn-grader", NOTEBOOK)):
        done = subprocess.run([sys.executable, "-m", "labkit", "autograder", platform, "--out", str(target),
                               "--notebooks", named, "--timeout", str(PER_NOTEBOOK_S)],
                              cwd=paths.ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        layout = pc.PLATFORMS[platform]
        image = out / f"{platform}-image"
        lab = pc.unpack(layout, target, image)
        config = json.loads((lab / "autograder.json").read_text())
        assert config["notebooks"] == [NOTEBOOK]  # named as a file, it is still the notebook
        started = time.monotonic()
        builder = pc.Platform(**{**layout.__dict__, "memory_bytes": 4096 * pc.MIB, "cpus": 2.0, "pids": None,
                                 "network": True})
        built = pc.run(builder, image, command=f"cd /{layout.lab} && make build", kill_s=900, writable_image=True)
        assert built.returncode == 0, built.output[-3000:]
        print(f"{platform}: image built in {time.monotonic() - started:.0f} s")
        made[platform] = image
    return made


def submission(student) -> dict[str, bytes]:
    return {f"my-lab/{NOTEBOOK}.ipynb": nbformat.writes(student).encode()}


def grade_in(platform: str, images, handed: dict[str, bytes], course: bool = True) -> pc.Graded:
    """One grading through the platform's entry point; on PrairieLearn with the package's
    serverFilesCourse folder in the job (`course`), as the question's options name it."""
    graded = pc.run(pc.PLATFORMS[platform], images[platform], submission=handed,
                    course=images["prairielearn-course"] if platform == "prairielearn" and course else None)
    print(f"{platform}: graded in {graded.elapsed_s:.0f} s (rc {graded.returncode}, killed {graded.killed}, "
          f"OOM kills {graded.oom_kills})")
    assert not graded.killed, "the platform killed the container before results were written"
    assert graded.results is not None, graded.output[-4000:]
    return graded


def scored(platform: str, results: dict) -> dict[str, tuple[float, float]]:
    """(points, most) by check name, as the results show them."""
    key = ("score", "max_score") if platform == "gradescope" else ("points", "max_points")
    return {t["name"].split(": ", 1)[1].split(" (")[0]: (t[key[0]], t[key[1]]) for t in results["tests"]}


def test_the_instructors_solutions_score_every_machine_point_on_gradescope(images):
    teacher, student = solved(NOTEBOOK)
    graded = grade_in("gradescope", images, submission(student))
    results = graded.results
    catalog = check_catalog(teacher)
    got = scored("gradescope", results)
    for spec in catalog:
        if spec.by_hand:  # left to the instructor: no test (never "failed"), listed in the output
            assert spec.name not in got and f"{NOTEBOOK}: {spec.name} (" in results["output"], spec.name
        else:
            assert got[spec.name] == (spec.max_points, spec.max_points), (spec.name, results["tests"])
    assert {t.get("status") for t in results["tests"]} == {"passed"}, results["tests"]
    assert results["score"] == sum(spec.max_points for spec in catalog if not spec.by_hand)
    assert f"{NOTEBOOK}: the notebook ran to its end" in results["output"], results["output"]


def test_a_hostile_copy_of_the_solutions_leaks_nothing_and_its_results_are_written_in_time(images):
    """On PrairieLearn (no network, 1,024 pids, the instructor's side from serverFilesCourse):
    the solutions with the snooping answer, and the wrecking cell before the last check; the
    checks before it get every point, the last one 0 "timed out", the snoop read none of the
    instructor's files, the forged results are not the results, and they are written before
    PrairieLearn's 600 s (here the notebook's time is the package's --timeout, PER_NOTEBOOK_S,
    where a real package gives 300 s or half of what is left)."""
    teacher, student = solved(NOTEBOOK)
    answer = next(cell.source for cell in student.cells if "answer_q1 =" in cell.source).splitlines()[-1]
    assert answer.startswith('ex.answer("answer_q1"'), answer
    last = max(i for i, cell in enumerate(student.cells) if "@ex.check(" in cell.source)
    # the snooping answer given before the wreck (the written answers' own cells come after it)
    student.cells[last:last] = [nbformat.v4.new_code_cell(SNOOP + answer), nbformat.v4.new_code_cell(WRECK)]
    last += 1
    after = {name for cell in student.cells[last + 1:] for name in re.findall(r'@ex\.check\("([^"]+)"', cell.source)}
    assert after, "the wrecking cell must come before a check"
    graded = grade_in("prairielearn", images, submission(student))
    results = graded.results
    said = json.dumps(results)
    assert "999" not in said and "forged" not in said
    assert graded.results_bytes <= 1_000_000  # PrairieLearn refuses a larger results.json
    snooped = [line for line in said.split("\\n") if "SNOOPED" in line]
    assert snooped and all("SNOOPED 0 files" in line for line in snooped), snooped
    catalog = check_catalog(teacher)
    got = scored("prairielearn", results)
    for spec in catalog:
        if spec.name in after:
            test = next(t for t in results["tests"] if t["name"].endswith(f": {spec.name}"))
            # stopped at its time, or earlier where the watcher saw it hold its forks: a fork bomb
            assert test["points"] == 0 and re.search(r"did not run: the notebook (ran over the|kept \d+ processes)",
                                                      test["output"]), test
        elif not spec.by_hand and not spec.hidden:
            assert got[spec.name] == (spec.max_points, spec.max_points), (spec.name, results["tests"])
    assert 0 < results["score"] < 1
    assert graded.elapsed_s < pc.PRAIRIELEARN.kill_s
    assert graded.oom_kills >= 1  # the memory taker, killed by the kernel; the grader wrote the results


def answers() -> tuple[set[str], set[str]]:
    """(the instructor's answers' lines, every other line of the lab): each line (stripped, of
    30 characters or more) of a solution, a hidden check's cell or a file the students' edition
    leaves out, that no other file of the lab, nor the notebooks and C with their solutions
    stubbed, holds."""
    from labkit.instructor.autograder.package import _lab_files
    from labkit.instructor.release import edition as release

    secret, public = set(), set()

    def lines(text: str) -> set[str]:
        return {line.strip() for line in text.splitlines() if len(line.strip()) >= 30}

    for name in _lab_files(paths.ROOT):
        path = paths.ROOT / name
        if name in release.INSTRUCTOR_ONLY:
            secret |= lines(path.read_text(errors="replace"))
        elif name.startswith("notebooks/") and name.endswith(".ipynb"):
            teacher = nbformat.read(path, as_version=4)
            secret |= {line for cell in teacher.cells if release.HIDDEN_TAG in cell.metadata.get("tags", [])
                       for line in lines(cell.source)}
            student, found = release.release_notebook(copy.deepcopy(teacher), path.stem)
            secret |= {line for solution in found for line in lines(solution.text)}
            public |= {line for cell in student.cells for line in lines(cell.source)}
        elif name.startswith("csrc/") and path.suffix in (".c", ".h"):
            stubbed, found = release.strip_solutions(path.read_text(), name)
            secret |= {line for solution in found for line in lines(solution.text)}
            public |= lines(stubbed)
        else:
            public |= lines(path.read_text(errors="replace"))
    return secret - public, public


def test_the_prairielearn_image_holds_no_answer_and_grading_without_the_course_says_why(images):
    """The image PrairieLearn pulls (public) after its build, every file of it: no line of a
    solution, a hidden check or the instructor's tests (the course's folder holds them); and a
    grading job whose question does not name the course's folder is not gradable, saying what
    to do, with nothing graded."""
    needles, _ = answers()
    assert len(needles) > 100, len(needles)
    found, where = set(), {}
    for top, course in ((images["prairielearn"], False), (images["prairielearn-course"], True)):
        for path in top.rglob("*"):
            if path.is_file() and not path.is_symlink():
                held = {line.strip() for line in path.read_bytes().decode(errors="replace").splitlines()} & needles
                if course:
                    found |= held
                elif held:
                    where[str(path.relative_to(top))] = sorted(held)[:3]
    assert not where, where
    assert len(found) > 0.9 * len(needles)  # the grep finds them where they are
    _, student = solved(NOTEBOOK)
    graded = grade_in("prairielearn", images, submission(student), course=False)
    assert graded.results == {"gradable": False, "format_errors": [graded.results["format_errors"][0]]}
    why = graded.results["format_errors"][0]
    assert "/grade/serverFilesCourse/labkit-grader is missing" in why
    assert '"serverFilesCourse": ["labkit-grader/"]' in why

"""labkit release: the students' copy holds no solution and no hidden check,
refuses broken markers; the instructor's notebooks pass every check and the
released ones run to the end and fail exactly their exercises' visible checks."""

import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labkit import paths
from labkit.stubs import which_edition as editions
from labkit.instructor.release import edition as release
from labkit.errors import LabError
from quickrun import QUICK_RUN_LIMIT_S, kernel_env, papermill, run_quick

INSTRUCTOR = sorted(paths.NOTEBOOKS.glob("*.ipynb"))


# ---------------------------------------------------------------------------
# markers


def test_python_and_c_solutions_become_their_stubs():
    source = "\n".join([
        "x = 1",
        "    # BEGIN SOLUTION",
        "    # STUB: ratio = None  # ✏️",
        "    ratio = a / b",
        "    # END SOLUTION",
        'code = r"""',
        "int f(int a)",
        "{",
        "    /* BEGIN SOLUTION */",
        "    /* STUB: (void)a;",
        "    return -1; // ✏️ */",
        "    return a * 2;",
        "    /* END SOLUTION */",
        "}",
        '"""',
        "# BEGIN SOLUTION",
        "secret()",
        "# END SOLUTION",
    ])
    released, solutions = release.strip_solutions(source, "nb cell 3", exercise="double")
    assert released.split("\n") == [
        "x = 1", "    ratio = None  # ✏️", 'code = r"""', "int f(int a)", "{", "    (void)a;",
        "    return -1; // ✏️", "}", '"""',
        'raise NotImplementedError("exercise: double: write your solution here")']
    assert [s.text.strip() for s in solutions] == ["ratio = a / b", "return a * 2;", "secret()"]


def test_a_python_stub_may_take_a_stub_line_each():
    source = ("    # BEGIN SOLUTION\n    # STUB: ratio = None\n    # STUB: holds = None\n"
              "    ratio, holds = 1.0, True\n    # END SOLUTION\nprint(ratio, holds)")
    released, solutions = release.strip_solutions(source, "nb cell 4")
    assert released.split("\n") == ["    ratio = None", "    holds = None", "print(ratio, holds)"]
    assert [s.text.strip() for s in solutions] == ["ratio, holds = 1.0, True"]


def test_a_c_solution_without_stub_returns_minus_one():
    released, _ = release.strip_solutions("  /* BEGIN SOLUTION */\n  return 7;\n  /* END SOLUTION */", "f.c")
    assert released == "  return -1;"


@pytest.mark.parametrize("source, complaint", [
    ("# BEGIN SOLUTION\na\n# BEGIN SOLUTION\nb\n# END SOLUTION\n# END SOLUTION", "cannot nest"),
    ("a\n# END SOLUTION", "without a BEGIN"),
    ("# BEGIN SOLUTION\na = 1", "never ended"),
    ("/* BEGIN SOLUTION */\n/* STUB: return 0;\nx;\n/* END SOLUTION */", "never closed"),
])
def test_broken_markers_are_refused_saying_where(source, complaint):
    with pytest.raises(LabError, match=complaint) as refused:
        release.strip_solutions(source, "01_proc_service cell 7")
    assert "01_proc_service cell 7, line" in str(refused.value)


# A cell the release must refuse, and what it says.  A hidden=True check in an untagged cell:
# the release leaves out only cells tagged hidden-check, so it would reach the students.
REFUSED_CELLS = [
    ("# BEGIN SOLUTION\nanswer = 42", "BEGIN SOLUTION is never ended"),
    ('@ex.check("harsher", points=1, hidden=True)\ndef _():\n    pass', "hidden=True but is not tagged 'hidden-check'"),
]


@pytest.mark.parametrize("source, complaint", REFUSED_CELLS, ids=["unbalanced marker", "untagged hidden check"])
def test_leaking_cell_stops_release(tmp_path, source, complaint):
    """A notebook with a cell that would leak stops the release before writing."""
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(source))
    nbformat.write(nb, notebooks / "bad.ipynb")
    with pytest.raises(LabError, match=r"bad cell 0 .*" + re.escape(complaint)):
        release.release(tmp_path / "out", notebooks=notebooks)
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_an_earlier_release_is_never_wiped(tmp_path):
    (tmp_path / "thesis.tex").write_text("years of work")
    with pytest.raises(LabError, match="is not an earlier release"):
        release.release(tmp_path)
    assert (tmp_path / "thesis.tex").read_text() == "years of work"
    out = tmp_path / "students"
    release.release(out)
    (out / "stale.ipynb").write_text("{}")
    release.release(out)  # an earlier release is replaced whole
    assert not (out / "stale.ipynb").exists() and (out / "notebooks").is_dir()


# ---------------------------------------------------------------------------
# the release of the lab's notebooks


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    return out, release.release(out)


def test_every_notebook_is_released_clean_with_its_cell_ids(released):
    out, written = released
    assert sorted(p.name for p in written if p.suffix == ".ipynb") == [p.name for p in INSTRUCTOR]
    for path in INSTRUCTOR:
        teacher = nbformat.read(path, as_version=4)
        student = nbformat.read(out / "notebooks" / path.name, as_version=4)
        visible_ids = [c.id for c in teacher.cells if release.HIDDEN_TAG not in c.metadata.get("tags", [])]
        assert [c.id for c in student.cells] == visible_ids
        assert all(not c.get("outputs") and c.get("execution_count") is None
                   for c in student.cells if c.cell_type == "code")


def solutions_by_place() -> dict[str, list]:
    """Every solution of the lab, by where it is: each instructor notebook, each C file of csrc/."""
    found = {path.name: release.release_notebook(nbformat.read(path, as_version=4), path.stem)[1]
             for path in INSTRUCTOR}
    for name in release.tracked_files(paths.ROOT):
        if name.startswith("csrc/") and name.endswith((".c", ".h")):
            solutions = release.strip_solutions((paths.ROOT / name).read_text(), name)[1]
            if solutions:
                found[name] = solutions
    return found


def edition_files(out: Path) -> dict[str, tuple[set[str], str]]:
    """Every file of the edition but its .git: its lines (stripped) and its text; a notebook's
    are its cells' sources (a line of a cell is one JSON string in the file)."""
    files = {}
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out)
        if not path.is_file() or relative.parts[0] == ".git":
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".ipynb":
            nb = nbformat.reads(text, as_version=4)
            text = "\n".join([json.dumps(nb.metadata)] + [cell.source for cell in nb.cells])
        files[str(relative)] = ({line.strip() for line in text.split("\n")}, text)
    return files


def test_no_solution_line_nor_hidden_check_is_anywhere_in_the_edition(released):
    """Every non-blank line of every solution body (notebooks and C) is searched for in every
    file of the edition: as a whole line, and inside any line when it is 30 characters or more.
    A line the lab's own C holds outside every answer (`}`, `return 0;`, `close(fd);`) is not
    an answer: those are counted apart, from the instructor's C with its answers cut out."""
    out, _ = released
    by_place = solutions_by_place()
    lines = {line.strip() for solutions in by_place.values() for s in solutions for line in s.text.split("\n")
             if line.strip()}
    lab_c = {line.strip() for name in release.tracked_files(paths.ROOT) if name.startswith("csrc/")
             and name.endswith((".c", ".h"))
             for line in release.strip_solutions((paths.ROOT / name).read_text(), name)[0].split("\n")}
    files = edition_files(out)
    leaked = [(line, name) for line in sorted(lines - lab_c) for name, (file_lines, text) in files.items()
              if line in file_lines or (len(line) >= 30 and line in text)]
    print(f"{len(lines)} distinct solution lines ({sum(map(len, by_place.values()))} solutions in "
          f"{len(by_place)} places) searched in {len(files)} files of the edition; {len(lines & lab_c)} of them "
          "are also the lab's own C outside every answer")
    for name, solutions in by_place.items():
        print(f"  {name}: {len(solutions)} solutions, "
              f"{sum(len([x for x in s.text.split(chr(10)) if x.strip()]) for s in solutions)} lines")
    assert len(lines - lab_c) > 100 and by_place.keys() >= {"csrc/services/procstat.c", "csrc/loop/ev_poll.c",
                                                            "csrc/loadgen/strategies.c"}
    assert leaked == [], f"{len(leaked)} solution lines in the edition, e.g. {leaked[:5]}"

    hidden = [name for path in INSTRUCTOR for name in release.hidden_check_names(nbformat.read(path, as_version=4))]
    assert hidden, "the lab's notebooks should hold hidden checks"
    assert [(name, file) for name in hidden for file, (_, text) in files.items() if name in text] == []
    marker = re.compile(r"^\s*(#|/\*)\s*(BEGIN|END) SOLUTION")
    assert [file for file, (file_lines, _) in files.items() if file.startswith(("csrc/", "notebooks/"))
            and any(marker.match(line) for line in file_lines)] == []
    assert [name for name in release.INSTRUCTOR_ONLY if (out / name).exists()] == []


# ---------------------------------------------------------------------------
# running them: instructor passes everything, students fail exactly the exercises


# A student's run shares the machine with the other tests of make test's parallel phase: its
# limit stops a hang, it does not time the notebook (test_notebooks does, on a quiet machine).
STUDENT_RUN_LIMIT_S = 2 * QUICK_RUN_LIMIT_S


def run_with_checks(source: Path, tmp_path: Path, results_from: Path | None = None, **extra_env: str) -> list[dict]:
    """papermill `source` (quick profile) in its own directory, its results file a copy of
    `results_from` if given (its sweeps resume from those rows); the check records it wrote."""
    workdir = tmp_path / source.stem
    workdir.mkdir(parents=True)
    if results_from is not None and results_from.exists():
        shutil.copy(results_from, workdir / "results.jsonl")
    checks = workdir / "checks.jsonl"
    env = dict(kernel_env(tmp_path), LABKIT_CHECKS_FILE=str(checks),
               LABKIT_RESULTS=str(workdir / "results.jsonl"), **extra_env)
    papermill(source, workdir, env, STUDENT_RUN_LIMIT_S)
    return [json.loads(line) for line in checks.read_text().splitlines()] if checks.exists() else []


_STUDENT_RUNS: dict[str, list[dict]] = {}


# The notebooks run in the edition itself (its labkit first on the path, its csrc with the
# stubs, built there): those whose C exercises are the lab's own code or stop at once, and
# those whose sweeps run the lab's code that the exercises complete (06's top points).
IN_THE_EDITION = {
    "01_proc_service.ipynb": "exercises 1.1 and 1.2 are the lab's procstat_parse and ev_poll",
    "02_multiplexing.ipynb": "its poll model runs exercise 1.2's ev_poll, whose stub stops it at once, saying why",
    "03_uploads.ipynb": "a C exercise of its own (the lingering close), no answer in csrc/",
    "04_write_strategies.ipynb": "exercise 4.1's fill_iovec is the load generator's: writev fails at once",
    "06_what_breaks_first.ipynb": "its offered-load and accept-queue sweeps run the top service (exercise 1.1), "
                                  "its slow-client sweep an event loop's --idle-timeout (exercise 6.2)",
    "07_your_server.ipynb": "its server is the edition's template, the skeleton: the battery and mine's points fail",
}


def needs_an_exercise(row: dict) -> bool:
    """Whether the point of `row` runs the function of a C exercise of the lab's own code
    (C_EXERCISES, each with what needs it): in a fresh edition such a point waits for its
    exercise (labkit.exercises) and is not measured."""
    from labkit.stubs.catalog import C_EXERCISES

    flags = {"idle-timeout": row.get("idle_timeout")}
    return any(exercise.needs.server(row.get("model", ""), row.get("service", "top"), flags)
               or exercise.needs.load({"strategy": row.get("strategy")}) for exercise in C_EXERCISES)


def resumed_in_the_edition(row: dict) -> bool:
    """In the edition, the rows of the instructor's quick run that its programs would measure
    the same are resumed, and only the rest measured: a point that runs no exercise's
    function (needs_an_exercise) runs the instructor's code, but for 07's `mine`, which in
    the edition is the template's skeleton."""
    return not needs_an_exercise(row) and row.get("model") != "mine"


_STUDENT_RESULTS: dict[str, Path] = {}  # each student run's results file


def student_run(released, name: str, tmp_path_factory) -> list[dict]:
    """The released notebook `name` run as a student runs it, quick profile, in the edition
    (IN_THE_EDITION) or else beside the instructor's labkit: the check records it wrote.
    Once per module: the tests of the released notebooks share it.

    Beside the instructor's labkit, the programs are the ones the instructor's quick run
    measured with, so its sweeps resume from that run's rows (the same points, the same
    keys) and measure nothing again: what this run tests is the checks, and the measuring
    is test_notebooks'.  In the edition the stubs are built into the programs: it
    measures for itself what they run (resumed_in_the_edition)."""
    if name not in _STUDENT_RUNS:
        out, _ = released
        extra = {}
        if name not in IN_THE_EDITION:
            extra["results_from"] = run_quick(name).folder / "results.jsonl"
        elif (run_quick(name).folder / "results.jsonl").exists():
            rows = [line for line in (run_quick(name).folder / "results.jsonl").read_text().splitlines()
                    if resumed_in_the_edition(json.loads(line))]
            resumed = tmp_path_factory.mktemp("resumed") / "results.jsonl"
            resumed.write_text("".join(line + "\n" for line in rows))
            extra["results_from"] = resumed
        if name in IN_THE_EDITION:
            extra["PYTHONPATH"] = str(out)
            if not (out / "build" / "bin").is_dir():  # built once, before its first run
                done = subprocess.run(["make", "--no-print-directory", "build"], cwd=out, capture_output=True,
                                      text=True, timeout=600)
                assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        folder = tmp_path_factory.mktemp("student")
        _STUDENT_RUNS[name] = run_with_checks(out / "notebooks" / name, folder, **extra)
        _STUDENT_RESULTS[name] = folder / Path(name).stem / "results.jsonl"
    return _STUDENT_RUNS[name]


def graded_in_the_checks_process(path: Path, exported: str) -> list[dict]:
    """Each check group of the instructor's notebook run by the checks process's own code
    (labkit.instructor.grading.judge.run_group) on what the run exported: the records it writes."""
    import io

    from labkit.instructor.grading import judge, check_cells
    from labkit.instructor.basics import exports

    by_check = exports.read(exported)
    out = io.StringIO()
    for group in check_cells.check_groups(nbformat.read(path, as_version=4)):
        values = next((by_check[name] for name in group.checks if name in by_check), None)
        assert values is not None, f"{path.name}: nothing was exported for {group.checks}"
        judge.run_group({"checks": group.checks, "source": group.source}, values, path.stem, out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def not_failed(records: list[dict]) -> list[tuple]:
    """The check records of a student's run that neither failed nor wait for a C exercise:
    where all a check could run needs a C exercise of the lab's own code that the edition
    still has as a stub (07's top-only battery groups: exercise 1.1), it is an error saying
    "not measurable until exercise 1.1", never a failure blamed on the student's work."""
    return [(r["check"], r["status"], r["message"][:300]) for r in records if r["status"] != "failed"
            and not (r["status"] == "error" and "not measurable until exercise" in r["message"])]


def exercise_notebooks():
    """The notebooks with checks: every lab notebook has some, so an empty list means
    this finder no longer matches how notebooks make their Checker (and must fail)."""
    found = [p for p in INSTRUCTOR if "checks.Checker(" in p.read_text()]
    assert len(found) == len(INSTRUCTOR) >= 3, f"notebooks with a checks.Checker: {[p.name for p in found]}"
    return found


@pytest.mark.timeout(QUICK_RUN_LIMIT_S + STUDENT_RUN_LIMIT_S + 120)
@pytest.mark.parametrize("path", exercise_notebooks(), ids=lambda p: p.name)
def test_instructor_passes_every_check_and_student_fails_exactly_the_exercises(path, tmp_path_factory, released):
    """Every check, visible and hidden, passes as grading runs it on the instructor's own run
    (the graded copy's exports, the checks in the grading process's code); the released
    copy runs to the end as a student runs it (student_run) and fails exactly its visible
    checks."""
    quick = run_quick(path.name)  # the instructor's run test_notebooks reads too: made once
    teacher = graded_in_the_checks_process(path, quick.exports)
    assert teacher, f"{path.name} recorded no check"
    # every check passes; a written answer passes its effort check and is recorded for hand marking
    assert [(r["check"], r["status"], r["message"][:300]) for r in teacher
            if r["status"] != ("recorded" if r.get("by_hand") else "passed")] == []
    assert all(r["points"] == (0 if r.get("by_hand") else r["max_points"]) for r in teacher)

    student = student_run(released, path.name, tmp_path_factory)
    visible = [r["check"] for r in teacher if not r["hidden"]]
    assert sorted(r["check"] for r in student) == sorted(visible), "the student copy runs the visible checks only"
    assert not_failed(student) == [], "every visible check of an unsolved exercise must fail (not pass, not error)"


def test_labkit_release_command_writes_the_students_copy(tmp_path):
    import sys

    out = tmp_path / "students"
    done = subprocess.run([sys.executable, "-m", "labkit", "release", "--out", str(out)], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "notebooks").iterdir()) == [p.name for p in INSTRUCTOR]
    assert f"students' copy in {out}" in done.stdout


# ---------------------------------------------------------------------------
# the edition as a whole: it builds, it names its release, it is a git repository,
# and making it changes nothing in the instructor's checkout


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_edition_is_tracked_files(released):
    """The edition is every tracked file but the instructors and a git repository."""
    out, written = released
    tracked = set(release.tracked_files(paths.ROOT))
    shipped = set(git(out, "ls-files").split("\n")) - {""}
    assert shipped == (tracked - set(release.INSTRUCTOR_ONLY)) | {editions.RELEASE_JSON, editions.LEFT_OUT_JSON}
    assert shipped == {str(p.relative_to(out)) for p in written}
    info = json.loads((out / editions.RELEASE_JSON).read_text())
    assert git(out, "log", "--format=%s") == f"Students' edition, release {info['release']} ({info['date']})\n"
    assert git(out, "status", "--porcelain") == "" and git(out, "branch", "--show-current") == "main\n"
    for name in [".ci/run", "scripts/setup-system.sh"]:  # executables stay executable
        assert os.access(out / name, os.X_OK), name


def test_release_json_names_the_release_and_every_notebook_carries_it(released):
    out, _ = released
    info = json.loads((out / editions.RELEASE_JSON).read_text())
    digests = {f"notebooks/{path.name}": hashlib.sha256(path.read_bytes()).hexdigest() for path in INSTRUCTOR}
    assert info["notebooks"] == digests
    assert info["release"] == hashlib.sha256("".join(f"{name[len('notebooks/'):]} {digest}\n" for name, digest
                                                     in digests.items()).encode()).hexdigest()[:12]
    assert info["lab_commit"] == git(paths.ROOT, "rev-parse", "HEAD").strip()
    age = datetime.datetime.now(datetime.timezone.utc) - datetime.datetime.fromisoformat(info["date"])
    assert datetime.timedelta(0) <= age < datetime.timedelta(hours=1)
    for path in INSTRUCTOR:
        student = nbformat.read(out / "notebooks" / path.name, as_version=4)
        assert student.metadata["labkit"]["release"] == {"release": info["release"],
                                                         "sha256": digests[f"notebooks/{path.name}"]}
    assert editions.edition(out) == info and editions.edition(paths.ROOT) is None


@pytest.mark.parametrize("handed_in, instructor_changed, warned", [
    ("the edition's notebook", False, False),          # made from the release it is graded with
    ("the edition's notebook", True, True),            # the instructor's notebook changed since
    ("the instructor's notebook", False, False),       # no release in it: nothing to compare
])
def test_grade_warns_about_a_notebook_made_from_another_release(released, tmp_path, capsys, handed_in,
                                                                 instructor_changed, warned):
    from labkit.instructor.course import class_grades

    name = "01_proc_service"
    source = (released[0] if handed_in == "the edition's notebook" else paths.ROOT) / "notebooks" / f"{name}.ipynb"
    (tmp_path / "class" / "alice").mkdir(parents=True)
    (tmp_path / "class" / "alice" / f"{name}.ipynb").write_bytes(source.read_bytes())
    instructor = (paths.NOTEBOOKS / f"{name}.ipynb").read_bytes() + (b"\n" if instructor_changed else b"")
    tasks = class_grades.find_tasks(tmp_path / "class", [name])
    warnings = release.warn_other_releases(tasks, {name: instructor})
    printed = capsys.readouterr().err
    if warned:
        info = editions.edition(released[0])
        assert warnings == [f"warning: alice/{name}.ipynb was made from release {info['release']!r}, whose copy of "
                            "this notebook differs from the instructor's notebook it is graded with (its checks "
                            "may differ)"]
        assert printed == warnings[0] + "\n"
    else:
        assert warnings == [] and printed == ""


def tree_state() -> tuple[dict, str]:
    """The instructor's checkout as release must leave it: every tracked file's bytes and
    mode, and git's view of the tree (untracked files included)."""
    files = {}
    for name in release.tracked_files(paths.ROOT):
        path = paths.ROOT / name
        if path.is_file():
            files[name] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mode)
    return files, git(paths.ROOT, "status", "--porcelain")


def test_making_the_edition_changes_nothing_in_the_instructors_checkout(tmp_path):
    before = tree_state()
    release.release(tmp_path / "edition")
    assert tree_state() == before


def test_the_edition_builds_from_its_own_folder(released):
    out, _ = released
    done = subprocess.run(["make", "--no-print-directory", "build"], cwd=out, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    models = subprocess.run(["make", "-s", "--no-print-directory", "-C", "csrc", "print-MODELS"], cwd=out,
                            capture_output=True, text=True, check=True).stdout.split()
    assert {"iterative", "threaded", "select", "poll", "epoll"} <= set(models)
    assert [p for p in models + ["loadgen"] if not (out / "build" / "bin" / p).is_file()] == []


def edition_pytest(out: Path, *args: str) -> str:
    """pytest as the edition's `make test` runs it (its own labkit first on the path); the output."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=out,
                          env=dict(os.environ, PYTHONPATH=str(out)), capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


def test_edition_tests_leave_out_waiting(released, tmp_path):
    """The editions tests leave out what waits for an answer and say why."""
    out = tmp_path / "edition"
    release.release(out)
    listed = json.loads((out / editions.LEFT_OUT_JSON).read_text())
    parse = next(e for e in listed["exercises"] if e["function"] == "procstat_parse")
    assert parse["tests"], "procstat_parse's tests are listed"
    said = edition_pytest(out, "--collect-only", "-q", "tests")
    assert "ERROR" not in said and "error" not in said.split("\n")[-2], said[-3000:]  # every kept file collects
    assert "left out of this students' edition" in said
    print(said[said.index("left out of this"):])
    assert "needs exercise 1.1 (procstat_parse, notebook 01_proc_service): csrc/services/procstat.c still has " \
           "the stub" in said
    assert "tests/servers/test_build.py::test_top_processes_agrees_with_psutil" in said.split("left out of")[1]
    for name, why in release.INSTRUCTOR_ONLY.items():
        assert f"{name}: not in the edition ({why})" in said
    # The student's own function in place (here: the lab's): those tests run again.
    (out / "csrc" / "services" / "procstat.c").write_text((paths.CSRC / "services" / "procstat.c").read_text())
    said = edition_pytest(out, "--collect-only", "-q", "tests/servers/test_build.py")
    assert "needs exercise 1.1" not in said
    assert "tests/servers/test_build.py::test_top_processes_agrees_with_psutil" in said


@pytest.mark.timeout(STUDENT_RUN_LIMIT_S + 300)
@pytest.mark.parametrize("name", sorted(IN_THE_EDITION))
def test_edition_notebook_fails_visible_checks(released, tmp_path_factory, name):
    """In the edition itself (its labkit, its csrc with the stubs, built there): the notebook
    runs to the end in the quick profile and every visible check fails, a C exercise's stub
    included (the run the test above reads too)."""
    from labkit.instructor.grading.check_cells import check_catalog

    teacher = nbformat.read(paths.NOTEBOOKS / name, as_version=4)
    visible = sorted(spec.name for spec in check_catalog(teacher) if not spec.hidden)
    student = student_run(released, name, tmp_path_factory)
    assert sorted(r["check"] for r in student) == visible
    assert not_failed(student) == []
    # every point that would run an exercise's stub waited for it, saying so; no other did
    results = _STUDENT_RESULTS[name]
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    wrong = [(row.get("model"), row.get("service"), row.get("waiting_for_exercise"), row.get("error", "")[:120])
             for row in rows if needs_an_exercise(row) != bool(row.get("waiting_for_exercise"))
             or (needs_an_exercise(row) and not row["error"].startswith("not measurable until exercise"))]
    assert wrong == [], f"{len(wrong)} of {len(rows)} rows"



@pytest.mark.parametrize("name", ["02_multiplexing.ipynb"])  # the run that built the edition
def test_edition_poll_server_waits(released, tmp_path_factory,
                                                                                         name):
    """Before exercise 1.2's check passes, the edition's poll backend is the stub: its server
    exits at the first ready descriptor with the stub's words, rather than spinning while
    clients wait out their timeouts (a sweep does not start it: its points wait for 1.2)."""
    import socket

    student_run(released, name, tmp_path_factory)  # the edition, built
    out, _ = released
    server = subprocess.Popen([str(out / "build" / "bin" / "poll"), "--port", "0", "--service", "echo"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline().split()
        assert ready[0] == "listening", ready
        try:  # the listener's readiness alone may stop it: before our bytes arrive, or even before
            # connect() returns (the reset of the queued connection lands first)
            with socket.create_connection(("127.0.0.1", int(ready[1])), timeout=5) as conn:
                conn.sendall(b"hello\n")
                got = conn.recv(100)
        except (ConnectionResetError, BrokenPipeError):
            got = b""  # the server closed with our connection queued or our bytes unread: a reset
        assert got == b"", got  # no echo: the server is gone
        assert server.wait(timeout=5) == 1
        assert "ev_poll is still the stub of exercise 1.2 (notebook 01)" in server.stderr.read()
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("written, adopted", [
    ("the released stub", False),                # its check fails: csrc/ keeps the stub
    ("a correct fill_iovec", True),              # its check passes: the lab runs it from now on
])
def test_passing_check_puts_function_in_csrc(tmp_path, written, adopted):
    """In the edition a passing check puts the students function into csrc."""
    from labkit import csource

    out = tmp_path / "edition"
    release.release(out)
    stub_file = (out / "csrc" / "loadgen" / "strategies.c").read_text()
    lab = csource.c_function("loadgen/strategies.c", "fill_iovec")[2]
    code = editions.function_text(stub_file, "fill_iovec") if written == "the released stub" else \
        "\n".join(line for line in lab.split("\n") if "SOLUTION" not in line and "STUB" not in line)
    done = subprocess.run([sys.executable, "-c", "import sys; from labkit.instructor import c_exercises; "
                           "c_exercises.check_fill_iovec(sys.stdin.read())"], input=code, cwd=out,
                          env=dict(os.environ, PYTHONPATH=str(out)), capture_output=True, text=True, timeout=300)
    assert (done.returncode == 0) == adopted, done.stderr[-2000:]
    now = (out / "csrc" / "loadgen" / "strategies.c").read_text()
    assert (editions.function_text(now, "fill_iovec") == code) and (now != stub_file) == adopted
    waiting = [why for _, why in editions.left_out(out)[1]]
    assert any("exercise 4.1 (fill_iovec" in why for why in waiting) != adopted
    if adopted:
        assert "your fill_iovec() is now in csrc/loadgen/strategies.c" in done.stdout


def battery_in(edition: Path, server: str) -> tuple[list[list], str]:
    """The battery run by the edition's own labkit on the C `server`: [label, service,
    passed, waiting_for, message] per case, and its headline."""
    script = ("import json, sys\nfrom labkit import battery\nreport = battery.run(sys.stdin.read())\n"
              "print(json.dumps([[r.label, r.case.service, r.passed, r.waiting_for, r.message[:300]] "
              "for r in report.results]))\nprint(report.headline)")
    done = subprocess.run([sys.executable, "-c", script], input=server, cwd=edition, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(edition)), timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    results, headline = done.stdout.splitlines()[:2]
    return json.loads(results), headline


# The sweeps of notebooks 06 and 07 that run the top service (exercise 1.1), each as its
# quick profile has it, at one of its points (a lab model, not 07's `mine`: in the edition
# that is the template's skeleton).
TOP_SWEEPS = [("offered_load", {"models": ["epoll"], "rate": [250]}),       # 06 and 07
              ("accept_queue", {"models": ["epoll"], "backlog": [128]})]    # 06


def top_points_in(edition: Path) -> list[list]:
    """One point of each of TOP_SWEEPS measured by the edition's own labkit: [experiment,
    status, waiting_for_exercise, error, requests_ok] each."""
    script = ("import json\nfrom labkit import experiments, measure\n"
              f"for name, given in {TOP_SWEEPS!r}:\n"
              "    row = measure.point(experiments.resolve(name, 'quick', **given).points()[0])\n"
              "    print(json.dumps([name, row['status'], row['waiting_for_exercise'], row['error'] or '', "
              "row['requests_ok']]))")
    done = subprocess.run([sys.executable, "-c", script], cwd=edition, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(edition)), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]


@pytest.mark.timeout(900)
def test_edition_top_waits_for_1_1(released, tmp_path):
    """A fresh edition runs the stub of procstat_parse (exercise 1.1) in its top service: the
    battery, on the instructor's reference server, says each top case is not measurable
    until exercise 1.1 and passes every other case, blaming the server for nothing; the
    top sweeps of notebooks 06 and 07 wait the same way, running nothing.  In a copy of it
    where exercise 1.1 is solved (the lab's own procstat_parse in its csrc/, as a passing
    check puts the student's there), the same battery passes every case and the same
    sweeps measure their points."""
    from capstone_servers import reference

    out, _ = released
    results, headline = battery_in(out, reference())
    top = [r for r in results if r[1] == "top"]
    assert top and all(r[3] == "1.1" and not r[2] for r in top), top
    assert all(r[4].startswith("not measurable until exercise 1.1: the top service") for r in top)
    assert [r for r in results if r[1] != "top" and not r[2]] == [], "a case the stub does not touch failed"
    assert headline.endswith(f"; {len(top)} not measurable until exercise 1.1"), headline
    for name, status, waiting, error, answered in top_points_in(out):
        assert (status, waiting, answered) == ("failed", "1.1", 0) and \
            error.startswith("not measurable until exercise 1.1: the top service"), (name, error)

    solved = tmp_path / "edition"
    shutil.copytree(out, solved, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    source = "services/procstat.c"
    shutil.copy(paths.ROOT / "csrc" / source, solved / "csrc" / source)
    results, headline = battery_in(solved, reference())
    assert [r for r in results if not r[2]] == [] and headline == f"{len(results)} of {len(results)} cases passed"
    measured = top_points_in(solved)
    assert [name for name, *_ in measured] == [name for name, _ in TOP_SWEEPS]
    for name, status, waiting, error, answered in measured:  # the top replies were read: the stub is gone
        assert (status, waiting, error) == ("ok", "", "") and answered > 0, (name, status, error)


def test_edition_readme_is_students(released):
    """The editions readme is the students with every c exercise and nothing of grading."""
    from labkit.stubs.catalog import C_EXERCISES

    out, _ = released
    readme = (out / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme and "csrc/servers/mine.c" in readme
    for exercise in C_EXERCISES:  # the table: each exercise, its function and file, what waits for it
        assert (f"| {exercise.label} | `{exercise.notebook}.ipynb` | `{exercise.function}()` | "
                f"`csrc/{exercise.source}` | {exercise.uses} |") in readme
    assert "<!--" not in readme
    instructors = [word for word in ("labkit grade", "Dask", "LMS", "hidden-check", "INSTRUCTOR_ONLY",
                                     "labkit release", "gradebook") if word in readme]
    assert instructors == [], f"the students' README speaks of the instructor's side: {instructors}"

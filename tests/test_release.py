"""labkit release: the students' copy holds no solution and no hidden check,
refuses broken markers; the instructor's notebooks pass every check and the
released ones run to the end and fail exactly their exercises' visible checks."""

import json
import os
import signal
import subprocess
from pathlib import Path

import nbformat
import pytest

from labkit import paths
from labkit.instructor import release
from labkit.errors import LabError
from test_notebooks import PAPERMILL, QUICK_RUN_LIMIT_S, _kernel_env

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


def test_a_notebook_with_an_unbalanced_marker_stops_the_release_before_writing(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("# BEGIN SOLUTION\nanswer = 42"))
    nbformat.write(nb, notebooks / "bad.ipynb")
    with pytest.raises(LabError, match=r"bad cell 0 .*BEGIN SOLUTION is never ended"):
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


def test_no_solution_or_hidden_check_is_in_any_released_file(released):
    out, written = released
    solutions, hidden_names = [], []
    for path in INSTRUCTOR:
        nb = nbformat.read(path, as_version=4)
        hidden_names += release.hidden_check_names(nb)
        solutions += release.release_notebook(nb, path.stem)[1]
    assert solutions and hidden_names, "the lab's notebooks should hold exercises with solutions and hidden checks"
    texts = {path: path.read_text() for path in out.rglob("*") if path.is_file()}
    for path, text in texts.items():
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, path
        for name in hidden_names:
            assert name not in text, f"hidden check {name} in {path}"
        as_json_strings = {json.dumps(line)[1:-1] for s in solutions for line in s.text.split("\n")
                           if len(line.strip()) > 12}  # short lines (a brace, `return n;`) occur anywhere
        leaked = [line for line in as_json_strings if line.strip() in text]
        assert not leaked, f"solution lines in {path}: {leaked[:3]}"


# ---------------------------------------------------------------------------
# running them: instructor passes everything, students fail exactly the exercises


def run_with_checks(source: Path, tmp_path: Path) -> list[dict]:
    """papermill `source` (quick profile) in its own directory; the check records it wrote."""
    workdir = tmp_path / source.stem
    workdir.mkdir(parents=True)
    checks = workdir / "checks.jsonl"
    env = dict(_kernel_env(tmp_path), LABKIT_CHECKS_FILE=str(checks),
               LABKIT_RESULTS=str(workdir / "results.jsonl"))
    run = subprocess.Popen([str(PAPERMILL), str(source), str(workdir / "out.ipynb"), "-p", "profile", "quick",
                            "-k", "labkit", "--cwd", str(workdir)], cwd=workdir, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = run.communicate(timeout=QUICK_RUN_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        pytest.fail(f"{source.name} took over {QUICK_RUN_LIMIT_S} s with -p profile quick")
    assert run.returncode == 0, output.decode(errors="replace")[-4000:]
    return [json.loads(line) for line in checks.read_text().splitlines()] if checks.exists() else []


def exercise_notebooks():
    """The notebooks with checks: every lab notebook has some, so an empty list means
    this finder no longer matches how notebooks make their Checker (and must fail)."""
    found = [p for p in INSTRUCTOR if "checks.Checker(" in p.read_text()]
    assert len(found) == len(INSTRUCTOR) >= 3, f"notebooks with a checks.Checker: {[p.name for p in found]}"
    return found


@pytest.mark.timeout(2 * QUICK_RUN_LIMIT_S + 60)
@pytest.mark.parametrize("path", exercise_notebooks(), ids=lambda p: p.name)
def test_instructor_passes_every_check_and_student_fails_exactly_the_exercises(path, tmp_path, released):
    teacher = run_with_checks(path, tmp_path / "teacher")
    assert teacher, f"{path.name} recorded no check"
    # every check passes; a written answer passes its effort check and is recorded for hand marking
    assert [(r["check"], r["status"], r["message"][:300]) for r in teacher
            if r["status"] != ("recorded" if r.get("by_hand") else "passed")] == []
    assert all(r["points"] == (0 if r.get("by_hand") else r["max_points"]) for r in teacher)

    student = run_with_checks(released[0] / "notebooks" / path.name, tmp_path / "student")
    visible = [r["check"] for r in teacher if not r["hidden"]]
    assert sorted(r["check"] for r in student) == sorted(visible), "the student copy runs the visible checks only"
    not_failed = [(r["check"], r["status"], r["message"][:300]) for r in student if r["status"] != "failed"]
    assert not_failed == [], "every visible check of an unsolved exercise must fail (not pass, not error)"


def test_labkit_release_command_writes_the_students_copy(tmp_path):
    import sys

    out = tmp_path / "students"
    done = subprocess.run([sys.executable, "-m", "labkit", "release", "--out", str(out)], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (out / "notebooks").iterdir()) == [p.name for p in INSTRUCTOR]
    assert f"students' copy in {out}" in done.stdout

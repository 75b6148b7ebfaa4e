"""`labkit autograder`: the lab's grading on Gradescope and PrairieLearn.

The packages are built and read back (the zip's entry points, the PrairieLearn folder's
Dockerfile, entrypoint and grading options); then each platform's entry point runs in a
simulated layout (/autograder/... and /grade/... under a temporary root, as root, the
platform's user) on a small class: its results.json must validate against the platform's
published format (written below from gradescope/autograder_samples docs/specs.md and
PrairieLearn's docs/externalGrading.md), and give each check the points `labkit grade` gives
the same submission.  A hostile submission tries to write its own results.json; a
submission with no notebook, or a link where the notebook should be, is refused as such."""

import json
import os
import stat
import time
import zipfile
from pathlib import Path

import jsonschema
import nbformat
import pytest

from labkit import paths
from labkit.instructor.autograder import package, platforms, entry as autograder
from labkit.instructor.course import class_grades
from labkit.instructor.release import edition as release
from hostile_cells import RESULTS, forge_results
from test_grade_dask import NOTEBOOK, instructor_notebook

NOTEBOOK_01 = "01_proc_service"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="grading runs as root"),
              pytest.mark.timeout(600)]

# Gradescope's results.json (specs.md, "Output format"): a score at the top or on every test.
VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
GRADESCOPE_SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "number"}, "execution_time": {"type": "number"}, "output": {"type": "string"},
        "visibility": VISIBILITY, "stdout_visibility": VISIBILITY, "extra_data": {"type": "object"},
        "tests": {"type": "array", "items": {"type": "object", "properties": {
            "score": {"type": "number"}, "max_score": {"type": "number"}, "name": {"type": "string"},
            "number": {"type": "string"}, "output": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "visibility": VISIBILITY, "status": {"enum": ["passed", "failed"]}, "extra_data": {"type": "object"}},
            "required": ["score"]}},
        # specs.md and leaderboards.md: a name, a number or a string, "desc" unless told
        "leaderboard": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "value": {"type": ["number", "string"]}, "order": {"enum": ["asc", "desc"]}},
            "required": ["name", "value"]}},
    },
    "anyOf": [{"required": ["score"]}, {"required": ["tests"]}],
}
# PrairieLearn's (externalGrading.md, "Grading results"): gradable ones need a score in [0, 1].
PRAIRIELEARN_SCHEMA = {
    "type": "object",
    "properties": {
        "gradable": {"type": "boolean"}, "score": {"type": "number", "minimum": 0, "maximum": 1},
        "message": {"type": "string"}, "output": {"type": "string"},
        "format_errors": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "tests": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "description": {"type": "string"}, "points": {"type": "number"},
            "max_points": {"type": "number"}, "message": {"type": "string"}, "output": {"type": "string"}},
            "required": ["name"]}},
    },
    "if": {"properties": {"gradable": {"const": False}}, "required": ["gradable"]},
    "then": {"required": ["format_errors"]},
    "else": {"required": ["score"]},
}
SCHEMAS = {"gradescope": GRADESCOPE_SCHEMA, "prairielearn": PRAIRIELEARN_SCHEMA}
TIMEOUT_S = 30


def hostile(target: Path) -> str:
    """A student's answer cell that writes a perfect results.json where the platform reads it,
    and forges passed check lines, then answers wrong."""
    return forge_results([str(target), *RESULTS]) + "answer = 41\n"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A lab with one graded notebook (tiny_quiz: 2 points visible, 1 hidden), and the
    students' notebooks: correct, wrong, hanging, and hostile (aimed at each platform's
    results under its own simulated root)."""
    root = tmp_path_factory.mktemp("autograder")
    lab = root / "lab"
    (lab / "notebooks").mkdir(parents=True)
    teacher = instructor_notebook()
    nbformat.write(teacher, lab / "notebooks" / f"{NOTEBOOK}.ipynb")
    (lab / autograder.CONFIG).write_text(json.dumps({"notebooks": [NOTEBOOK], "timeout_s": TIMEOUT_S}))
    student, _ = release.release_notebook(nbformat.from_dict(teacher), NOTEBOOK)
    answers = {"correct": "answer = 42", "wrong": "answer = 41",
               "hanging": "import time\ntime.sleep(600)\nanswer = 42"}
    for platform in platforms.PLATFORMS.values():
        answers[f"hostile_{platform.name}"] = hostile(root / platform.name / "hostile" / platform.results)
    notebooks = {}
    for name, source in answers.items():
        nb = nbformat.from_dict(student)
        nb.cells[2].source = source
        notebooks[name] = nb
        (root / "class" / name).mkdir(parents=True)
        nbformat.write(nb, root / "class" / name / f"{NOTEBOOK}.ipynb")
    started = time.monotonic()
    graded = [n for n in notebooks if n != "hanging"]
    for name in set(notebooks) - set(graded):
        os.rename(root / "class" / name, root / f"held-{name}")
    book, _ = class_grades.grade(root / "class", root / "graded", instructor_dir=lab / "notebooks", jobs=2,
                          timeout_s=TIMEOUT_S, progress=False)
    per_submission = (time.monotonic() - started) / len(graded)
    return {"root": root, "lab": lab, "notebooks": notebooks, "book": book, "grade_s": per_submission}


def submit(course, platform: str, student: str, nb=None) -> Path:
    """The platform's layout under a root of this student's: the notebook where the student's
    upload puts it; the root and the results folder root's alone, as in the container."""
    layout = platforms.PLATFORMS[platform]
    root = course["root"] / platform / student
    (root / layout.submission).mkdir(parents=True)
    if nb is not None:
        nbformat.write(nb, root / layout.submission / f"{NOTEBOOK}.ipynb")
    return root


def points_by_check(rows) -> dict:
    return {row["check"]: float(row["points"]) for row in rows}


def platform_points(platform: str, results: dict) -> list[float]:
    return [t["score"] if platform == "gradescope" else t["points"] for t in results["tests"]]


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
@pytest.mark.parametrize("student", ["correct", "wrong"])
def test_a_submission_gets_the_points_labkit_grade_gives_it(course, platform, student):
    root = submit(course, platform, student, course["notebooks"][student])
    started = time.monotonic()
    results = autograder.run(platform, root, course["lab"])
    took = time.monotonic() - started
    print(f"{platform} {student}: {took:.1f} s; labkit grade: {course['grade_s']:.1f} s a submission")
    written = json.loads((root / platforms.PLATFORMS[platform].results).read_text())
    assert written == results
    jsonschema.validate(written, SCHEMAS[platform])
    book = course["book"][course["book"]["student"] == student].to_dict("records")
    assert platform_points(platform, written) == [float(row["points"]) for row in book]
    expected = {"correct": {"answer_is_42": 2.0, "answer_is_even": 1.0},
                "wrong": {"answer_is_42": 0.0, "answer_is_even": 0.0}}[student]
    assert points_by_check(book) == expected
    if platform == "gradescope":
        assert written["score"] == sum(expected.values())
        assert [t["visibility"] for t in written["tests"]] == ["visible", "after_published"]
        assert [t["max_score"] for t in written["tests"]] == [2.0, 1.0]
    else:
        assert written["gradable"] is True and written["score"] == pytest.approx(sum(expected.values()) / 3)
        hidden = written["tests"][1]
        assert hidden["name"] == f"{NOTEBOOK}: hidden check 1" and "answer_is_even" not in json.dumps(hidden)
    assert stat.S_IMODE((root / platforms.PLATFORMS[platform].results).parent.stat().st_mode) == 0o755


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_a_hostile_submission_cannot_write_its_own_results(course, platform):
    student = f"hostile_{platform}"
    root = submit(course, platform, "hostile", course["notebooks"][student])
    results = autograder.run(platform, root, course["lab"])
    written = json.loads((root / platforms.PLATFORMS[platform].results).read_text())
    assert written == results and "999" not in json.dumps(written)
    assert platform_points(platform, written) == [0.0, 0.0]
    book = course["book"][course["book"]["student"] == student]
    assert list(book["points"]) == [0.0, 0.0]  # labkit grade gave it the same


def test_a_hanging_notebook_is_stopped_and_scored_as_labkit_grade_scores_a_timeout(course):
    root = submit(course, "prairielearn", "hanging", course["notebooks"]["hanging"])
    results = autograder.run("prairielearn", root, course["lab"])
    jsonschema.validate(results, PRAIRIELEARN_SCHEMA)
    assert results["gradable"] is True and results["score"] == 0
    assert all(t["points"] == 0 for t in results["tests"])
    assert "timeout" in results["tests"][0]["output"].lower() or "stopped" in results["tests"][0]["output"]


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_no_notebook_or_a_link_in_its_place_is_not_graded_and_says_what_to_upload(course, platform, tmp_path):
    root = submit(course, platform, "nothing")
    (root / platforms.PLATFORMS[platform].submission / f"{NOTEBOOK}.ipynb").symlink_to(
        course["lab"] / "notebooks" / f"{NOTEBOOK}.ipynb")  # the instructor's own, by a link
    results = autograder.run(platform, root, course["lab"])
    jsonschema.validate(results, SCHEMAS[platform])
    said = json.dumps(results)
    assert f"upload {NOTEBOOK}.ipynb" in said
    if platform == "prairielearn":
        assert results["gradable"] is False  # no attempt lost
    else:
        assert results["score"] == 0 and results["tests"] == []
    # a file by the notebook's name that is no notebook: graded as labkit grade grades it (each
    # check an error saying why); on PrairieLearn not gradable, with that reason
    root = submit(course, platform, "broken")
    (root / platforms.PLATFORMS[platform].submission / f"{NOTEBOOK}.ipynb").write_text('{"cells": [')
    results = autograder.run(platform, root, course["lab"])
    jsonschema.validate(results, SCHEMAS[platform])
    if platform == "prairielearn":
        assert results["gradable"] is False and "not valid notebook JSON" in results["format_errors"][0]
    else:
        assert results["score"] == 0 and all("not valid notebook JSON" in t["output"] for t in results["tests"])


def test_a_row_counts_as_labkit_says_hand_marked_and_unmeasurable_never_failed():
    rows = [{"notebook": "06", "check": "why", "status": "by hand", "points": 0, "max_points": 2, "hidden": False,
             "message": "your answer: ..."},
            {"notebook": "06", "check": "counters", "status": "error", "points": 0, "max_points": 1, "hidden": False,
             "message": "not measurable here: perf is not usable"},
            {"notebook": "06", "check": "knee", "status": "failed", "points": 0, "max_points": 3, "hidden": True,
             "message": "the knee is at 2000/s, not 6000"}]
    unanswered = {**rows[0], "check": "how", "status": "failed", "message": "answer has 3 words", "by_hand": True}
    scope = platforms.gradescope_results([*rows, unanswered], "", 1.0)
    assert [(t["name"], t["score"], t["max_score"], t.get("status")) for t in scope["tests"]] == [
        ("06: counters (not measurable here)", 0.0, 0.0, None),
        ("06: knee", 0.0, 3.0, "failed")]
    # written answers, answered or not, are no tests: listed for the person who marks them
    assert "written answers, to be marked by hand (not counted in this score): 2, up to 4 points" in scope["output"]
    assert "06: why (2 points): your answer: ..." in scope["output"]
    learn = platforms.prairielearn_results([*rows, unanswered], "", show_hidden=False)
    assert [t["max_points"] for t in learn["tests"]] == [0.0, 3.0] and learn["score"] == 0
    assert learn["tests"][1]["message"] == "a hidden check: its name and message are not shown"
    assert "2000/s" not in json.dumps(learn) and "2000/s" in json.dumps(platforms.prairielearn_results(rows, "", True))


def test_every_text_is_cut_to_the_platforms_limits_and_says_so():
    """A 1.2 MB message (a check's output, an answer) makes no results.json over PrairieLearn's 1 MB."""
    huge = "y" * 1_200_000
    rows = [{"notebook": "01", "check": f"c{i}", "status": "failed", "points": 0, "max_points": 1, "hidden": False,
             "message": huge} for i in range(3)]
    rows.append({"notebook": "01", "check": "q1", "status": "by hand", "points": 0, "max_points": 2,
                 "hidden": False, "message": "answer: " + huge})
    learn = platforms.prairielearn_results(rows, "graded by labkit: 01\n" + huge)
    assert len(json.dumps(learn).encode()) <= platforms.MAX_RESULTS_BYTES
    assert all("cut by the grader" in t["output"] for t in learn["tests"]) and "cut by the grader" in learn["output"]
    scope = platforms.gradescope_results(rows, huge, 1.0)
    assert all(len(t["output"]) <= platforms.MAX_TEST_TEXT for t in scope["tests"])
    assert len(scope["output"]) <= platforms.MAX_OUTPUT_TEXT and "more characters]" in scope["output"]


def test_the_gradescope_zip_holds_its_entry_points_and_the_lab(tmp_path):
    out = package.gradescope(tmp_path / "autograder.zip")
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        setup, run_it = archive.read("setup.sh").decode(), archive.read("run_autograder").decode()
        config = json.loads(archive.read("lab/autograder.json"))
    assert {"setup.sh", "run_autograder", "lab/Makefile", "lab/requirements.txt", "lab/scripts/setup-system.sh",
            "lab/notebooks/01_proc_service.ipynb", "lab/labkit/__init__.py"} <= names
    assert not any(n.startswith(("lab/.venv/", "lab/build/")) for n in names)
    assert all(stat.S_IMODE(modes[n]) == 0o755 for n in ("setup.sh", "run_autograder"))
    assert setup.startswith("#!/usr/bin/env bash") and "make setup build" in setup
    assert "labkit autograder run gradescope" in run_it
    assert config["notebooks"][0] == "00_setup" and "07_your_server" in config["notebooks"]


def test_the_prairielearn_folder_holds_its_image_entrypoint_and_options(tmp_path):
    out = package.prairielearn(tmp_path / "pl")
    options = json.loads((out / "info-external-grading.json").read_text())["externalGradingOptions"]
    assert options["enabled"] is True and options["entrypoint"] == "/lab/run-grader"
    assert options["timeout"] <= 600 and options["enableNetworking"] is False
    assert os.access(out / "lab" / "run-grader", os.X_OK)
    assert "labkit autograder run prairielearn" in (out / "lab" / "run-grader").read_text()
    assert "COPY lab /lab" in (out / "Dockerfile").read_text()
    assert (out / "lab" / "notebooks" / "07_your_server.ipynb").is_file()
    with pytest.raises(Exception, match="not empty"):
        package.prairielearn(out)


def test_prairielearns_public_image_holds_the_edition_and_a_wrong_course_folder_grades_nothing(tmp_path):
    """The image's lab is the students' edition (no hidden check, the C solutions stubbed), the
    instructor's side is the course's serverFilesCourse folder; a grading job without that folder,
    or with a file of it changed, writes nothing into the lab and says what to do."""
    import shutil

    out = package.prairielearn(tmp_path / "pl", notebooks=[NOTEBOOK_01])
    options = json.loads((out / "info-external-grading.json").read_text())["externalGradingOptions"]
    assert options["serverFilesCourse"] == [f"{package.COURSE}/"]
    lab, course = out / "lab", out / "serverFilesCourse" / package.COURSE
    for name in (f"notebooks/{NOTEBOOK_01}.ipynb", "csrc/services/procstat.c", "csrc/capstone/mine.c"):
        assert (course / name).read_bytes() == (paths.ROOT / name).read_bytes() != (lab / name).read_bytes()
    assert "hidden=True" not in (lab / "notebooks" / f"{NOTEBOOK_01}.ipynb").read_text()
    release_test = Path("tests", "instructor", "test_release.py")
    assert not (lab / release_test).exists() and (course / release_test).is_file()
    edition = (lab / "notebooks" / f"{NOTEBOOK_01}.ipynb").read_bytes()
    root = tmp_path / "root"
    (root / "grade").mkdir(parents=True)
    why = package.assemble(lab, root)
    assert why and f"/grade/serverFilesCourse/{package.COURSE} is missing" in why and "serverFilesCourse" in why
    shutil.copytree(out / "serverFilesCourse", root / package.MOUNTED)
    (root / package.MOUNTED / package.COURSE / "csrc" / "capstone" / "mine.c").write_text("/* another answer */\n")
    why = package.assemble(lab, root)
    assert why and "csrc/capstone/mine.c not the package's" in why, why
    assert stat.S_IMODE((root / package.MOUNTED).stat().st_mode) == 0o700  # hidden first, whatever follows
    assert (lab / "notebooks" / f"{NOTEBOOK_01}.ipynb").read_bytes() == edition  # nothing written


def test_the_instructors_files_are_made_roots_alone(tmp_path):
    lab = tmp_path / "lab"
    (lab / "notebooks").mkdir(parents=True)
    (lab / "notebooks" / "01.ipynb").write_text("{}")
    (lab / "labkit").mkdir()
    (lab / "labkit" / "x.py").write_text("")
    autograder.protect(lab)
    assert stat.S_IMODE((lab / "notebooks").stat().st_mode) == 0o700
    assert stat.S_IMODE((lab / "notebooks" / "01.ipynb").stat().st_mode) == 0o600
    assert stat.S_IMODE((lab / "labkit" / "x.py").stat().st_mode) & 0o004  # the code a run imports stays readable
    assert paths.ROOT not in (lab, lab.parent)


def test_the_command_inside_the_container_grades_and_makes_the_instructors_files_roots_alone(course, tmp_path):
    """`labkit autograder run gradescope --root R --lab L`, as run_autograder calls it (here on a
    submission with nothing to grade, the quickest): results written, L's notebooks root's alone."""
    import shutil
    import subprocess
    import sys

    lab = tmp_path / "lab"
    shutil.copytree(course["lab"], lab)
    os.chmod(lab / "notebooks", 0o755)
    root = submit(course, "gradescope", "by_command")
    done = subprocess.run([sys.executable, "-m", "labkit", "autograder", "run", "gradescope", "--root", str(root),
                           "--lab", str(lab)], cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = json.loads((root / platforms.GRADESCOPE.results).read_text())
    jsonschema.validate(written, GRADESCOPE_SCHEMA)
    assert written["score"] == 0 and "upload tiny_quiz.ipynb" in written["output"]
    assert stat.S_IMODE((lab / "notebooks").stat().st_mode) == 0o700
    assert stat.S_IMODE((lab / "notebooks" / f"{NOTEBOOK}.ipynb").stat().st_mode) == 0o600


def test_what_grading_takes_is_found_wherever_the_upload_put_it_and_never_through_a_link(tmp_path):
    """What grading reads (the graded notebooks, the earlier ones whose C exercises the capstone
    adopts, csrc/exercises/, the capstone's csrc/servers/mine.c), from the folder a student's
    upload made (a zip's top folder), the shallowest of each; a link in their place, or in
    their path, is not taken."""
    upload = tmp_path / "submission"
    top = upload / "my-lab-main"
    (top / "csrc" / "servers").mkdir(parents=True)
    (top / "csrc" / "exercises").mkdir()
    (top / "07_your_server.ipynb").write_text("{}")
    (top / "csrc" / "servers" / "mine.c").write_text("/* mine */\n")
    (top / "csrc" / "exercises" / "procstat_parse.c").write_text("/* 1.1 */\n")
    (top / "old" / "csrc" / "servers").mkdir(parents=True)
    (top / "old" / "csrc" / "servers" / "mine.c").write_text("/* an old one, deeper */\n")
    (top / "01_proc_service.ipynb").symlink_to(paths.NOTEBOOKS / "01_proc_service.ipynb")
    (top / "04_write_strategies.ipynb").write_text("{}")  # a C exercise's: read, not graded
    (top / "05_different_hosts.ipynb").write_text("{}")   # neither graded nor read
    linked = tmp_path / "linked"
    (linked / "csrc" / "servers").mkdir(parents=True)
    (linked / "csrc" / "servers" / "mine.c").write_text("/* through a link */\n")
    (upload / "csrc").symlink_to(linked / "csrc")  # shallower, but a link
    found = autograder._class_of_one(upload, ["01_proc_service", "07_your_server"], tmp_path / "class")
    student = tmp_path / "class" / "submission"
    assert found == ["07_your_server"]
    assert (student / "csrc" / "servers" / "mine.c").read_text() == "/* mine */\n"
    assert (student / "csrc" / "exercises" / "procstat_parse.c").read_text() == "/* 1.1 */\n"
    assert sorted(p.name for p in student.iterdir()) == ["04_write_strategies.ipynb", "07_your_server.ipynb", "csrc"]


def summary(completed: float, p99: float | None, failed: int = 0) -> dict:
    """What the load generator's JSON says of one run, the parts the leaderboard reads."""
    return {"completed_rps": completed, "latency_us": {"p99": p99}, "requests_failed": failed}


@pytest.mark.parametrize("runs, kept_up, within, p99", [
    ([summary(1000, 300), summary(990, 900), summary(1001, 20_000)], True, True, 900),  # medians: one stall
    ([summary(1000, 300), summary(900, 400), summary(940, 500)], False, True, 400),     # 940 < 95% of 1,000
    ([summary(1000, 300), summary(1000, 9_000), summary(1000, 12_000)], True, False, 9_000),
    ([summary(1000, 300), summary(1000, 300), summary(1000, 300, failed=1)], False, True, 300),  # a failure
    ([summary(1000, 300), summary(1000, None), summary(1000, 300)], True, False, None),  # a run without a p99
])
def test_a_leaderboard_step_is_judged_on_its_runs_medians(runs, kept_up, within, p99):
    from labkit.instructor.autograder import leaderboard

    judged = leaderboard.step(1000, runs, target_us=1000)
    assert (judged["kept_up"], judged["within"], judged["p99_us"]) == (kept_up, within, p99)


def test_the_leaderboard_value_is_the_last_rate_before_the_first_miss_and_nothing_after_a_failure():
    from labkit.instructor.autograder import leaderboard

    def ok(rate, p99=300):
        return {"rate": rate, "completed_rps": rate, "p99_us": p99, "p99_range_us": [p99, p99],
                "kept_up": True, "within": True}

    behind = {**ok(4000), "completed_rps": 3000, "kept_up": False}
    judged = leaderboard.outcome([ok(1000), ok(2000, 500), behind], 1000)
    assert (judged["rate"], judged["p99_us"]) == (2000, 500) and "at 4,000/s it fell behind" in judged["stopped"]
    assert leaderboard.entries(judged) == [
        {"name": "requests/s kept up, p99 ≤ 1,000 µs", "value": 2000, "order": "desc"},
        {"name": "p99 there (µs)", "value": 500, "order": "asc"}]
    assert "2,000 requests/s with p99 500 µs" in leaderboard.said(judged)
    slow = {**ok(1000, 4000), "within": False}
    none = leaderboard.outcome([slow], 1000)
    assert none["rate"] is None and leaderboard.entries(none) == []  # no entry, never a zero
    assert "no entry" in leaderboard.said(none) and "4,000 µs, over the target" in leaderboard.said(none)
    exited = leaderboard.outcome([ok(1000), ok(2000)], 1000, failure="the server exited during the measurement")
    assert exited["rate"] is None and "exited" in leaderboard.said(exited)
    top = leaderboard.outcome([ok(rate) for rate in leaderboard.RATES], 1000)
    assert top["rate"] == leaderboard.RATES[-1] and "every rate offered" in top["stopped"]


def test_a_server_that_does_not_build_or_serve_gets_no_leaderboard_entry_and_says_why():
    """Measured for real: a text gcc refuses, and the released skeleton (it exits at its first
    client, saying what is not written yet)."""
    from capstone_servers import skeleton
    from labkit.instructor.autograder import leaderboard

    broken = leaderboard.measure("int main(void) { return 0 }\n", 1000)
    assert "does not compile" in broken["error"] and leaderboard.entries(broken) == []
    assert leaderboard.said(broken).startswith("leaderboard: not measured (your server does not compile")
    stub = leaderboard.measure(skeleton(), 1000)
    assert stub["rate"] is None and leaderboard.entries(stub) == [] and len(stub["steps"]) == 1
    assert "exited" in stub["stopped"] and "not written yet" in stub["stopped"], stub["stopped"]


@pytest.mark.parametrize("platform", ["gradescope", "prairielearn"])
def test_a_notebook_whose_turn_comes_too_late_is_not_run_and_the_results_are_written(course, platform, tmp_path):
    """The platform kills the grading at autograder.json's platform_timeout_s: with too little of
    it left for a notebook (here 70 s, less the grader's reserve), the notebook is not run, each
    of its checks says why, and results.json is written at once."""
    import shutil

    lab = tmp_path / "lab"
    shutil.copytree(course["lab"], lab)
    config = json.loads((lab / autograder.CONFIG).read_text())
    (lab / autograder.CONFIG).write_text(json.dumps({**config, "platform_timeout_s": autograder.RESERVE_S + 10}))
    root = submit(course, platform, f"late_{platform}", course["notebooks"]["correct"])
    started = time.monotonic()
    results = autograder.run(platform, root, lab)
    assert time.monotonic() - started < 60
    jsonschema.validate(results, SCHEMAS[platform])
    assert json.loads((root / platforms.PLATFORMS[platform].results).read_text()) == results
    assert platform_points(platform, results) == [0.0, 0.0]
    assert all("ran out before this notebook's turn" in t["output"] for t in results["tests"] if t["output"])

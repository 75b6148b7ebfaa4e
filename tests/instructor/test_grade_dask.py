"""Grading a class on a Dask cluster (labkit.instructor.cluster.tasks): a real `labkit scheduler`
and two `labkit worker` processes on 127.0.0.1, speaking mutual TLS with certificates from
`labkit cluster init`, grade the same class as local grading, with the same gradebook; a
worker killed with SIGKILL mid-task still gives a complete one, and says so; a worker of
another commit refuses with the reason; grading again grades nothing new; no process of
the test is left.  Who may not use the cluster is tested in test_cluster_security.py.

The class is a tiny instructor notebook (two checks, one hidden), so the test is about
the cluster, not about how long a notebook takes: one correct student, one wrong, one
that hangs, one that forks without end."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pandas as pd
import psutil
import pytest

from labkit import paths
from labkit.instructor.cluster import certs, tasks as cluster
from labkit.instructor.course import class_grades
from labkit.instructor.release import edition as release
from labkit.instructor.sandbox import outside as sandbox
from test_grade import FORK_BOMB, processes_of_grading_uids
import waits
from waits import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="grading workers run as root"),
              pytest.mark.timeout(600)]

NOTEBOOK = "tiny_quiz"
# Per notebook: the hanging student's run is stopped after this.  The fork bomb must be caught
# before it, locally and on the cluster alike: its kernel started, then the bomb crowding the
# process limit for over a second (watch.Crowding).  How fast a bomb forks depends on the CPU it
# gets: with the default limit of 4,096 it took over 30 s on 2 cores shared with three other
# test workers.  This class is about the cluster, not the bomb (test_grade.py
# grades one at the default limit), so its runs have a limit of BOMB_LIMIT processes and
# threads, which the bomb reaches in a second; the cluster must keep the grader's limits.
TIMEOUT_S = 45
BOMB_LIMIT = 128


def instructor_notebook():
    cell = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "labkit", "display_name": "Python (labkit)",
                                                           "language": "python"}})
    nb.cells = [
        cell('profile = "full"', metadata={"tags": ["parameters"]}),
        cell(f'from labkit.exercises import checks\nex = checks.Checker(notebook="{NOTEBOOK}")'),
        cell("# BEGIN SOLUTION\n# STUB: answer = None\nanswer = 6 * 7\n# END SOLUTION"),
        cell('@ex.check("answer_is_42", points=2)\ndef _():\n    assert answer == 42, "six times seven"'),
        cell('@ex.check("answer_is_even", points=1, hidden=True)\ndef _():\n    assert answer % 2 == 0',
             metadata={"tags": ["hidden-check"]}),
        cell("ex.summary();"),
    ]
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return make_course(tmp_path_factory.mktemp("dask-course"))


def make_course(root: Path) -> Path:
    """The instructor's folder and a class of four under `root`: correct, wrong, hanging, forking
    (bench/cluster_tls.py grades the same class)."""
    teacher = instructor_notebook()
    (root / "instructor").mkdir()
    nbformat.write(teacher, root / "instructor" / f"{NOTEBOOK}.ipynb")
    student, _ = release.release_notebook(nbformat.from_dict(teacher), NOTEBOOK)
    answers = {"correct": "answer = 42", "wrong": "answer = 41",
               "hanging": "import time\ntime.sleep(600)\nanswer = 42", "forking": FORK_BOMB}
    for name, source in answers.items():
        nb = nbformat.from_dict(student)
        nb.cells[2].source = source
        (root / "class" / name).mkdir(parents=True)
        nbformat.write(nb, root / "class" / name / f"{NOTEBOOK}.ipynb")
    return root


class Cluster:
    """`labkit scheduler` and grading workers on 127.0.0.1, each in a process group of its own,
    with the course's certificates in `certs` (labkit cluster init)."""

    def __init__(self, folder: Path, workers: int, certs: Path, worker_env=None, wait: bool = True):
        self.folder = folder
        self.certs = certs
        folder.mkdir(parents=True, exist_ok=True)
        self.processes: list[subprocess.Popen] = []
        address_file = folder / "scheduler.json"
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", "labkit", "scheduler", "--host", "127.0.0.1", "--port", "0", "--certs",
             str(certs), "--scheduler-file", str(address_file)], cwd=paths.ROOT, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=open(folder / "scheduler.log", "w")))
        waits.wait_for(address_file.exists, within=30, what=f"the scheduler's {address_file.name}", every=0.1)
        import json

        self.address = json.loads(address_file.read_text())["address"]
        self.workers = [self.add_worker(f"w{i}", worker_env) for i in range(workers)]
        if wait:  # else the caller calls wait_for, having done something else while they start
            self.wait_for(workers)

    def add_worker(self, name, env=None) -> subprocess.Popen:
        worker = subprocess.Popen([sys.executable, "-m", "labkit", "worker", self.address, "--name", name,
                                   "--certs", str(self.certs)],
                                  cwd=paths.ROOT, env=dict(os.environ, **(env or {})), start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=open(self.folder / f"{name}.log", "w"))
        self.processes.append(worker)
        return worker

    def wait_for(self, count: int) -> None:
        client = cluster.connect(self.address, self.certs)
        try:
            client.wait_for_workers(count, timeout=60)
        finally:
            client.close()

    def alive(self) -> bool:
        return all(process.poll() is None for process in self.processes)

    def worker_addresses(self) -> list[str]:
        client = cluster.connect(self.address, self.certs)
        try:
            return list(client.scheduler_info()["workers"])
        finally:
            client.close()

    def kill_group(self, process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def stop(self) -> None:
        for process in reversed(self.processes):
            self.kill_group(process)


@pytest.fixture(scope="module")
def course_certs(tmp_path_factory):
    return certs.init(tmp_path_factory.mktemp("certs") / "cluster", course="test course")


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory, course_certs):
    running = Cluster(tmp_path_factory.mktemp("dask"), workers=2, certs=course_certs)
    yield running
    running.stop()


def grade_with(course, out, **options):
    return class_grades.grade(course / "class", out, notebooks=[NOTEBOOK], instructor_dir=course / "instructor",
                       timeout_s=TIMEOUT_S, profile=None, progress=False,
                       limits=sandbox.Limits(processes=BOMB_LIMIT), **options)


def comparable(book: pd.DataFrame) -> list[tuple]:
    return sorted(book[["student", "notebook", "check", "points", "max_points", "status", "hidden"]]
                  .itertuples(index=False, name=None))


@pytest.fixture(scope="module")
def graded_both_ways(course, dask_cluster, course_certs, tmp_path_factory):
    """The class graded locally and on the cluster at the same time: each waits out the hanging
    student's TIMEOUT_S, so one after the other the fixture would take twice that (about 119 s
    of the parallel phase); side by side their runs take separate grading uids (uids.py's leases)."""
    from concurrent.futures import ThreadPoolExecutor

    out = tmp_path_factory.mktemp("graded")

    def timed(**options):
        started = time.monotonic()
        book, text = grade_with(course, **options)
        return book, text, time.monotonic() - started

    with ThreadPoolExecutor(2) as both:
        local = both.submit(timed, out=out / "local", jobs=2)
        remote = both.submit(timed, out=out / "dask", scheduler=dask_cluster.address, certs=course_certs)
        (local, _, local_s), (remote, text, dask_s) = local.result(), remote.result()
    return {"local": local, "dask": remote, "text": text, "out": out, "local_s": local_s, "cluster": dask_cluster,
            "dask_s": dask_s}


def test_the_cluster_writes_the_gradebook_local_grading_writes(graded_both_ways):
    local, remote = graded_both_ways["local"], graded_both_ways["dask"]
    assert comparable(remote) == comparable(local)
    by = {(r.student, r.check): r.status for r in remote.itertuples()}
    assert by[("correct", "answer_is_42")] == by[("correct", "answer_is_even")] == "passed"
    assert by[("wrong", "answer_is_42")] == by[("wrong", "answer_is_even")] == "failed"
    assert by[("hanging", "answer_is_42")] == "timeout"
    assert by[("forking", "answer_is_42")] == "error"
    for book in (local, remote):  # stopped as a bomb at the grader's limit, on the cluster too
        message = book[book["student"] == "forking"]["message"].iloc[0]
        assert "a fork bomb?" in message and f"(limit {BOMB_LIMIT})" in message, message
    out = graded_both_ways["out"] / "dask"
    assert (out / "feedback" / "correct.html").is_file()
    assert (out / "executed" / "correct" / f"{NOTEBOOK}.ipynb").is_file()
    assert "on the Dask cluster at tls://127.0.0.1:" in graded_both_ways["text"]
    # the gate let through everything grading needs: nothing a scheduler or worker did was refused
    logs = "".join(log.read_text() for log in graded_both_ways["cluster"].folder.glob("*.log"))
    assert "labkit gate on the scheduler" in logs and "labkit gate on the worker" in logs
    assert "refused" not in logs
    print(f"4 notebooks, graded side by side: local with 2 jobs {graded_both_ways['local_s']:.1f} s, "
          f"Dask with 2 workers {graded_both_ways['dask_s']:.1f} s")


def test_grading_again_grades_nothing_new_and_a_changed_submission_again(graded_both_ways, course, dask_cluster,
                                                                         course_certs, capfd):
    out = graded_both_ways["out"] / "dask"
    before = (out / "graded.jsonl").read_text().count("\n")
    again, _ = grade_with(course, out, scheduler=dask_cluster.address, certs=course_certs)
    assert comparable(again) == comparable(graded_both_ways["dask"])
    assert (out / "graded.jsonl").read_text().count("\n") == before  # nothing was sent
    assert "4 notebook(s) graded in an earlier run and unchanged: kept" in capfd.readouterr().err
    wrong = course / "class" / "wrong" / f"{NOTEBOOK}.ipynb"
    nb = nbformat.read(wrong, as_version=4)
    nb.cells[2].source = "answer = 42"
    nbformat.write(nb, wrong)
    regraded, _ = grade_with(course, out, scheduler=dask_cluster.address, certs=course_certs)
    assert (out / "graded.jsonl").read_text().count("\n") == before + 1  # only the changed one
    assert set(regraded[regraded["student"] == "wrong"]["status"]) == {"passed"}


# The hanging student's limit in the test that kills a worker under it: the first run is
# killed as soon as its worker starts on it (in the sandbox's check of the grading uid,
# before the notebook's time starts to count); the second ends in a timeout, however short.
KILLED_TIMEOUT_S = 3


def test_a_worker_killed_mid_task_still_gives_a_complete_gradebook(course, course_certs, tmp_path):
    # two workers from the start (they start side by side, and beside the grader): the one
    # given the task is killed, the other is already there to run it again
    running = Cluster(tmp_path / "cluster", workers=2, certs=course_certs, wait=False)
    try:
        hanging = tmp_path / "one"
        (hanging / "hanging").mkdir(parents=True)
        (hanging / "hanging" / f"{NOTEBOOK}.ipynb").write_bytes(
            (course / "class" / "hanging" / f"{NOTEBOOK}.ipynb").read_bytes())
        grader = subprocess.Popen(
            [sys.executable, "-c", "import sys; from labkit.instructor.course import class_grades; "
             f"class_grades.grade(sys.argv[1], sys.argv[2], notebooks=['{NOTEBOOK}'], instructor_dir=sys.argv[3], "
             f"timeout_s={KILLED_TIMEOUT_S}, profile=None, progress=False, scheduler=sys.argv[4], "
             "certs=sys.argv[5])",
             str(hanging), str(tmp_path / "out"), str(course / "instructor"), running.address, str(course_certs)],
            cwd=paths.ROOT, stderr=subprocess.PIPE, text=True)
        running.wait_for(2)
        deadline = time.monotonic() + 60
        grading = []
        while time.monotonic() < deadline and not grading and grader.poll() is None:
            grading = [worker for worker in running.workers if _runs_a_notebook(worker.pid)]
            time.sleep(0.1)
        assert grading, "no worker ever started the notebook"
        running.kill_group(grading[0])  # kill -9, mid-task
        _, err = grader.communicate(timeout=240)
        assert grader.returncode == 0, err[-2000:]
        book = pd.read_csv(tmp_path / "out" / "gradebook.csv")
        assert sorted(book["check"]) == ["answer_is_42", "answer_is_even"]
        assert set(book["status"]) == {"timeout"}  # graded to the end on the second worker
        feedback = (tmp_path / "out" / "feedback" / "hanging.html").read_text()
        assert "stopped mid-run (Dask ran it again)" in feedback
        # the killed worker's task folder went when the next task began (its name carries the dead pid)
        left = [p.name for p in Path(tempfile.gettempdir()).glob("labkit-task-*")
                if not psutil.pid_exists(int(p.name.split("-")[2]))]
        assert left == []
    finally:
        running.stop()
    assert wait_until(lambda: processes_of_grading_uids() == [], within=1), "the killed worker's run outlived it"


def _runs_a_notebook(pid: int) -> bool:
    try:
        return any("labkit.instructor" in " ".join(child.cmdline()) or "papermill" in " ".join(child.cmdline())
                   for child in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False


def test_a_worker_of_another_commit_refuses_with_the_reason(course, course_certs, tmp_path):
    running = Cluster(tmp_path / "cluster", workers=1, certs=course_certs, worker_env={"LABKIT_COMMIT": "0000000"})
    try:
        book, _ = grade_with(course, tmp_path / "out", scheduler=running.address, certs=course_certs)
    finally:
        running.stop()
    assert set(book["status"]) == {"error"} and set(book["points"]) == {0.0}
    message = book["message"].iloc[0]
    assert "at commit 0000000" in message and cluster.lab_identity()["commit"] in message
    assert "git pull && make setup build" in message


def test_no_process_of_the_clusters_is_left(graded_both_ways, dask_cluster):
    dask_cluster.stop()

    def dask_processes():
        return [p for p in psutil.process_iter(["cmdline"])
                if any("dask" in part and ("scheduler" in " ".join(p.info["cmdline"] or [])
                                           or "worker" in " ".join(p.info["cmdline"] or []))
                       for part in (p.info["cmdline"] or [])[:3])]

    assert wait_until(lambda: dask_processes() == [] and processes_of_grading_uids() == [], within=1), \
        (dask_processes(), processes_of_grading_uids())


def test_labkit_worker_refuses_a_machine_that_cannot_grade(monkeypatch):
    monkeypatch.setattr(cluster.os, "geteuid", lambda: 1000)
    problems = cluster.check_worker_machine()
    assert any("runs as root" in p for p in problems)

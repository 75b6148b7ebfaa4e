"""Each notebook papermilled once per test run in the quick profile, shared by every test
that reads it, in this process or in another pytest-xdist worker.

    run = quickrun.run_quick("01_proc_service.ipynb")
    run.nb, run.elapsed, run.rows, run.checks, run.exports, run.executed_path

The instructor's notebook runs as grading runs a submission (check_cells.graded_copy:
the hidden checks out, after each check's place a cell that exports what the check
reads), with its visible checks recorded.  test_notebooks reads what it showed and
measured, test_release grades every check on its exports, test_browser opens the
executed notebook in JupyterLab: one run, where each of them used to make its own.

Sharing across workers: the runs live in one folder per test run (LABKIT_TEST_RUN, set
by conftest before the workers start; removed when the run ends), and a file lock per
notebook makes the first worker that asks run it while the others wait and then read
it.  A run that failed leaves its message, so every test that reads it fails with the
same message, at once, rather than papermilling it again.

Made first in line: make test makes the runs of MADE_FIRST_IN_LINE (`python
tests/quickrun.py --ready FILE`, first in line for the CPUs as the serial phase is:
scripts/first-in-line.sh) before the parallel phase starts.  The process takes each run's
lock, writes FILE, and only then does make start the parallel phase: a worker that reads
one of those runs waits for it, rather than making it itself without the CPUs' priority
the serial phase's tests (which read its measured figures) need."""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from labkit import paths

# papermill, the kernel on Unix sockets (labkit/execute.py says why: a TCP port chosen for a
# kernel can be taken by another test's connections before the kernel binds it)
PAPERMILL = [sys.executable, "-m", "labkit.execute"]
# A hang guard, not a timing: a quick run takes about a minute at most on a quiet 2-core machine
# (make test lists each one's time among its slowest), and 07's, run in the parallel phase beside
# three other workers, or any run on a machine another suite shares, may take two or three.
QUICK_RUN_LIMIT_S = 300
RUN_ENV = "LABKIT_TEST_RUN"  # names this test run's shared folder (conftest sets it)
PLOTLY = "application/vnd.plotly.v1+json"
# The runs make test makes first in line, before the parallel phase starts (the module's
# docstring): their tests read latencies and counts, and the serial phase runs those tests.
MADE_FIRST_IN_LINE = ("04_write_strategies.ipynb", "05_different_hosts.ipynb")
# Notebooks that write C of the user's own (the capstone's csrc/servers/mine.c): run as a
# user of a shared install, with LABKIT_HOME in the run's folder (own_sources() copies there).
OWN_HOME = {"07_your_server.ipynb"}


def shared_folder() -> Path:
    """This test run's folder of notebook runs, the same in every xdist worker."""
    run = os.environ.setdefault(RUN_ENV, f"pid{os.getpid()}")
    folder = Path(tempfile.gettempdir()) / f"labkit-quick-{run}"
    folder.mkdir(exist_ok=True)
    return folder


def remove_shared_folder() -> None:
    if RUN_ENV in os.environ:
        shutil.rmtree(Path(tempfile.gettempdir()) / f"labkit-quick-{os.environ[RUN_ENV]}", ignore_errors=True)


def kernel_env(tmp_path: Path) -> dict:
    """The environment for papermill: the `labkit` kernel (made here if the setup
    has not installed it) and a temporary results file."""
    env = dict(os.environ, LABKIT_RESULTS=str(tmp_path / "results.jsonl"))
    listed = subprocess.run([str(Path(sys.executable).with_name("jupyter")), "kernelspec", "list", "--json"],
                            capture_output=True, text=True, check=True)
    if "labkit" not in json.loads(listed.stdout)["kernelspecs"]:
        spec = tmp_path / "jupyter" / "kernels" / "labkit"
        spec.mkdir(parents=True, exist_ok=True)
        spec.joinpath("kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python (labkit)", "language": "python"}))
        env["JUPYTER_PATH"] = str(tmp_path / "jupyter")
    return env


def papermill(source: Path, workdir: Path, env: dict, limit_s: float = QUICK_RUN_LIMIT_S) -> Path:
    """papermill `source` in `workdir`, quick profile, within `limit_s` (over it, its whole
    process group is killed and the test fails); the executed notebook's path."""
    out = workdir / "out.ipynb"
    # The notebook is written once, at the end, not after every cell (notebook_run's default: a
    # failed run fails the test, so nothing reads a partial one): 07's quick run used 27.8 CPU-s
    # with a save after every cell, 24.8 without (its output is 1.3 MB)
    run = subprocess.Popen([*PAPERMILL, str(source), str(out), "-p", "profile", "quick", "-k", "labkit",
                            "--cwd", str(workdir)],
                           cwd=workdir, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = run.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        raise AssertionError(f"{source.name} took over {limit_s:g} s with -p profile quick") from None
    assert run.returncode == 0, output.decode(errors="replace")[-4000:]
    return out


class QuickRun:
    """One notebook papermilled in the quick profile: the executed notebook, its wall time,
    the folder its results (results.jsonl), check records (checks.jsonl) and the values
    grading exports for the checks (exports.jsonl) went to."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.executed_path = folder / "run" / "out.ipynb"
        self.nb = nbformat.read(self.executed_path, as_version=4)
        self.elapsed = float((folder / "elapsed_s").read_text())

    def _lines(self, name: str) -> list[dict]:
        path = self.folder / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    @property
    def rows(self) -> list[dict]:
        return self._lines("results.jsonl")

    @property
    def checks(self) -> list[dict]:
        return self._lines("checks.jsonl")

    @property
    def exports(self) -> str:
        path = self.folder / "exports.jsonl"
        return path.read_text() if path.exists() else ""


def run_quick(name: str) -> QuickRun:
    """The instructor's notebook `name` papermilled once for this test run (see the module's
    docstring); the figure check and the CPUs check hold for it, or every reader fails."""
    folder = shared_folder() / Path(name).stem
    with _locked(name):  # another worker running it: wait for its run
        failed = folder / "failed"
        if failed.exists():
            pytest.fail(f"{name}'s shared quick run failed (in an earlier test):\n{failed.read_text()}",
                        pytrace=False)
        _make_unless_made(name)
    return QuickRun(folder)


def _locked(name: str):
    """The lock of `name`'s shared run, taken (an open file: closing it lets go)."""
    lock = open(shared_folder() / f"{Path(name).stem}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _make_unless_made(name: str) -> None:
    """Run `name` unless its run is there (its lock held); a failure leaves its message."""
    source = paths.NOTEBOOKS / name
    assert source.exists(), f"{source} is missing: restore it (git checkout -- notebooks/) or drop it from the list"
    folder = shared_folder() / Path(name).stem
    if (folder / "elapsed_s").exists() or (folder / "failed").exists():
        return
    try:
        _run(name, source, folder)
    except Exception as problem:
        folder.mkdir(exist_ok=True)
        (folder / "failed").write_text(str(problem))
        raise


def make_first_in_line(ready: Path, names=MADE_FIRST_IN_LINE) -> int:
    """Take the lock of each of `names`' runs, say so by writing `ready`, then make each run
    (letting go of its lock once made); the number of runs that failed (their messages go
    where each reader finds them, and to stderr)."""
    locks = [(name, _locked(name)) for name in names]
    ready.write_text(" ".join(names) + "\n")
    failed = 0
    for name, lock in locks:
        with lock:
            try:
                _make_unless_made(name)
            except Exception as problem:  # noqa: BLE001 -- recorded for its readers; the next run is made still
                failed += 1
                print(f"{name}'s quick run failed: {str(problem)[-2000:]}", file=sys.stderr)
    return failed


def _run(name: str, source: Path, folder: Path) -> None:
    from labkit import netlink
    from labkit.instructor.grading.check_cells import graded_copy

    shutil.rmtree(folder, ignore_errors=True)
    workdir = folder / "run"
    workdir.mkdir(parents=True)
    teacher = nbformat.read(source, as_version=4)
    nbformat.write(graded_copy(teacher, teacher).notebook, workdir / name)
    env = dict(kernel_env(folder), LABKIT_CHECKS_FILE=str(folder / "checks.jsonl"),
               LABKIT_EXPORTS=str(folder / "exports.jsonl"))
    if name in OWN_HOME:  # its C goes into a home of its own, never into the checkout's csrc/
        env["LABKIT_HOME"] = str(folder / "home")
    results_before = _results_in_the_checkout()
    namespaces_before = set(netlink.lab_namespaces())
    started = time.monotonic()
    executed = papermill(workdir / name, workdir, env)
    elapsed = time.monotonic() - started
    # the lab's namespaces that came during the run and outlived it: its own leftovers, or
    # those of a test that runs beside it (those go when their test ends); test_notebooks reads it
    (folder / "namespaces_left").write_text(json.dumps(sorted(set(netlink.lab_namespaces()) - namespaces_before)))
    assert _results_in_the_checkout() == results_before, f"{name} wrote into {paths.RESULTS}, not LABKIT_RESULTS"
    figures_tell_the_truth(nbformat.read(executed, as_version=4), name)
    no_client_uses_more_cpus_than_it_has(folder / "results.jsonl")
    (folder / "elapsed_s").write_text(f"{elapsed:.3f}")  # last: the run is complete


def _results_in_the_checkout() -> dict:
    """data/results/'s files and when each last changed."""
    return {p: p.stat().st_mtime_ns for p in paths.RESULTS.glob("*")} if paths.RESULTS.exists() else {}


def figures_tell_the_truth(nb, name: str) -> int:
    """labkit.figure_lint on every figure the notebook showed, and its text alternative
    (labkit.plots.alt_text) right after it; the number of figures read."""
    from labkit import figure_lint

    from labkit.plots import alt_text

    found, count = [], 0
    for index, cell in enumerate(nb.cells):
        outputs = cell.get("outputs", [])
        for at, out in enumerate(outputs):
            figure = out.get("data", {}).get(PLOTLY)
            if figure:
                count += 1
                title = figure.get("layout", {}).get("title", {})
                title = title.get("text", "") if isinstance(title, dict) else title
                found += [f"cell {index}, {str(title)[:50]!r}: {problem}" for problem in figure_lint.problems(figure)]
                after = outputs[at + 1].get("data", {}).get("text/html", "") if at + 1 < len(outputs) else ""
                if alt_text.CLASS not in after:  # every figure also as text and a table, for a screen reader
                    found.append(f"cell {index}, {str(title)[:50]!r}: no text alternative follows it")
    print(f"{name}: {count} figures checked")
    paths.BUILD.joinpath("test-artifacts").mkdir(parents=True, exist_ok=True)
    with open(paths.BUILD / "test-artifacts" / "figure-check.txt", "a") as record:  # for the report
        record.write(f"{name}: {count} figures checked, {len(found)} problem(s)\n")
    assert not found, "\n".join(found)
    return count


def no_client_uses_more_cpus_than_it_has(results: Path) -> None:
    """Every measured row: the load generator used at most the CPUs it could use."""
    if not results.exists():
        return
    for line in results.read_text().splitlines():
        row = json.loads(line)
        used, usable = row.get("client_cpu_util"), row.get("client_cpus_usable")
        if isinstance(used, (int, float)) and isinstance(usable, (int, float)) and math.isfinite(used):
            assert used <= usable * 1.05, (f"{row.get('experiment')} {row.get('model')}: the client used "
                                           f"{used:.2f} CPUs of {usable}")


if __name__ == "__main__":  # make test: python tests/quickrun.py --ready FILE
    import argparse

    parser = argparse.ArgumentParser(description="Make the quick runs of MADE_FIRST_IN_LINE in this test run's "
                                                 "folder (LABKIT_TEST_RUN), writing FILE once their locks are held.")
    parser.add_argument("--ready", type=Path, required=True, help="written once every run's lock is held")
    sys.exit(1 if make_first_in_line(parser.parse_args().ready) else 0)

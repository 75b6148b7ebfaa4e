"""`labkit grade --scheduler ADDRESS`: every student x notebook as one task on a Dask
cluster of grading machines, instead of `--jobs` threads on this one.

    grader (the instructor's machine)              workers (`labkit worker ADDRESS`, as root)
    reads the instructor's notebooks and  --task-->  checks it runs the grader's lab (version and
    each submission's bytes, sends them             commit), grades the one notebook with the same
    as one task needing one "grading"               grade.Grader as local grading (its sandbox,
    slot; writes rows as tasks finish    <--result-- its two uids) and sends back the rows, the
                                                    note, the executed notebook and the log

A worker has one grading slot (`--resources grading=1`), so two runs never measure on
one machine at once.  What a task needs travels with it; the instructor's notebooks are
written on the worker into a folder only root can read, never one a grading uid can.
A worker that dies mid-task: Dask runs the task again on another worker, and the
feedback says so (each start is logged as a Dask event); a task that fails twice (an
exception, or its workers dying) becomes that student's error rows.  The batch always
finishes, and the grader's ledger (grade.Ledger) makes a second run grade only what
has no row yet for the same submission content.

The cluster is the university's own (README: dask-jobqueue on Slurm/PBS,
dask-kubernetes); `dask scheduler` and two `labkit worker` on one machine are enough to
try it, as the tests do.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LabError

SCHEDULER_ENV = "LABKIT_DASK_SCHEDULER"
RESOURCE = "grading"
STARTED = "labkit-grading-started"  # the Dask event topic: one event per task start
DASK_INSTALL = "install the grading cluster's packages: .venv/bin/pip install dask distributed (make setup does)"


def _dask():
    try:
        import distributed
    except ImportError:
        raise LabError("Dask's distributed package is not installed", DASK_INSTALL) from None
    return distributed


# ---------------------------------------------------------------------------
# what a task carries, and what it brings back


def lab_identity() -> dict:
    """The lab a grader or a worker runs: its version and its git commit ("+dirty" when the
    checkout was changed).  LABKIT_COMMIT stands for the commit in a checkout without git."""
    from .. import __version__, system

    return {"version": __version__, "commit": os.environ.get("LABKIT_COMMIT") or system.git_commit() or "unknown"}


@dataclass
class Payload:
    student: str
    notebook: str
    files: dict[str, bytes]          # the submission: "<notebook>.ipynb" and csrc/exercises/..., or {} if none
    handed_in: bool
    instructor: dict[str, bytes]     # every instructor notebook, by name: the checks and the hidden ones
    profile: str | None
    timeout_s: float
    identity: dict                   # the grader's lab


@dataclass
class Result:
    rows: list[dict]
    note: str
    cell_errors: list[str] = field(default_factory=list)
    executed: bytes = b""
    log: bytes = b""
    worker: str = ""


class WrongLab(Exception):
    """A worker whose lab is not the grader's: it refuses the task, saying both."""


def grade_remote(payload: Payload) -> Result:
    """Run on a worker: grade one student's notebook with grade.Grader, as local grading does."""
    from . import grade, sandbox
    from .submissions import safe_name

    mine = lab_identity()
    worker = _worker_address()
    if mine != payload.identity:
        raise WrongLab(f"worker {worker} runs labkit {mine['version']} at commit {mine['commit']}, the grader "
                       f"{payload.identity['version']} at {payload.identity['commit']}: update the worker "
                       "(git pull && make setup build) or the grader, then grade again")
    _log_start(payload, worker)
    work = sandbox.owned_folder("labkit-task", Path(tempfile.gettempdir()))  # 0700: no grading uid reads it
    try:
        instructor_dir = work / "instructor"
        instructor_dir.mkdir()
        for name, data in payload.instructor.items():
            (instructor_dir / f"{name}.ipynb").write_bytes(data)
        student_dir = work / "submission" / "student"
        for relative, data in payload.files.items():
            target = student_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        submitted = student_dir / f"{payload.notebook}.ipynb" if payload.handed_in else None
        out = work / "out"
        limits = sandbox.Limits()
        limits.timeout_s = payload.timeout_s
        grader = grade.Grader(instructor_dir, out, 1, payload.profile, limits)
        try:
            outcome = grader.grade(grade.Task(payload.student, payload.notebook, submitted))
        finally:
            grader.close()
        kept = out / "executed" / safe_name(payload.student) / f"{payload.notebook}.ipynb"
        log = out / "logs" / safe_name(payload.student) / f"{payload.notebook}.log"
        return Result(rows=outcome.rows, note=outcome.note, worker=worker,
                      cell_errors=list(outcome.run.cell_errors) if outcome.run else [],
                      executed=kept.read_bytes() if kept.is_file() else b"",
                      log=log.read_bytes() if log.is_file() else b"")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _worker_address() -> str:
    try:
        return _dask().get_worker().address
    except ValueError:  # not inside a worker (called directly, as the unit tests do)
        return "this process"


def _log_start(payload: Payload, worker: str) -> None:
    try:
        _dask().get_worker().log_event(STARTED, {"student": payload.student, "notebook": payload.notebook,
                                                 "worker": worker})
    except ValueError:
        pass


# ---------------------------------------------------------------------------
# the grader's side


def payload_for(task, instructor: dict[str, bytes], profile, timeout_s: float, identity: dict) -> Payload:
    """What task (a grade.Task) sends: the submitted notebook and the student's C exercise files,
    read as local grading reads them (no link followed, sizes bounded)."""
    from .grade import EXERCISES_C
    from .submissions import Refused, read_regular

    files: dict[str, bytes] = {}
    if task.submitted is not None:
        try:
            files[f"{task.notebook}.ipynb"] = read_regular(task.submitted, what=f"{task.notebook}.ipynb")
        except Refused:
            pass  # sent without it: the worker refuses the notebook the way local grading does
        exercises = task.submitted.parent / EXERCISES_C
        if exercises.is_dir() and not exercises.is_symlink():
            for path in sorted(p for p in exercises.rglob("*") if p.is_file() and not p.is_symlink()):
                relative = path.relative_to(task.submitted.parent)
                try:
                    files[str(relative)] = read_regular(path, limit=1 << 20, what=str(relative))
                except Refused:
                    pass
    return Payload(task.student, task.notebook, files, task.submitted is not None, instructor, profile, timeout_s,
                   identity)


def connect(address: str):
    """A Dask client of the scheduler at `address`, or a LabError saying what to check."""
    distributed = _dask()
    try:
        return distributed.Client(address, timeout="15s")
    except (OSError, TimeoutError) as problem:
        raise LabError(f"no Dask scheduler answered at {address} ({problem})",
                       "start one (dask scheduler) and workers (labkit worker ADDRESS), or grade on this "
                       "machine without --scheduler") from None


def run(tasks, payloads, scheduler: str, on_result, progress: bool = True) -> dict[tuple[str, str], str]:
    """Send each task as one Dask task needing one grading slot; call on_result(task, result or
    exception) as each finishes.  Returns, per (student, notebook) graded more than once because
    a worker stopped mid-run, a sentence for its feedback."""
    distributed = _dask()
    from tqdm.auto import tqdm

    client = connect(scheduler)
    try:
        services = client.scheduler_info().get("services", {})
        dashboard = client.dashboard_link if "dashboard" in services else "none (the scheduler runs without one)"
        print(f"grading on the Dask cluster at {scheduler}; its dashboard: {dashboard}", file=sys.stderr)
        if not any(RESOURCE in (info.get("resources") or {})
                   for info in client.scheduler_info().get("workers", {}).values()):
            print(f"note: no worker has a '{RESOURCE}' slot yet; the tasks wait for one "
                  f"(start workers with: labkit worker {scheduler})", file=sys.stderr)
        futures = {client.submit(grade_remote, payload, resources={RESOURCE: 1}, retries=1, pure=False,
                                 key=f"grade-{task.student}-{task.notebook}-{os.urandom(4).hex()}"): task
                   for task, payload in zip(tasks, payloads)}
        bar = tqdm(distributed.as_completed(futures), total=len(futures), unit="notebook", desc="grading",
                   disable=not progress, file=sys.stderr)
        for future in bar:
            task = futures[future]
            try:
                on_result(task, future.result())
            except Exception as problem:  # noqa: BLE001 -- a failed task is that student's error rows
                on_result(task, problem)
        return _restarted(client.get_events(STARTED))
    finally:
        client.close()


def _restarted(events) -> dict[tuple[str, str], str]:
    """(student, notebook) -> "graded on W2 after W1 stopped mid-run", for tasks started more than once."""
    starts: dict[tuple[str, str], list[str]] = {}
    for _, event in events:
        starts.setdefault((event["student"], event["notebook"]), []).append(event["worker"])
    return {key: f"graded on {workers[-1]} after {', '.join(workers[:-1])} stopped mid-run (Dask ran it again)"
            for key, workers in starts.items() if len(workers) > 1}


# ---------------------------------------------------------------------------
# `labkit worker ADDRESS`


def worker_command(address: str, name: str | None = None) -> list[str]:
    """The `dask worker` command line of a grading worker: one thread, one grading slot."""
    dask = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if dask is None:
        raise LabError("the `dask` command is missing", DASK_INSTALL)
    command = [dask, "worker", address, "--nthreads", "1", "--nworkers", "1", "--resources", f"{RESOURCE}=1",
               "--no-dashboard"]
    return command + (["--name", name] if name else [])


def check_worker_machine() -> list[str]:
    """What this machine lacks to grade (empty: ready): root for the sandbox's uids, the built lab."""
    from .. import build, paths

    problems = []
    if os.geteuid() != 0:
        problems.append("a grading worker runs as root: each run gets uids of its own (sudo labkit worker ...)")
    if not (paths.BIN / build.LOADGEN).exists():
        problems.append("the lab is not built here: run `make setup build` in this checkout")
    try:
        _dask()
    except LabError as missing:
        problems.append(f"{missing.what}: {missing.fix}")
    return problems

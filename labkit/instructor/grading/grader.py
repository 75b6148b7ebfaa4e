"""One student's notebook graded, in two isolated runs under two uids (sandbox.py):
  1. the student's notebook runs through papermill (sandbox.run_notebook),
     with its visible check cells restored to the instructor's (instant
     feedback; they decide nothing) and, after each check's place, a cell that
     exports the values the check reads (check_cells.graded_copy);
  2. every check, visible and hidden, runs on those values in a fresh process
     under another uid (sandbox.run_checks -> labkit.instructor.grading.judge): only
     it writes results, and the hidden checks never reach the student's run.
Every check of the instructor's notebook gets one row (rows_for) -- also those
that never ran, with the reason -- so every student's points are out of the
same total.  Anything that goes wrong with one notebook becomes its error rows.

Also here: what a grade depends on (digest, for the ledger) and a student's
feedback page.  Grading a whole class, on this machine or on a Dask cluster,
is labkit.instructor.course.class_grades; a cluster's worker grades its one notebook with
this module's Grader, as local grading does (labkit.instructor.cluster.tasks).
"""

from __future__ import annotations

import html
import queue
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from ... import capstone, paths
from ...exercises import checks
from ...stubs import which_edition as editions
from ...stubs.catalog import C_EXERCISES
from ..basics.outcomes import COMPLETED, FINISHED, TIMEOUT  # TIMEOUT: also a check's status when its run was stopped
from ..basics.submissions import (CAPSTONE_NOTEBOOK, CAPSTONE_SERVER, EXERCISES_C, Refused, handed_in, read_notebook,
                                  safe_name)
from ..release import edition as release
from ..sandbox import lab_copy, outside as sandbox
from . import hand
from .check_cells import CheckSpec, check_catalog, check_groups, graded_copy
from ..sandbox.uids import UidLease

PASSED, FAILED, ERROR = checks.PASSED, checks.FAILED, checks.ERROR  # a check's own status, as it reported it
BY_HAND = hand.BY_HAND   # a written answer waiting for the instructor's mark (answers.csv)
MAX_OUTPUT_CHARS = 20_000       # one output of a kept executed notebook
MAX_KEPT_NOTEBOOK = 5 * 1024 * 1024


@dataclass
class Task:
    student: str
    notebook: str            # the notebook's name, e.g. 01_proc_service
    submitted: Path | None   # None: not handed in


@dataclass
class Outcome:
    task: Task
    rows: list[dict]
    run: "sandbox.RunResult | Recorded | None"
    note: str                # how the run ended, for the feedback page


@dataclass
class Recorded:
    """What the feedback page needs of a run that happened elsewhere (a Dask worker) or earlier
    (the ledger)."""

    cell_errors: list[str]


def digest(task: Task, instructor_bytes: bytes) -> str:
    """What a grade depends on: what was handed in (submissions.handed_in: the notebook, the
    student's C exercise files, for the capstone their server) and the instructor's notebook
    (its checks)."""
    import hashlib

    hashed = hashlib.sha256(instructor_bytes)
    if task.submitted is None:
        hashed.update(b"not submitted")
        return hashed.hexdigest()
    for name, data in sorted(handed_in(task.submitted, task.notebook).items()):
        data = data if isinstance(data, bytes) else f"refused: {data}".encode()
        hashed.update(name.encode() + b"\0" + data + b"\0")
    return hashed.hexdigest()


def _never_ran(run: sandbox.RunResult | None, reason: str | None) -> tuple[str, str]:
    if reason:
        return ERROR, reason
    if run.outcome == TIMEOUT:
        return TIMEOUT, f"did not run: {run.message}"
    if run.outcome == COMPLETED:
        return ERROR, "did not run although the notebook ran to its end: is its cell missing or changed?"
    return ERROR, f"did not run: {run.message}"


def rows_for(task: Task, catalog: list[CheckSpec], run: sandbox.RunResult | None,
             records: dict[str, dict] | None = None, reason: str | None = None) -> list[dict]:
    """One gradebook row per check of the catalog: from the checks process's `records`,
    else why it has none.  Points come from the catalog, never from a record."""
    rows = []
    for spec in catalog:
        record = (records or {}).get(spec.name)
        answer = None
        if record is not None and record.get("status") in (PASSED, FAILED, ERROR, checks.RECORDED):
            status, message = record["status"], str(record.get("message") or "")
            if spec.by_hand:  # the catalog, not the record, says an answer is marked by a person
                answer = str(record.get("answer") or "")
                status = BY_HAND if status in (PASSED, checks.RECORDED) else status
                message = (message + "\n" if message else "") + f"answer: {answer}"
        else:
            status, message = _never_ran(run, reason)
        row = {"student": task.student, "notebook": task.notebook, "check": spec.name,
               "points": spec.max_points if status == PASSED else 0.0,
               "max_points": spec.max_points, "status": status, "hidden": spec.hidden,
               "message": message}
        if answer is not None:  # for answers.csv; not a gradebook column
            row.update(answer=answer, look_for=list((record or {}).get("look_for") or []))
        rows.append(row)
    return rows


def _student_overlay(task: Task, handed: dict) -> dict[str, bytes]:
    """The C files a run compiles in place of the lab's: each file of csrc/exercises/ as the
    student handed it in (submissions.handed_in), else its released stub, written anew so make
    builds it (the run's copy of the edition's build keeps the other programs as built); and for
    the capstone's notebook the student's csrc/servers/mine.c, else the template's skeleton.  Only that
    notebook gets mine.c: a server that does not compile must not cost the student the other
    notebooks' builds.  (Every run's csrc/capstone/ holds the skeleton, never the reference:
    lab_copy.)"""
    overlay = {}
    for name, data in handed.items():
        if name.startswith(f"{EXERCISES_C}/"):
            overlay[name] = data if isinstance(data, bytes) else \
                release.strip_solutions((paths.ROOT / name).read_text(), name)[0].encode()
    template = paths.ROOT / "csrc" / capstone.TEMPLATE
    if task.notebook == CAPSTONE_NOTEBOOK and template.is_file():
        server = handed[str(CAPSTONE_SERVER)]
        overlay[str(CAPSTONE_SERVER)] = server if isinstance(server, bytes) else \
            release.strip_solutions(template.read_text(), f"csrc/{capstone.TEMPLATE}")[0].encode()
    return overlay


def _earlier_functions(handed: dict, notebook: str) -> dict[str, str]:
    """The C exercises' functions the student wrote in the notebooks before `notebook` (what
    handed_in took of the submission holds them), by function name: the run adopts each whose
    visible check passes there (lab_copy).  A function left as the release has it is not tried
    (its check would only fail, at a cost)."""
    import nbformat

    found = {}
    for exercise in C_EXERCISES:
        data = handed.get(f"{exercise.notebook}.ipynb")
        if exercise.notebook >= notebook or not isinstance(data, bytes):
            continue
        try:
            code = editions.written_in(nbformat.reads(data.decode("utf-8"), as_version=4), exercise.function)
        except Exception:  # noqa: BLE001 -- a broken earlier notebook: its function is not there
            continue
        if code is not None and code != _released_code(exercise.notebook, exercise.function):
            found[exercise.function] = code
    return found


_RELEASED: dict[tuple[str, str], str | None] = {}


def _released_code(notebook: str, function: str) -> str | None:
    """The function as the students' edition hands it out (the stub in its notebook cell)."""
    if (notebook, function) not in _RELEASED:
        import nbformat

        teacher = nbformat.read(paths.NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
        _RELEASED[(notebook, function)] = editions.written_in(release.release_notebook(teacher, notebook)[0],
                                                              function)
    return _RELEASED[(notebook, function)]


def _cut_outputs(data: bytes) -> bytes:
    """An executed notebook to keep: every output cut to MAX_OUTPUT_CHARS, the whole to MAX_KEPT_NOTEBOOK."""
    import nbformat

    try:
        nb = nbformat.reads(data.decode("utf-8", "replace"), as_version=4)
    except Exception:  # noqa: BLE001 -- a notebook cut by a kill: keep nothing of it
        return b""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for key in ("text", "evalue"):
                if isinstance(output.get(key), str) and len(output[key]) > MAX_OUTPUT_CHARS:
                    output[key] = output[key][:MAX_OUTPUT_CHARS] + "\n[... cut by the grader]"
            for mime, value in list(output.get("data", {}).items()):
                if isinstance(value, str) and len(value) > MAX_OUTPUT_CHARS:
                    output["data"][mime] = "[output cut by the grader: too long]" if mime != "text/plain" \
                        else value[:MAX_OUTPUT_CHARS] + "\n[... cut by the grader]"
    kept = nbformat.writes(nb).encode()
    return kept if len(kept) <= MAX_KEPT_NOTEBOOK else b""


class Grader:
    """Grades tasks `jobs` at a time; each run gets a slot, and as root the slot's two
    uids: one for the student's notebook, one for the checks."""

    def __init__(self, instructor_dir: Path, out_dir: Path, jobs: int, profile: str | None,
                 limits: sandbox.Limits):
        import nbformat

        from ... import build, procstat

        # The checks' process gets a copy of the instructor's build (the programs, the cffi module
        # for these compiler flags), each student's run one of the edition's (lab_copy.base): both
        # are built before the first run, once.
        build.build()
        procstat.module()
        lab_copy.base()

        self.instructor = {path.stem: nbformat.read(path, as_version=4)
                           for path in sorted(Path(instructor_dir).glob("*.ipynb"))}
        self.catalogs = {name: check_catalog(nb) for name, nb in self.instructor.items()}
        self.groups = {name: [{"checks": g.checks, "source": g.source} for g in check_groups(nb)]
                       for name, nb in self.instructor.items()}
        self.out_dir = out_dir
        self.jobs = jobs
        self.profile = profile
        self.limits = limits
        # A slot per job: as root each slot has two uids leased for this grader alone.
        self.lease = UidLease(2 * jobs) if sandbox.running_as_root() else None
        self.slots: queue.Queue[tuple[int, int | None, int | None]] = queue.Queue()
        for slot in range(jobs):
            uids = (self.lease.uids[2 * slot], self.lease.uids[2 * slot + 1]) if self.lease else (None, None)
            self.slots.put((slot, *uids))
        self.base = sandbox.make_base()
        self.counter = 0
        self.counter_lock = threading.Lock()

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
        if self.lease:
            self.lease.close()

    def grade(self, task: Task) -> Outcome:
        """Grade one task; whatever goes wrong becomes the task's error rows."""
        try:
            return self._grade(task)
        except Exception as problem:  # noqa: BLE001 -- one student must never stop the class
            reason = f"the grader could not grade this notebook ({type(problem).__name__}: {problem})"
            return Outcome(task, rows_for(task, self.catalogs[task.notebook], None, reason=reason), None, reason)

    def _grade(self, task: Task) -> Outcome:
        catalog = self.catalogs[task.notebook]
        if task.submitted is None:
            return Outcome(task, rows_for(task, catalog, None, reason="notebook not submitted"), None,
                           "notebook not submitted")
        try:
            submitted = read_notebook(task.submitted)
        except Refused as refused:
            reason = f"not graded: {refused}"
            return Outcome(task, rows_for(task, catalog, None, reason=reason), None, reason)
        prepared = graded_copy(submitted, self.instructor[task.notebook])
        handed = handed_in(task.submitted, task.notebook)  # read once: the overlay and the earlier functions
        overlay = _student_overlay(task, handed)
        earlier = _earlier_functions(handed, task.notebook)
        slot, uid, checker_uid = self.slots.get()
        with self.counter_lock:
            self.counter += 1
            index = self.counter
        try:
            return self._run(task, catalog, prepared, overlay, earlier, index, uid, checker_uid)
        finally:
            self.slots.put((slot, uid, checker_uid))

    def _run(self, task, catalog, prepared, overlay, earlier, index, uid, checker_uid) -> Outcome:
        workdir = self.base / f"run-{index}"
        checkdir = self.base / f"check-{index}"
        private = sandbox.private_folder(self.base, str(index))
        try:
            notebook = sandbox.prepare_workdir(workdir, prepared.notebook, task.notebook, overlay, uid)
            run = sandbox.run_notebook(notebook, workdir, private, profile=self.profile, limits=self.limits,
                                       uid=uid, adopt_earlier=earlier)
            adopted = lab_copy.adopted(workdir / "lab")
            shutil.rmtree(workdir, ignore_errors=True)
            sandbox.prepare_checkdir(checkdir, checker_uid, adopted)
            checked = sandbox.run_checks(task.notebook, self.groups[task.notebook], run.exports, checkdir,
                                         private, limits=self.limits, uid=checker_uid)
            rows = rows_for(task, catalog, run, checked.records)
            if checked.ended.outcome != FINISHED or checked.ended.returncode:
                for row in rows:
                    if row["status"] != PASSED and row["check"] not in checked.records:
                        row["message"] += f" ({checked.ended.message or 'the checks process ended early'})"
            self._keep(task, run, checked)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            shutil.rmtree(checkdir, ignore_errors=True)
            shutil.rmtree(private, ignore_errors=True)
        notes = [run.message] + prepared.notes
        if run.killed:
            notes.append(f"{run.killed} process(es) left running were killed")
        return Outcome(task, rows, run, "; ".join(notes))

    def _keep(self, task: Task, run: sandbox.RunResult, checked: sandbox.CheckRun) -> None:
        student = safe_name(task.student)
        executed = self.out_dir / "executed" / student
        logs = self.out_dir / "logs" / student
        executed.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        if run.executed:
            kept = _cut_outputs(run.executed.read_bytes())
            if kept:
                (executed / f"{task.notebook}.ipynb").write_bytes(kept)
        parts = [(run.log, "notebook"), (checked.log, "checks")]
        with open(logs / f"{task.notebook}.log", "wb") as log:
            for path, what in parts:
                if path.is_file():
                    log.write(f"==== {what}\n".encode())
                    log.write(path.read_bytes()[-MAX_KEPT_NOTEBOOK:])


def write_feedback(out_dir: Path, student: str, outcomes: list[Outcome]) -> Path:
    colours = {PASSED: "#1a7f37", FAILED: "#b35900", ERROR: "#cf222e", TIMEOUT: "#8250df",
               BY_HAND: "#0969da", hand.MARKED: "#1a7f37"}
    parts = [f"<!doctype html><html lang='en'><meta charset='utf-8'><title>Feedback: {html.escape(student)}</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:.3em .5em;"
             "vertical-align:top;text-align:left}pre{margin:0;white-space:pre-wrap}</style>",
             f"<h1>Feedback for {html.escape(student)}</h1>"]
    grand, grand_max = 0.0, 0.0
    for outcome in outcomes:
        got = sum(r["points"] for r in outcome.rows)
        most = sum(r["max_points"] for r in outcome.rows)
        grand, grand_max = grand + got, grand_max + most
        parts.append(f"<h2>{html.escape(outcome.task.notebook)}: {got:g} / {most:g} points</h2>"
                     f"<p>{html.escape(outcome.note)}</p>")
        if outcome.run and outcome.run.cell_errors:
            parts.append("<p>Cells that raised an error:</p><ul>" + "".join(
                f"<li><code>{html.escape(e)}</code></li>" for e in outcome.run.cell_errors) + "</ul>")
        parts.append(f"<table><caption>{html.escape(outcome.task.notebook)}: each check</caption><tr>"
                     + "".join(f"<th scope='col'>{name}</th>" for name in ("check", "status", "points", "message"))
                     + "</tr>")
        for row in outcome.rows:
            colour = colours.get(row["status"], "#000")
            kind = " (hidden)" if row["hidden"] else ""
            parts.append(f"<tr><td><code>{html.escape(row['check'])}</code>{kind}</td>"
                         f"<td style='color:{colour}'><b>{row['status']}</b></td>"
                         f"<td>{row['points']:g} / {row['max_points']:g}</td>"
                         f"<td><pre>{html.escape(row['message'])}</pre></td></tr>")
        parts.append("</table>")
    parts.append(f"<h2>Total: {grand:g} / {grand_max:g} points</h2>")
    target = out_dir / "feedback" / f"{safe_name(student)}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    return target

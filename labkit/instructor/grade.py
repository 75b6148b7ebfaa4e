"""`labkit grade`: grade a whole class's notebooks, each run isolated (sandbox.py).

    SUBMISSIONS_DIR/<student>/<notebook>.ipynb        what each student handed in
    SUBMISSIONS_DIR/<student>/csrc/exercises/...      optional: their C exercise files

For every student and graded notebook: the hidden checks are put back from
the instructor's notebook (and its visible check cells restored, so an edited
check cannot pass itself), the notebook runs through papermill in its own
sandbox, and every check of the instructor's notebook gets one row in the
gradebook -- also those that never ran, with the reason -- so every student's
points are out of the same total.

OUT_DIR/gradebook.csv        student, notebook, check, points, max_points, status, hidden, message
OUT_DIR/feedback/<s>.html    each check with its message, totals per notebook
OUT_DIR/executed/<s>/        the executed notebooks (partial when a run was stopped)
OUT_DIR/logs/<s>/            papermill's output for each run
"""

from __future__ import annotations

import ast
import concurrent.futures
import copy
import html
import json
import queue
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from . import release, sandbox
from ..errors import LabError

PASSED, FAILED, ERROR, TIMEOUT = "passed", "failed", "error", "timeout"
COLUMNS = ["student", "notebook", "check", "points", "max_points", "status", "hidden", "message"]
EXERCISES_C = Path("csrc") / "exercises"


@dataclass(frozen=True)
class CheckSpec:
    """One check as the instructor's notebook declares it."""

    name: str
    max_points: float
    hidden: bool


# ---------------------------------------------------------------------------
# the instructor's notebook: its checks, and putting them back in a submission


def _literal(node, default):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return default


def _code_of(cell) -> str:
    # IPython magics and shell escapes are not Python: blank them for the parser.
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in cell.source.splitlines())


def check_catalog(nb) -> list[CheckSpec]:
    """Every check in notebook `nb`, in order: `@ex.check("name", points=..., hidden=...)`
    and `ex.answer("name", text, points=...)` calls with a literal name."""
    specs: dict[str, CheckSpec] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(_code_of(cell))
        except SyntaxError:
            continue  # a solution stub may not parse; the instructor's notebook does
        calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute) and node.func.attr in ("check", "answer")
                        and node.args and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str)),
                       key=lambda node: (node.lineno, node.col_offset))
        for call in calls:
            keywords = {k.arg: k.value for k in call.keywords}
            # check(name, points=1, hidden=False); answer(name, text, points=1, ...)
            positional = call.args[1:] if call.func.attr == "check" else call.args[2:]
            points = _literal(keywords.get("points", positional[0] if positional else None), 1)
            hidden = bool(_literal(keywords.get("hidden", positional[1] if len(positional) > 1 else None), False))
            hidden = hidden or release.HIDDEN_TAG in cell.metadata.get("tags", [])
            name = call.args[0].value
            specs.setdefault(name, CheckSpec(name, float(points), hidden))
    return list(specs.values())


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _is_check_cell(cell) -> bool:
    """A cell holding only checks (no solution): the instructor's copy is authoritative."""
    return (cell.cell_type == "code" and "exercise" in cell.metadata.get("labkit", {})
            and ".check(" in cell.source and "BEGIN SOLUTION" not in cell.source)


def restore_checks(submitted, instructor):
    """A copy of `submitted` with the instructor's hidden-check cells put back
    after the cell they follow (metadata labkit.anchor, else the id of the
    instructor's previous cell) and its visible check cells restored by id.

    Hidden-check cells a student added are dropped; a hidden check whose
    anchor is gone goes at the end (it then reports what it finds)."""
    nb = copy.deepcopy(submitted)
    nb.cells = [cell for cell in nb.cells if release.HIDDEN_TAG not in _tags(cell)]
    originals = {cell.get("id"): cell for cell in instructor.cells if _is_check_cell(cell)}
    for cell in nb.cells:
        original = originals.get(cell.get("id"))
        if original is not None and cell.cell_type == "code":
            cell.source = original.source
    previous_id = None
    inserted_after: dict[str, int] = {}
    for cell in instructor.cells:
        if release.HIDDEN_TAG not in _tags(cell):
            previous_id = cell.get("id")
            continue
        anchor = cell.metadata.get("labkit", {}).get("anchor", previous_id)
        hidden = copy.deepcopy(cell)
        hidden.outputs, hidden.execution_count = [], None
        ids = [c.get("id") for c in nb.cells]
        if anchor in ids:
            at = ids.index(anchor) + 1 + inserted_after.get(anchor, 0)
            inserted_after[anchor] = inserted_after.get(anchor, 0) + 1
            nb.cells.insert(at, hidden)
        else:
            nb.cells.append(hidden)
    return nb


# ---------------------------------------------------------------------------
# one student's notebook


@dataclass
class Task:
    student: str
    notebook: str            # the notebook's name, e.g. 01_proc_service
    submitted: Path | None   # None: not handed in


@dataclass
class Outcome:
    task: Task
    rows: list[dict]
    run: sandbox.RunResult | None
    note: str                # how the run ended, for the feedback page


def _records(checks_file: Path) -> dict[str, dict]:
    """The last record of each check (a check run twice counts as its last run)."""
    found = {}
    if not checks_file.is_file():
        return found
    for line in checks_file.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill mid-write
        if isinstance(record, dict) and isinstance(record.get("check"), str):
            found[record["check"]] = record
    return found


def _never_ran(run: sandbox.RunResult | None, reason: str | None) -> tuple[str, str]:
    if reason:
        return ERROR, reason
    if run.outcome == "timeout":
        return TIMEOUT, f"did not run: {run.message}"
    if run.outcome == "completed":
        return ERROR, "did not run although the notebook ran to its end: is its cell missing or changed?"
    return ERROR, f"did not run: {run.message}"


def rows_for(task: Task, catalog: list[CheckSpec], run: sandbox.RunResult | None,
             reason: str | None = None) -> list[dict]:
    """One gradebook row per check of the catalog: from the run's records, else why it has none.

    Points come from the catalog, not from the record: a record is written by
    the student's own kernel."""
    records = _records(run.checks_file) if run else {}
    rows = []
    for spec in catalog:
        record = records.get(spec.name)
        if record is not None and record.get("status") in (PASSED, FAILED, ERROR):
            status, message = record["status"], str(record.get("message") or "")
            if record.get("answer"):
                message = (message + "\n" if message else "") + f"answer: {record['answer']}"
        else:
            status, message = _never_ran(run, reason)
        rows.append({"student": task.student, "notebook": task.notebook, "check": spec.name,
                     "points": spec.max_points if status == PASSED else 0.0,
                     "max_points": spec.max_points, "status": status, "hidden": spec.hidden,
                     "message": message})
    return rows


def _student_overlay(student_dir: Path) -> dict[str, bytes]:
    """The C exercise files a run compiles: the released stubs, replaced by the student's own."""
    overlay = {}
    instructor_dir = paths.ROOT / EXERCISES_C
    if instructor_dir.is_dir():
        for path in sorted(p for p in instructor_dir.rglob("*") if p.is_file()):
            relative = path.relative_to(paths.ROOT)
            stubbed, _ = release.strip_solutions(path.read_text(), str(relative))
            overlay[str(relative)] = stubbed.encode()
            handed_in = student_dir / relative
            if handed_in.is_file():
                overlay[str(relative)] = handed_in.read_bytes()
    return overlay


class Grader:
    """Grades tasks `jobs` at a time; each run gets a slot, and as root the slot's uid."""

    def __init__(self, instructor_dir: Path, out_dir: Path, jobs: int, profile: str | None,
                 limits: sandbox.Limits):
        import nbformat

        self.instructor = {path.stem: nbformat.read(path, as_version=4)
                           for path in sorted(Path(instructor_dir).glob("*.ipynb"))}
        self.catalogs = {name: check_catalog(nb) for name, nb in self.instructor.items()}
        self.out_dir = out_dir
        self.jobs = jobs
        self.profile = profile
        self.limits = limits
        # A slot per job: as root each slot is a uid leased for this grader alone.
        self.lease = sandbox.UidLease(jobs) if sandbox.running_as_root() else None
        self.slots: queue.Queue[tuple[int, int | None]] = queue.Queue()
        for slot in range(jobs):
            self.slots.put((slot, self.lease.uids[slot] if self.lease else None))
        self.base = sandbox.make_base()

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)
        if self.lease:
            self.lease.close()

    def grade(self, task: Task) -> Outcome:
        import nbformat

        catalog = self.catalogs[task.notebook]
        if task.submitted is None:
            return Outcome(task, rows_for(task, catalog, None, "notebook not submitted"), None,
                           "notebook not submitted")
        try:
            submitted = nbformat.read(task.submitted, as_version=4)
        except Exception as error:  # noqa: BLE001 -- any unreadable file is the student's problem
            reason = f"the notebook could not be read ({type(error).__name__}: {error})"
            return Outcome(task, rows_for(task, catalog, None, reason), None, reason)
        graded = restore_checks(submitted, self.instructor[task.notebook])
        slot, uid = self.slots.get()
        try:
            workdir = self.base / f"{slot}-{task.student}-{task.notebook}"
            try:
                notebook = sandbox.prepare_workdir(workdir, graded, task.notebook,
                                                   _student_overlay(task.submitted.parent), uid)
                run = sandbox.run_notebook(notebook, workdir, profile=self.profile, limits=self.limits,
                                           uid=uid)
                rows = rows_for(task, catalog, run)
                self._keep(task, run)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        finally:
            self.slots.put((slot, uid))
        note = run.message + (f" ({run.killed} process(es) left running were killed)" if run.killed else "")
        return Outcome(task, rows, run, note)

    def _keep(self, task: Task, run: sandbox.RunResult) -> None:
        executed = self.out_dir / "executed" / task.student
        logs = self.out_dir / "logs" / task.student
        executed.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        if run.executed:
            shutil.copyfile(run.executed, executed / f"{task.notebook}.ipynb")
        if run.log.is_file():
            shutil.copyfile(run.log, logs / f"{task.notebook}.log")


# ---------------------------------------------------------------------------
# the class


def find_tasks(submissions: Path, notebooks: list[str]) -> list[Task]:
    students = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not students:
        raise LabError(f"no student folders in {submissions}",
                       "put each student's notebooks in SUBMISSIONS_DIR/<student>/<notebook>.ipynb")
    tasks = []
    for student in students:
        for name in notebooks:
            path = student / f"{name}.ipynb"
            tasks.append(Task(student.name, name, path if path.is_file() else None))
    return tasks


def write_feedback(out_dir: Path, student: str, outcomes: list[Outcome]) -> Path:
    colours = {PASSED: "#1a7f37", FAILED: "#b35900", ERROR: "#cf222e", TIMEOUT: "#8250df"}
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(student)}</title>",
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
        parts.append("<table><tr><th>check</th><th>status</th><th>points</th><th>message</th></tr>")
        for row in outcome.rows:
            colour = colours.get(row["status"], "#000")
            kind = " (hidden)" if row["hidden"] else ""
            parts.append(f"<tr><td><code>{html.escape(row['check'])}</code>{kind}</td>"
                         f"<td style='color:{colour}'><b>{row['status']}</b></td>"
                         f"<td>{row['points']:g} / {row['max_points']:g}</td>"
                         f"<td><pre>{html.escape(row['message'])}</pre></td></tr>")
        parts.append("</table>")
    parts.append(f"<h2>Total: {grand:g} / {grand_max:g} points</h2>")
    target = out_dir / "feedback" / f"{student}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    return target


def summary(frame, wall_s: float, jobs: int) -> str:
    import pandas as pd

    totals = frame.groupby("student")[["points", "max_points"]].sum()
    statuses = frame.pivot_table(index="student", columns="status", values="check", aggfunc="count",
                                 fill_value=0)
    table = pd.concat([totals, statuses], axis=1)
    counts = frame["status"].value_counts()
    return "\n".join([
        "per student:", table.to_string(float_format=lambda v: f"{v:g}"),
        "statuses: " + ", ".join(f"{status} {count}" for status, count in counts.items()),
        f"graded {frame['student'].nunique()} student(s) x {frame['notebook'].nunique()} notebook(s) "
        f"in {wall_s:.1f} s with {jobs} job(s)",
        f"isolation: {sandbox.isolation_note()}",
    ])


def grade(submissions: Path | str, out_dir: Path | str, *, jobs: int = 1, profile: str | None = "quick",
          timeout_s: float = 300.0, notebooks: list[str] | None = None,
          instructor_dir: Path | str | None = None, limits: sandbox.Limits | None = None,
          progress: bool = True):
    """Grade every student's notebooks; write the gradebook, feedback and executed
    notebooks under `out_dir`; return (gradebook DataFrame, summary text)."""
    import pandas as pd
    from tqdm.auto import tqdm

    submissions, out_dir = Path(submissions), Path(out_dir)
    if not submissions.is_dir():
        raise LabError(f"{submissions} is not a folder", "give the folder holding one folder per student")
    if jobs < 1:
        raise LabError(f"--jobs {jobs}: at least one notebook must run at a time", "use --jobs 1 or more")
    limits = limits or sandbox.Limits()
    limits.timeout_s = timeout_s
    started = time.monotonic()
    grader = Grader(Path(instructor_dir or paths.NOTEBOOKS), out_dir, jobs, profile, limits)
    try:
        graded = [n for n, catalog in grader.catalogs.items() if catalog]
        notebooks = notebooks or graded
        unknown = [n for n in notebooks if n not in graded]
        if unknown:
            raise LabError(f"no checks to grade in {', '.join(unknown)}",
                           f"grade notebooks with checks: {', '.join(graded) or '(none found)'}")
        tasks = find_tasks(submissions, notebooks)
        out_dir.mkdir(parents=True, exist_ok=True)
        outcomes: list[Outcome] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(grader.grade, task) for task in tasks]
            bar = tqdm(concurrent.futures.as_completed(futures), total=len(futures), unit="notebook",
                       desc="grading", disable=not progress, file=sys.stderr)
            for future in bar:
                outcome = future.result()
                outcomes.append(outcome)
                bar.write(f"{outcome.task.student}/{outcome.task.notebook}: {outcome.note}", file=sys.stderr)
    finally:
        grader.close()
    order = {(t.student, t.notebook): i for i, t in enumerate(tasks)}
    outcomes.sort(key=lambda o: order[(o.task.student, o.task.notebook)])
    frame = pd.DataFrame([row for o in outcomes for row in o.rows], columns=COLUMNS)
    frame.to_csv(out_dir / "gradebook.csv", index=False)
    for student in dict.fromkeys(o.task.student for o in outcomes):
        write_feedback(out_dir, student, [o for o in outcomes if o.task.student == student])
    text = summary(frame, time.monotonic() - started, jobs)
    (out_dir / "summary.txt").write_text(text + "\n")
    return frame, text

"""The isolation of one graded run, from outside: a working directory of its
own, a uid of its own (labkit.instructor.sandbox.uids), resource limits, walls
(labkit.instructor.sandbox.isolation: a cgroup, mount and PID namespaces), a
wall-clock timeout, and nothing left behind.

The grader (root or not) calls `run_notebook()` for the student's notebook and
`run_checks()` for the checks (labkit.instructor.grading.judge, under another uid).
Each runs a Python module in a child process started in a new session behind
the walls; the child reads its spec from stdin (nothing the run's uid could
replace lies on disk), lowers its own resource limits (inside.lower_limits), so
everything it starts inherits them, and writes to a log that root opened in a
folder of its own (the run's uid cannot swap it for a link).  What runs inside
is labkit.instructor.sandbox.inside for the notebook (it reports how papermill ended on
its last stdout line) and labkit.instructor.grading.judge for the checks; this module
prepares, starts, watches and ends a run (uids.kill_all), then reads back what it
left, once every process of the run is gone (from the run's own folder: regular
files only).

Without root every run shares the grader's uid: the limits hold per process,
RLIMIT_NPROC is relative to the processes already running, and clean-up kills
by session and by a marker in the environment (uids.py says what escapes).
`isolation_note()` says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ... import paths
from ...errors import LabError
from . import lab_copy
from ..basics import exports
from . import watch
from ..basics.outcomes import FAILED, FINISHED, FORK_BOMB, MEMORY
from .inside import INSIDE_MARK
from .uids import ENV_MARK, kill_all, processes_of, remove_files_of, shared_writable

MIB = 1024 * 1024
# What an isolated run is, in the messages that say why it was stopped.
WHO = {"labkit.instructor.sandbox.inside": "the notebook", "labkit.instructor.grading.judge": "the checks process"}
NAMESPACE_END_S = 60.0  # at most, for the kernel to end a stopped run's namespace
CONTAINER_PIDS_KEPT = 256  # of a container's pids limit, kept for the grader when a run has no cgroup


@dataclass
class Limits:
    """Per-run limits.  Memory, CPU time, open files and file size hold per
    process; processes per uid (root) or on top of the user's current count."""

    timeout_s: float = 300.0          # wall clock for the whole notebook
    cpu_s: int | None = None          # CPU seconds per process (default: timeout + 30 s)
    memory_bytes: int = 4096 * MIB    # address space per process (a kernel with pandas needs ~1.5 GiB); where
                                      # a cgroup bounds the run (its own, or the container's), the soft
                                      # limit only (inside.lower_limits)
    run_memory_bytes: int = 3072 * MIB  # memory in use by the whole run (its cgroup), where one can be made
    processes: int = 4096             # processes and threads (RLIMIT_NPROC counts threads): notebooks 02
                                      # and 07 run the threaded server at 2,000 clients, a thread each
                                      # (watch.Crowding says how a bomb is told from that)
    open_files: int = 4096
    file_bytes: int = 256 * MIB       # largest file a process may write
    disk_bytes: int = 1024 * MIB      # what the run keeps on disk, checked while it runs (watch.disk_used)

    def cpu_seconds(self) -> int:
        return int(self.cpu_s if self.cpu_s is not None else self.timeout_s + 30)


@dataclass
class RunResult:
    """How one sandboxed notebook run ended."""

    outcome: str                 # outcomes: COMPLETED, KERNEL_DIED, FAILED, TIMEOUT, DISK_FULL, FORK_BOMB, MEMORY
    message: str                 # one sentence for the feedback page
    elapsed_s: float
    executed: Path | None        # the executed notebook (partial after a timeout), if any
    exports: bytes               # what the notebook exported for the checks (labkit.instructor.basics.exports)
    log: Path                    # papermill's and the inside process's output (in the grader's own folder)
    cell_errors: list[str] = field(default_factory=list)
    killed: int = 0              # processes still alive after the run, killed by the clean-up


def running_as_root() -> bool:
    return os.geteuid() == 0


def isolation_note() -> str:
    if running_as_root():
        from . import isolation

        walls = isolation.Walls(0, cgroup=isolation.Cgroup.create(1 << 30, 64), namespaces=_namespaces_work())
        built = walls.describe()
        if walls.cgroup is not None:
            walls.cgroup.remove()
        return ("each notebook and its checks ran under uids of their own with limits on processes, CPU time, "
                f"memory, open files and file size, every process of those uids killed afterwards; {built}")
    return ("not root: notebooks ran under your own uid, so the process limit is shared, a process that "
            "leaves its session and clears its environment can escape the clean-up, and a notebook can read "
            "what you can read; grade as root (e.g. in a container) for full isolation")


# ---------------------------------------------------------------------------
# the working directory


def make_base() -> Path:
    """A fresh folder for runs' working directories that grading uids can reach
    (mode 711: each reaches its own working directory, and lists none).  As root
    it is not under /tmp, which each run gets a private one of."""
    import tempfile

    parent = "/var/lib" if running_as_root() and os.access("/var/lib", os.W_OK) else None
    base = paths.owned_folder("labkit-grade", Path(parent or tempfile.gettempdir()))
    base.chmod(0o711)
    return base


def private_folder(base: Path, name: str) -> Path:
    """A folder of root's (mode 700) for one run's log, results and spec."""
    folder = base / f"private-{name}"
    folder.mkdir(mode=0o700)
    return folder


def prepare_workdir(workdir: Path, notebook, name: str, overlay: dict[str, bytes] | None = None,
                    uid: int | None = None, stubbed: bool = True) -> Path:
    """Make `workdir` a private copy of the lab (lab_copy.copy: with `stubbed`, no solution's
    source in it) with `notebook` (an nbformat node) as lab/notebooks/<name>.ipynb;
    `overlay` maps lab-relative paths (e.g. csrc/servers/mine.c) to the contents that
    replace the lab's.  Returns the notebook's path.  With `uid`, the tree is given to that uid."""
    import nbformat

    if uid is not None:
        blocked = [str(p) for p in workdir.parents if p.is_dir() and not p.stat().st_mode & 0o001]
        if blocked:
            raise LabError(f"the grading uid {uid} cannot reach {workdir}: {', '.join(blocked)} "
                           "is closed to other users", "put working directories under sandbox.make_base()")
    lab = workdir / "lab"
    lab_copy.copy(lab, stubbed)
    for relative, content in (overlay or {}).items():
        target = lab / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)  # a fresh mtime, newer than the copied objects: make recompiles it
    for private in ("home", "tmp", "runtime", "out"):
        (workdir / private).mkdir(parents=True, exist_ok=True)
    (lab / "notebooks").mkdir(parents=True, exist_ok=True)
    notebook_path = lab / "notebooks" / f"{name}.ipynb"
    if notebook is not None:
        nbformat.write(notebook, notebook_path)
    if uid is not None:
        _chown_tree(workdir, uid)
        workdir.chmod(0o700)  # no other run's uid may enter it
    return notebook_path


def prepare_checkdir(checkdir: Path, uid: int | None, adopted: dict[str, bytes] | None = None) -> None:
    """A working directory for the checks process: the run's lab (lab_copy: the edition's C,
    with `adopted`, the run's adopted functions, lab_copy.adopted) that `uid` reads through
    its group and cannot change, which no other user may read (a graded run under another uid
    beside it, where no namespace hides this folder, gets nothing), and the folders it writes
    (the build, which make brings up to date with the adopted functions; home, tmp) as its
    own.  The copy's modes are set here, whatever the lab's were: the package's lab is root's
    alone (autograder.entry.protect)."""
    prepare_workdir(checkdir, None, "checks", adopted)
    writable = [checkdir / "lab" / "build", *(checkdir / p for p in ("home", "tmp", "runtime", "out"))]
    for folder in writable:
        folder.mkdir(parents=True, exist_ok=True)
    if uid is not None:
        # the sandbox runs it with gid = uid (setpriv --regid) and no other group
        for path in [checkdir, *checkdir.rglob("*")]:
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            os.chown(path, 0, uid)
            path.chmod(0o750 if path.is_dir() or mode & 0o100 else 0o640)
        for folder in writable:
            _chown_tree(folder, uid)


def _chown_tree(top: Path, uid: int) -> None:
    os.chown(top, uid, uid)
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(os.path.join(folder, name), uid, uid, follow_symlinks=False)


# ---------------------------------------------------------------------------
# the run


def _unreachable_for_others(targets: list[Path]) -> list[str]:
    """chmod commands that let other users reach and read `targets`."""
    commands = []
    for target in targets:
        for folder in reversed(target.parents):
            if folder.is_dir() and not folder.stat().st_mode & 0o001:
                commands.append(f"chmod o+x {folder}")
        if not target.stat().st_mode & 0o004:
            commands.append(f"chmod -R o+rX {target}")
    return list(dict.fromkeys(commands))


def _check_readable(uid: int, env: dict) -> None:
    """The venv, its interpreter and the lab's package must be usable by the grading uid (a
    run imports its own copy of labkit, and builds nothing from the lab's build/: lab_copy)."""
    commands = _unreachable_for_others(
        [Path(sys.executable).resolve(), Path(sys.prefix), paths.ROOT / "labkit"])
    if not commands:
        probe = subprocess.run([sys.executable, "-c", "import papermill, ipykernel, labkit"],
                               user=uid, group=uid, extra_groups=[], env=env, cwd="/",
                               capture_output=True, text=True, timeout=120)
        if probe.returncode == 0:
            return
        commands = [f"chmod -R o+rX {sys.prefix}  # the import failed: {probe.stderr.strip()[-300:]}"]
    raise LabError(
        f"the grading uid {uid} cannot run the lab's Python ({sys.executable}): each notebook runs "
        "under a uid of its own so that its process limit holds",
        "let other users read the interpreter and the venv (execute on the folders above them): "
        + "; ".join(commands))


# Checked once per process, for the first grading uid: every grading uid reaches the venv and
# the lab the same way, by the permissions for others (none has a group, and none owns a
# file there: remove_files_of empties each after its run).  Each check starts a Python
# that imports papermill (3-5 s on 2 busy cores); one per uid put 4 of them in a row in
# front of a two-job grading.
_checked = False
_checked_lock = threading.Lock()


def _environment(workdir: Path, token: str, extra: dict) -> dict:
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "HOME": str(workdir / "home"),
        "TMPDIR": str(workdir / "tmp"),
        "IPYTHONDIR": str(workdir / "home" / ".ipython"),
        "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
        "JUPYTER_DATA_DIR": str(workdir / "home" / ".local" / "share" / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(workdir / "home" / ".jupyter"),
        "MPLCONFIGDIR": str(workdir / "home" / ".matplotlib"),
        "PYTHONPATH": str(workdir / "lab"),  # `import labkit` finds the private copy first
        "PYTHONDONTWRITEBYTECODE": "1",
        ENV_MARK: token,
        **extra,
    }


@dataclass
class Ended:
    """How one isolated process ended."""

    outcome: str       # outcomes: FINISHED, TIMEOUT, DISK_FULL, FORK_BOMB, MEMORY
    message: str
    elapsed_s: float
    returncode: int | None
    killed: int        # processes still alive at the end, killed by the clean-up
    walls: str         # what isolated it (isolation.Walls.describe)


def run_isolated(module: str, payload: dict, workdir: Path, private: Path, *, limits: Limits,
                 uid: int | None, extra_env: dict | None = None, results: Path | None = None) -> Ended:
    """Run `python -m module` in `workdir` with `payload` (JSON) on its stdin, under
    `limits` and, as root, as `uid` behind the walls, in a root of its own that holds
    the system, the Python environment and `workdir` alone.  Its output goes
    to private/<module>.log; with `results`, a file root opens there is passed as a
    descriptor (payload["results_fd"]) that only this process holds."""
    from . import isolation

    token = uuid.uuid4().hex
    env = _environment(workdir, token, extra_env or {})
    if uid is not None:
        global _checked
        with _checked_lock:
            if not _checked:
                _check_readable(uid, env)
                _checked = True
    walls = isolation.Walls(uid, [Path(sys.prefix), Path(sys.base_prefix), workdir], cwd=workdir)
    if uid is not None:
        walls.cgroup = isolation.Cgroup.create(limits.run_memory_bytes, limits.processes)
        walls.namespaces = _namespaces_work()
        walls.root = private / f"root-{module.rsplit('.', 1)[-1]}"
        walls.root.mkdir(mode=0o755)
    if walls.cgroup is None and uid is not None:  # a container's grader: the run stays under its pids limit
        left = isolation.container_pids_left(CONTAINER_PIDS_KEPT)
        if left is not None and left < limits.processes:
            limits = replace(limits, processes=left)
    payload = {**payload, "limits": asdict(limits), "cpu_s": limits.cpu_seconds(),
               "cgroup_holds_memory": walls.cgroup is not None or (
                   uid is not None and isolation.container_memory_max() is not None),
               "extra_processes": 0 if uid is not None else len(processes_of(os.getuid(), "", None))}
    log_path = private / f"{module.rsplit('.', 1)[-1]}.log"
    pass_fds = ()
    results_file = None
    if results is not None:
        results_file = open(results, "wb")
        payload["results_fd"] = results_file.fileno()
        pass_fds = (results_file.fileno(),)
    prefix = walls.prefix()
    crowding = watch.Crowding(limits, WHO.get(module, "the measurement"))
    # no cgroup of its own (a container's grader): its memory kills are counted by the container's
    container_ooms = isolation.container_oom_kills() if walls.cgroup is None and uid is not None else None
    shared = shared_writable() if uid is not None else ()  # the folders a run's uid may keep files in
    started = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            inside = subprocess.Popen(
                [*prefix, sys.executable, "-m", module], cwd=workdir, env=env, stdin=subprocess.PIPE,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=pass_fds,
                **({"user": uid, "group": uid, "extra_groups": []} if uid is not None and not prefix else {}))
            if results_file is not None:
                results_file.close()  # the inside process holds it now
            try:
                inside.stdin.write(json.dumps(payload).encode())
                inside.stdin.close()
            except BrokenPipeError:
                pass  # it died at once: the log says why
            outcome, message = watch.watch(inside, workdir, limits, uid, token, started, walls.cgroup, crowding,
                                           () if walls.namespaces else shared)  # else a tmpfs of its own each
        elapsed = time.monotonic() - started
        if walls.cgroup is not None:
            walls.cgroup.refuse_forks()
        ended_by_kernel = 0
        if walls.namespaces and inside.poll() is None:
            ended_by_kernel = len(processes_of(uid, token, inside.pid))  # what the feedback counts as killed
            isolation.end_namespace(inside.pid)  # every process of the run, killed by the kernel at once
            try:
                # unshare exits once its child, PID 1 of the namespace, has: the kernel lets that
                # happen only after every other process of the namespace has exited, which beside
                # thousands of dying ones on a busy machine takes longer than a scan would wait
                inside.wait(timeout=NAMESPACE_END_S)
            except subprocess.TimeoutExpired:
                pass  # kill_all below says what is left
        killed = max(ended_by_kernel, kill_all(uid, token, inside.pid))
        if inside.poll() is None:
            inside.kill()  # unshare itself, once everything behind it is gone
        inside.wait()
        if walls.cgroup is not None and walls.cgroup.oom_kills() and outcome != FORK_BOMB:
            outcome, message = crowding.over_memory(watch.TASKS)
        elif container_ooms is not None and outcome == FINISHED and \
                (isolation.container_oom_kills() or 0) > container_ooms:
            outcome, message = MEMORY, ("the kernel killed a process of the run for want of memory: the "
                                        "container it was graded in ran out (its memory limit, all of the "
                                        "grading's processes together; this run's own limit could not be set "
                                        "without a cgroup of its own)")
    finally:
        if walls.cgroup is not None:
            walls.cgroup.remove()
        if uid is not None:
            remove_files_of(uid, shared)
    return Ended(outcome, message, elapsed, inside.returncode, killed, walls.describe() if uid is not None else "")


_namespaces: bool | None = None


def _namespaces_work() -> bool:
    global _namespaces
    if _namespaces is None:
        from . import isolation

        _namespaces = isolation.namespaces_work()
    return _namespaces


def run_notebook(notebook_path: Path, workdir: Path, private: Path | None = None, *,
                 profile: str | None = "quick", limits: Limits | None = None, uid: int | None = None,
                 kernel: str = "labkit", adopt_earlier: dict[str, str] | None = None) -> RunResult:
    """Execute the prepared notebook in `workdir` under `limits` (and `uid`, as root); first,
    in the run, the student's functions of `adopt_earlier` (lab_copy) go through their checks."""
    limits = limits or Limits()
    private = private or private_folder(workdir.parent, workdir.name)
    executed = workdir / "out" / "executed.ipynb"
    exports_path = workdir / "out" / "exports.jsonl"
    spec = {"input": str(notebook_path), "output": str(executed), "cwd": str(notebook_path.parent),
            "kernel": kernel, "parameters": {"profile": profile} if profile else {},
            "adopt_earlier": adopt_earlier or {}}
    ended = run_isolated("labkit.instructor.sandbox.inside", spec, workdir, private, limits=limits, uid=uid,
                         extra_env={"LABKIT_RESULTS": str(workdir / "out" / "results.jsonl"),
                                    "LABKIT_EXPORTS": str(exports_path)})
    log_path = private / "inside.log"
    outcome, message, cell_errors = ended.outcome, ended.message, []
    if outcome == FINISHED:
        outcome, message, cell_errors = _inside_report(log_path, ended.returncode)
    # Every process of the run is gone now: what it left can be read, as regular files only.
    from ..basics.submissions import Refused, read_regular

    kept = None
    try:
        (private / "executed.ipynb").write_bytes(read_regular(executed, what="the executed notebook"))
        kept = private / "executed.ipynb"
    except Refused:
        pass
    try:
        exported = read_regular(exports_path, limit=exports.MAX_BYTES, what="the exports")
    except Refused:
        exported = b""
    return RunResult(outcome, message, ended.elapsed_s, kept, exported, log_path, cell_errors, ended.killed)


@dataclass
class CheckRun:
    """What the checks process reported: one record per check it ran."""

    records: dict[str, dict]
    ended: Ended
    log: Path


def run_checks(notebook: str, groups: list[dict], exported: bytes, workdir: Path, private: Path, *,
               limits: Limits, uid: int | None) -> CheckRun:
    """Run the instructor's `groups` of checks on `exported` values (labkit.instructor.grading.judge)."""
    results = private / "checks.jsonl"
    payload = {"notebook": notebook, "groups": groups, "exports": exported.decode("utf-8", "replace")}
    ended = run_isolated("labkit.instructor.grading.judge", payload, workdir, private, limits=limits, uid=uid,
                         results=results)
    records = {}
    for line in results.read_text(errors="replace").splitlines() if results.is_file() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("check"), str):
            records.setdefault(record["check"], record)
    return CheckRun(records, ended, private / "judge.log")


def _inside_report(log_path: Path, returncode: int | None) -> tuple[str, str, list[str]]:
    """The inside process's verdict, from its last marked stdout line."""
    text = log_path.read_bytes().decode(errors="replace")
    marked = [line for line in text.splitlines() if line.startswith(INSIDE_MARK)]
    if marked:
        report = json.loads(marked[-1][len(INSIDE_MARK):])
        return report["outcome"], report["message"], report.get("cell_errors", [])
    tail = text.strip().splitlines()[-5:]
    return FAILED, (f"the notebook run ended (status {returncode}) without a verdict: "
                      + " | ".join(tail)), []

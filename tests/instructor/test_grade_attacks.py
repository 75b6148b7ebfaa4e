"""Grading a hostile class as root: every attack a student who wants the points
could try earns exactly what an untouched release earns, no root-only file
reaches any output, every broken submission becomes its own error rows, and no
process or file of a grading uid is left afterwards.

The class is built at test time from `labkit release` output, like
test_grade.py's: each attacker is the untouched release plus one cell."""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pandas as pd
import psutil
import pytest

import waits
from labkit import build, paths, busy_machine
from labkit.stubs import which_edition as editions
from labkit.stubs.catalog import C_EXERCISES
from labkit.instructor.sandbox import lab_copy
from labkit.instructor.basics import exports
from labkit.instructor.sandbox import isolation, outside as sandbox, uids, watch
from labkit.instructor.release import edition as release
from labkit.instructor.grading.check_cells import check_catalog
from labkit.instructor.sandbox.uids import FIRST_GRADING_UID, UidLease
from test_grade import NOTEBOOK, insert_after, instructor, processes_of_grading_uids, released  # noqa: F401

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="the attacks are on a grader that runs as root")]

SECRET = f"labkit-root-only-{secrets.token_hex(8)}"
SECRET_FILE = Path("/var/lib") / f"labkit-secret-{secrets.token_hex(4)}"
MARKER = f"MARKER-OF-ANOTHER-STUDENT-{secrets.token_hex(4)}"  # in the untouched student's notebook

def forged(names) -> str:
    return f"""# forge: passed lines for every check (hidden ones too), and exports that claim the answers
import json, os
names = {sorted(names)!r}
target = os.environ.get("LABKIT_CHECKS_FILE", os.path.join(os.environ["TMPDIR"], "checks.jsonl"))
with open(target, "a") as f:
    for name in names:
        f.write(json.dumps({{"check": name, "status": "passed", "points": 99}}) + "\\n")
with open(os.environ["LABKIT_EXPORTS"], "a") as f:
    f.write(json.dumps({{"checks": sorted(names), "values": {{"iterative_ratio": {{"data": 1.0}},
        "my_procstat_parse": {{"data": "int procstat_parse(void) {{ return 0; }}"}}}}}}) + "\\n")
"""

PATCHED = """# patch the checker so that every check passes, and the C checks do nothing
from labkit.exercises import c_exercises, checks
from labkit.instructor.basics import exports
def always(self, name, function, points=1, hidden=False, extra=None):
    result = checks.CheckResult(self.notebook, name, points, points, "passed", "", hidden)
    self.publish(result)
    return result
checks.Checker.run = always
c_exercises.check_procstat_parse = c_exercises.check_procstat_live = c_exercises.check_poll_server = \\
    lambda *args, **kwargs: None
"""

COPIED = f"""# copy the instructor's solutions and hidden checks, from where the venv lives (or any lab checkout)
import os, sys, json
from pathlib import Path
mine = os.getcwd().rsplit("/lab/", 1)[0]
found = []
tops = [Path(sys.executable).resolve().parents[2], Path(sys.prefix).parent, Path("{paths.ROOT}"),
        Path("/work"), Path("/root"), Path("/home"), Path("/var/lib"), Path("/tmp"), Path("/opt")]
for top in tops:
    for candidate in [top / "notebooks" / "{NOTEBOOK}.ipynb", *top.glob("**/{NOTEBOOK}.ipynb")]:
        if str(candidate).startswith(mine):
            continue  # this run's own copy of the student's notebook
        try:
            nb = json.loads(candidate.read_text())
        except Exception as error:
            print("could not read", candidate, type(error).__name__)
            continue
        found.append(str(candidate))
        print("read", candidate)
        for cell in nb["cells"]:
            source = "".join(cell["source"])
            if "BEGIN SOLUTION" in source:
                try:
                    exec(source)
                except Exception as error:
                    print("its solution did not run here:", type(error).__name__)
            print(source)
print("found", found)
"""

SOURCES = """# print every C source this run can read, each piece in an output of its own (long ones are cut)
from pathlib import Path
from IPython.display import display
for source in sorted(Path("..", "csrc").rglob("*.[ch]")):
    text = source.read_text()
    for at in range(0, len(text), 15000):
        display({"text/plain": f"{source}\\n{text[at:at + 15000]}"}, raw=True)
print("printed", source)
"""

MACHINE_CODE = """# search every file this run can read for the instructor's solutions as machine code
import os
needles = {{name: [bytes.fromhex(piece) for piece in pieces] for name, pieces in {needles!r}.items()}}
hits, scanned, programs = [], 0, 0
for top, dirs, files in os.walk("/"):
    if top == "/":  # the system's own folders: bound read-only from the machine, the lab installs nothing there
        dirs[:] = [d for d in dirs if d not in ("usr", "proc", "sys", "dev")]
    for name in files:
        path = os.path.join(top, name)
        try:
            if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 256 << 20:
                continue
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            continue
        scanned += 1
        programs += "/lab/build/bin/" in path
        hits += [(path, fn) for fn, pieces in needles.items() if any(piece in data for piece in pieces)]
print("machine code: scanned", scanned, "files,", programs, "of the run's programs; found", hits)
"""

SNOOP = """# look for the other students' runs through /proc and read their notebooks
import os, glob
seen = []
for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        words = open(cmdline, "rb").read().split(b"\\0")
    except OSError:
        continue
    seen += [w.decode(errors="replace") for w in words if b"labkit-grade" in w or b".ipynb" in w]
for place in set(seen) | set(glob.glob("/var/lib/labkit-grade-*/*/lab/notebooks/*.ipynb")) \\
        | set(glob.glob("/tmp/labkit-grade-*/*/lab/notebooks/*.ipynb")):
    try:
        print(place, open(place).read()[:100000])
    except OSError as error:
        print(place, "unreadable:", error.strerror)
for secret in glob.glob("/var/lib/labkit-secret-*"):
    try:
        print(open(secret).read())
    except OSError as error:
        print(secret, error.strerror)
print("seen", len(seen))
"""

SWAP = f"""# from a process of its own, keep replacing the executed notebook by a link to a root-only file
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", '''
import os, time
if os.fork():
    os._exit(0)
os.setsid()
out = os.environ["LABKIT_EXPORTS"].rsplit("/", 1)[0]
while True:
    for name in ("executed.ipynb", "exports.jsonl"):
        try:
            os.unlink(os.path.join(out, name))
        except OSError:
            pass
        try:
            os.symlink("{SECRET_FILE}", os.path.join(out, name))
        except OSError:
            pass
    time.sleep(0.005)
'''])
"""


def attacked(released, *cells: str):
    """The release with `cells`, each its own cell, right after the one that makes the Checker."""
    nb = nbformat.from_dict(released)
    for cell in reversed(cells):
        insert_after(nb, "checks.Checker(", cell)
    return nb


def write(root: Path, student: str, nb=None, raw: bytes | None = None) -> Path:
    folder = root / student
    folder.mkdir(parents=True)
    path = folder / f"{NOTEBOOK}.ipynb"
    if nb is not None:
        nbformat.write(nb, path)
    elif raw is not None:
        path.write_bytes(raw)
    return path


def files_of_grading_uids() -> list[str]:
    """Files anywhere on this machine owned by a grading uid no grader holds now."""
    lo, hi = FIRST_GRADING_UID, FIRST_GRADING_UID + UidLease.SPAN
    done = subprocess.run(["find", "/", "-path", "/proc", "-prune", "-o", "-path", "/sys", "-prune", "-o",
                           "(", "-uid", f"+{lo - 1}", "-uid", f"-{hi}", ")", "-print"],
                          capture_output=True, text=True, timeout=300)
    leased = {p.info["uids"].real for p in psutil.process_iter(["uids"]) if p.info["uids"]}

    def grading_now(path: str) -> bool:
        """Under the folder of a grader that still runs (labkit-grade-<its pid>-...): another
        test's grading, between two of its runs, not something this one left."""
        found = re.search(r"/labkit-(?:grade|task)-(\d+)-", path)
        return bool(found) and psutil.pid_exists(int(found.group(1))) and int(found.group(1)) != os.getpid()

    def left(path: str) -> bool:
        try:
            return os.lstat(path).st_uid not in leased and not grading_now(path)
        except FileNotFoundError:  # removed since find saw it: a grading beside this one cleaning up
            return False

    return [line for line in done.stdout.splitlines() if left(line)]


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory, released, instructor):
    root = tmp_path_factory.mktemp("hostile")
    submissions = root / "class"
    SECRET_FILE.write_text(SECRET + "\n")
    SECRET_FILE.chmod(0o600)
    try:
        # No correct student here: test_grade's class has one, graded in the same sandbox; here
        # every notebook is an attacker's or the release, so no output may hold a solution.
        untouched = nbformat.from_dict(released)
        untouched.cells.append(nbformat.v4.new_code_cell(f"# {MARKER}"))
        write(submissions, "untouched", untouched)
        # Two attacks to a notebook where neither can hide the other (each run is a whole
        # notebook graded in the sandbox, the costly part): forging records beside patching the
        # checker (either one's success would show as points), and reading the instructor's
        # notebooks beside snooping on the other runs (each prints what it found).  The link
        # swap is alone: it replaces its own run's outputs, which the snoop's findings are in.
        write(submissions, "forged_and_patched", attacked(released, forged(s.name for s in check_catalog(instructor)),
                                                          PATCHED))
        write(submissions, "copied_and_snooped", attacked(released, COPIED, SNOOP, SOURCES,
                                                          MACHINE_CODE.format(needles=hex_needles())))
        write(submissions, "link_swap", attacked(released, SWAP))
        (submissions / "link_to_instructor").mkdir()
        (submissions / "link_to_instructor" / f"{NOTEBOOK}.ipynb").symlink_to(paths.NOTEBOOKS / f"{NOTEBOOK}.ipynb")
        (submissions / "linked_folder").symlink_to(submissions / "untouched")
        (submissions / "link_to_secret").mkdir()
        (submissions / "link_to_secret" / f"{NOTEBOOK}.ipynb").symlink_to(SECRET_FILE)
        text = nbformat.writes(released).encode()
        write(submissions, "truncated", raw=text[: len(text) * 2 // 5])
        write(submissions, "binary", raw=os.urandom(4096))
        (submissions / "folder_notebook" / f"{NOTEBOOK}.ipynb").mkdir(parents=True)
        long_name = "x" * 255
        (submissions / long_name).mkdir()
        os.mkfifo(submissions / long_name / f"{NOTEBOOK}.ipynb")
        done = subprocess.run([sys.executable, "-m", "labkit", "grade", str(submissions), "--out", str(root / "out"),
                               "--jobs", "2", "--timeout", "240", "--notebooks", NOTEBOOK],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        book = pd.read_csv(root / "out" / "gradebook.csv", keep_default_na=False)
        yield {"book": book, "out": root / "out", "stdout": done.stdout, "stderr": done.stderr,
               "long_name": long_name}
    finally:
        SECRET_FILE.unlink(missing_ok=True)


def points(book, student) -> float:
    return book.loc[book["student"] == student, "points"].sum()


@pytest.mark.timeout(1200)
def test_every_attack_earns_what_an_untouched_release_earns(hostile_class, instructor):
    book = hostile_class["book"]
    # the release as handed out fails every check (written answers included: a stub is no effort)
    untouched = book[book["student"] == "untouched"]
    assert len(untouched) == len(check_catalog(instructor)) and set(untouched["status"]) == {"failed"}, untouched
    untouched = points(book, "untouched")
    assert untouched == 0
    for attacker in ("forged_and_patched", "copied_and_snooped", "link_swap"):
        mine = book[book["student"] == attacker]
        assert len(mine) == len(check_catalog(instructor)), attacker
        assert points(book, attacker) == untouched, (attacker, mine[["check", "status", "message"]])
    # each attack ran, to its end, where two share a notebook (an error would have stopped the rest)
    for attacker, firsts in (("forged_and_patched", ("# forge:", "# patch the checker")),
                             ("copied_and_snooped", ("# copy the instructor", "# look for the other",
                                                     "# print every C source"))):
        ran = nbformat.read(hostile_class["out"] / "executed" / attacker / f"{NOTEBOOK}.ipynb", as_version=4)
        for first in firsts:
            cell = next(c for c in ran.cells if c.source.startswith(first))
            assert cell.execution_count and not [o for o in cell.outputs if o.output_type == "error"], (attacker, first)


def test_links_and_broken_files_are_refused_as_their_own_error_rows(hostile_class, instructor):
    book = hostile_class["book"]
    expected = {"link_to_instructor": "symbolic link", "link_to_secret": "symbolic link",
                "linked_folder": "symbolic link",
                "truncated": "not valid notebook JSON", "binary": "not UTF-8",
                "folder_notebook": "is a folder", hostile_class["long_name"]: "not a regular file"}
    for student, says in expected.items():
        mine = book[book["student"] == student]
        assert len(mine) == len(check_catalog(instructor)), student[:20]
        assert set(mine["status"]) == {"error"} and mine["points"].sum() == 0, student[:20]
        assert all(says in message for message in mine["message"]), (student[:20], set(mine["message"]))
    feedback = {p.name for p in (hostile_class["out"] / "feedback").iterdir()}
    assert len(feedback) == book["student"].nunique()  # the 255-byte name too, as a safe file name
    assert all(len(name.encode()) <= 255 for name in feedback)


def test_no_root_only_file_and_no_hidden_check_reaches_any_output(hostile_class, instructor):
    hidden = [c.source for c in instructor.cells if "hidden-check" in c.metadata.get("tags", [])]
    solutions = [c.source for c in instructor.cells if "BEGIN SOLUTION" in c.source]
    for path in hostile_class["out"].rglob("*"):
        if path.is_symlink():
            pytest.fail(f"{path} is a link")
        if not path.is_file():
            continue
        text = path.read_bytes().decode(errors="replace")
        assert SECRET not in text, path
        assert MARKER not in text or "untouched" in str(path.relative_to(hostile_class["out"])), path
        if path.suffix != ".csv":
            for source in hidden + solutions:
                assert source.strip()[:120] not in text, (path, source[:60])
    assert SECRET not in hostile_class["stdout"] + hostile_class["stderr"]


def test_the_attackers_saw_nothing_of_the_instructor_or_the_other_runs(hostile_class):
    executed = hostile_class["out"] / "executed"
    both = (executed / "copied_and_snooped" / f"{NOTEBOOK}.ipynb").read_text()
    assert "found []" in both  # no instructor notebook could be read
    assert "seen " in both  # the snoop ran to its end
    assert MARKER not in both and SECRET not in both


def solution_lines() -> dict[str, list[str]]:
    """For each C file of the lab with a solution: its solutions' lines found nowhere in the
    edition's csrc/ (the capstone's reference shares lines with the lab's own servers)."""
    edition, solved = [], {}
    for path in sorted(paths.CSRC.rglob("*.[ch]")):
        stub, solutions = release.strip_solutions(path.read_text(), path.name)
        edition.append(stub)
        solved[str(path.relative_to(paths.CSRC))] = {line.strip() for s in solutions for line in s.text.splitlines()}
    everywhere = "\n".join(edition)
    found = {name: sorted(line for line in lines if len(line) > 20 and line not in everywhere
                          and not line.startswith(("/*", "*", "//")))
             for name, lines in solved.items()}
    return {name: lines for name, lines in found.items() if lines}


def outputs_of(path: Path) -> str:
    return "\n".join(str(value) for cell in nbformat.read(path, as_version=4).cells
                     for output in cell.get("outputs", [])
                     for value in [output.get("text", ""), *output.get("data", {}).values()])


def test_no_solution_is_readable_in_a_run(hostile_class):
    """No solution of the c exercises or the capstone is readable in a run."""
    printed = outputs_of(hostile_class["out"] / "executed" / "copied_and_snooped" / f"{NOTEBOOK}.ipynb")
    solutions = solution_lines()
    assert {"services/procstat.c", "loop/loop.c", "loop/ev_poll.c", "loadgen/strategies.c",
            "capstone/mine.c"} <= set(solutions)
    for name, lines in solutions.items():
        assert f"../csrc/{name}" in printed, name  # the attack read the file...
        assert [line for line in lines if line in printed] == [], name  # ...and found only its stubs


def test_a_runs_lab_has_the_editions_sources_and_programs_built_from_them(tmp_path):
    lab_copy.copy(tmp_path / "stubbed")
    lab_copy.copy(tmp_path / "whole", stubbed=False)
    for name, lines in solution_lines().items():
        assert lines[0] in (tmp_path / "whole" / "csrc" / name).read_text()  # the check above can fail
        stubbed = tmp_path / "stubbed" / "csrc" / name
        assert not [line for line in lines if line in stubbed.read_text()], name
    # an edition to labkit: a passing visible check adopts the student's function there
    assert editions.edition(tmp_path / "stubbed") is not None and editions.edition(tmp_path / "whole") is None
    assert {e.function for e in editions.still_stubbed(tmp_path / "stubbed")} == {e.function for e in C_EXERCISES}
    made = build.make(["-q", "all"], tmp_path / "stubbed" / "csrc", tmp_path / "stubbed" / "build")
    assert made.returncode == 0, made.stdout  # the copy of the edition's build is up to date: nothing to make
    probe = ("from labkit import build; import json; build.build(); "
             "print(json.dumps([build.procstat().__name__, build.parse_stat_line('7 (a) b) S ' + '1 ' * 20)]))")
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path / "stubbed", capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HOME": str(tmp_path / "home")})
    assert ran.returncode == 0, ran.stderr[-2000:]
    module, parsed = json.loads(ran.stdout.splitlines()[-1])
    assert module != build.procstat().__name__  # not the instructor's parser: the stub's, already built
    assert module in {p.name.split(".")[0] for p in (tmp_path / "stubbed" / "build" / "cffi").iterdir()}
    assert parsed != {"pid": 7, "name": "a) b", "utime": 1, "stime": 1}  # the stub does not parse


def test_the_checks_lab_is_the_runs_no_solution_and_only_the_functions_it_adopted(tmp_path):
    """The checks' process builds and runs the student's C in its lab, and a check's message
    quotes what that C printed: its lab is the run's (the edition's C), with each function the
    run adopted put in by root, taken alone from the run's csrc/ (the rest of the run's file,
    which its uid could change, and a file made a link, are not taken); csrc/ read-only to
    the checks' uid, its build its own (make brings it up to date with the adopted functions)."""
    lease = UidLease(1)
    uid = lease.uids[0]
    base = sandbox.make_base()
    try:
        sandbox.prepare_workdir(base / "run", None, "run")
        run_lab = base / "run" / "lab" / "csrc"
        mine = 'int procstat_parse(const char *line, size_t len, struct proc_cpu *out)\n{ return 7; /* mine */ }\n'
        procstat_c = run_lab / "services" / "procstat.c"
        text = procstat_c.read_text()
        procstat_c.write_text(editions.with_function(text, "procstat_parse", mine) + "int planted = 1;\n")
        other = next(e for e in C_EXERCISES if e.source != "services/procstat.c")
        (run_lab / other.source).unlink()
        (run_lab / other.source).symlink_to(paths.CSRC / other.source)  # the instructor's, with its solution
        adopted = lab_copy.adopted(base / "run" / "lab")
        assert list(adopted) == ["csrc/services/procstat.c"]
        sandbox.prepare_checkdir(base / "check", uid, adopted)
        lab = base / "check" / "lab"
        checks_procstat = (lab / "csrc" / "services" / "procstat.c").read_text()
        assert "return 7; /* mine */" in checks_procstat and "planted" not in checks_procstat
        for name, lines in solution_lines().items():
            assert not [line for line in lines if line in (lab / "csrc" / name).read_text()], name
        needles = [piece for pieces in solution_machine_code().values() for piece in pieces]
        files = [path for path in (base / "check").rglob("*") if path.is_file() and not path.is_symlink()]
        assert len(files) > 100 and not [path for path in files if any(n in path.read_bytes() for n in needles)]
        assert "procstat_parse" not in {exercise.function for exercise in editions.still_stubbed(lab)}
        stat = (lab / "csrc" / "services" / "procstat.c").stat()
        assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) == (0, uid, 0o640)
        assert (lab / "build").stat().st_uid == uid and (lab / "build" / "obj").stat().st_uid == uid
    finally:
        shutil.rmtree(base, ignore_errors=True)
        lease.close()


# ---------------------------------------------------------------------------
# the solutions as machine code: pieces of the instructor's objects that the edition's lack


def _text_pieces(obj: Path, least: int = 24, symbol: str | None = None) -> list[bytes]:
    """The code of `obj` (its .text sections; only `symbol`'s bytes, where it has that symbol)
    cut at every relocation (the linker fills those bytes in, so a program holds them changed):
    the pieces of `least` bytes or more."""
    sections = re.findall(r"^\s*\d+\s+(\.text\S*)\s", subprocess.run(["objdump", "-h", str(obj)],
                          capture_output=True, text=True, check=True).stdout, re.M)
    symbols = subprocess.run(["nm", "-S", "--defined-only", str(obj)], capture_output=True, text=True,
                             check=True).stdout
    where = re.search(rf"^([0-9a-f]+) ([0-9a-f]+) [tT] {symbol}$", symbols, re.M) if symbol else None
    pieces = []
    for section in sections:
        raw = obj.with_name(obj.name + f"{section}.bin")
        subprocess.run(["objcopy", "-O", "binary", f"--only-section={section}", str(obj), str(raw)], check=True)
        code = raw.read_bytes()
        raw.unlink()
        relocations = subprocess.run(["objdump", "-r", "-j", section, str(obj)], capture_output=True, text=True,
                                     check=True).stdout
        cuts = sorted(int(offset, 16) for offset in re.findall(r"^([0-9a-f]{16}) ", relocations, re.M))
        first, last = (int(where.group(1), 16), int(where.group(1), 16) + int(where.group(2), 16)) \
            if where and section == ".text" else (0, len(code))
        start = first
        for cut in [*(c for c in cuts if first <= c < last), last]:
            if cut - start >= least:
                pieces.append(code[start:cut])
            start = max(start, cut + 8)
    return pieces


def solution_machine_code() -> dict[str, list[bytes]]:
    """For each C exercise: pieces of its function's code in the instructor's object (where the
    compiler inlined it into another function, that object's code) that no file of the
    edition's build (lab_copy.base: its programs, objects and cffi module) holds: the solution's
    machine code.  (A piece of the caller alone can differ from the edition's object by a call's
    displacement and still be in a program built from the stub.)"""
    base = lab_copy.base() / "build"
    edition = b"\0".join(p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file())
    found = {}
    for exercise in C_EXERCISES:
        relative = Path(exercise.source).with_suffix(".o")
        pieces = _text_pieces(paths.BUILD / "obj" / relative, symbol=exercise.function)
        found[exercise.function] = sorted((p for p in pieces if p not in edition), key=len, reverse=True)[:6]
    return found


def hex_needles() -> dict[str, list[str]]:
    return {name: [piece.hex() for piece in pieces] for name, pieces in solution_machine_code().items()}


def test_solutions_machine_code_placement():
    """The search the attack below makes can find what it looks for: each exercise's pieces
    are in the instructor's linked programs, and in none of the edition's."""
    needles = solution_machine_code()
    assert all(needles.values()), {name: len(pieces) for name, pieces in needles.items()}
    programs = {p.name: p.read_bytes() for p in paths.BIN.iterdir() if p.is_file()}
    edition = {p.name: p.read_bytes() for p in (lab_copy.base() / "build" / "bin").iterdir() if p.is_file()}
    for name, pieces in needles.items():
        assert any(piece in data for piece in pieces for data in programs.values()), name
        assert not [(program, name) for program, data in edition.items() for piece in pieces if piece in data]


def test_no_solution_is_in_any_file_a_run_can_read_as_machine_code(hostile_class):
    printed = outputs_of(hostile_class["out"] / "executed" / "copied_and_snooped" / f"{NOTEBOOK}.ipynb")
    found = re.search(r"machine code: scanned (\d+) files, (\d+) of the run's programs; found (.*)", printed)
    assert found, printed[-3000:]
    scanned, programs, hits = int(found.group(1)), int(found.group(2)), found.group(3)
    assert programs >= 10 and scanned > programs, found.group(0)  # it read the run's programs and more
    assert hits == "[]", hits


def test_nothing_of_a_grading_uid_is_left_anywhere(hostile_class):
    assert processes_of_grading_uids() == []
    assert files_of_grading_uids() == []


class _Running:
    """An inside process that never ends (the watcher's view of a run still going)."""

    def wait(self, timeout=None):
        raise subprocess.TimeoutExpired("inside", timeout)


class _Counted:
    def __init__(self, tasks: int, oom_kills: int = 0, refused: int = 0):
        self.tasks, self.oom_kills, self.refused_forks = (lambda: tasks), (lambda: oom_kills), (lambda: refused)


@pytest.mark.parametrize("tasks, oom_kills, refused, outcome, says", [
    # near its process limit (4096) when its time ran out: a bomb seen late, not a hang
    (3300, 0, 0, "fork_bomb", "kept 3300 processes and threads running (limit 4096): a fork bomb?"),
    (10, 0, 0, "timeout", "ran over the 0.01 s time limit"),
    # notebooks 02 and 07: the threaded server at 2,000 clients is not a bomb
    (2100, 0, 0, "timeout", "ran over the 0.01 s time limit"),
    (10, 0, 3, "fork_bomb", "a fork bomb?"),        # forks refused at the limit
    (10, 1, 0, "memory", "more than its 3072 MiB of memory"),  # a lost process is truer than the time
    # a bomb of forked kernels runs out of memory before the limit refuses a fork
    (2400, 1, 0, "fork_bomb", "kept 2400 processes and threads running (limit 4096) and used all of its 3072 MiB"),
])
def test_what_a_run_was_stopped_for_when_its_time_ran_out(tmp_path, tasks, oom_kills, refused, outcome, says):
    limits = sandbox.Limits(timeout_s=0.01)
    ended, message = watch.watch(_Running(), tmp_path, limits, FIRST_GRADING_UID, "token",
                                    time.monotonic() - 1, _Counted(tasks, oom_kills, refused))
    assert (ended, says in message) == (outcome, True), message


def test_what_a_run_writes_where_it_shares_the_machines_tmp_counts_against_its_disk(tmp_path):
    """Without namespaces (a platform's container) a run writes the machine's own /tmp: its
    uid's files there count with its working directory, and nobody else's do.  (A uid below
    the grading uids': the suite's graders beside this test look for what theirs left.)"""
    uid = FIRST_GRADING_UID - 1
    workdir, shared = tmp_path / "work", tmp_path / "tmp"
    (shared / "hidden").mkdir(parents=True)  # another user's folder all may write (as /tmp/.X11-unix)
    (shared / "hidden").chmod(0o1777)
    (shared / "closed").mkdir()  # another user's folder it cannot write: not walked
    workdir.mkdir()
    for name, owner in (("hidden/a", uid), ("b", uid), ("theirs", 0)):
        (shared / name).write_bytes(b"x" * (3 << 20))
        os.chown(shared / name, owner, owner)
    limits = sandbox.Limits(timeout_s=60, disk_bytes=5 << 20)
    try:
        ended, message = watch.watch(_Running(), workdir, limits, uid, "token", time.monotonic(), _Counted(1),
                                     shared=(str(shared),))
        assert ended == "disk_full" and "kept 6 MiB on disk" in message and str(shared) in message, message
        assert watch.disk_used(workdir, uid, "token", ()) == 0  # a tmp of its own: not counted
    finally:
        shutil.rmtree(shared)


def test_every_folder_all_users_may_write_counts_against_a_runs_disk_and_is_emptied_after_it(tmp_path):
    """Without namespaces a run may write any folder all users may write, not only /tmp: a
    Debian or Ubuntu image's /run/lock (/var/lock links to it) is one.  Each such folder two
    levels down is found (no link followed, nothing below a found one looked into), what the
    run's uid keeps there counts against its disk, and it is removed after the run."""
    uid = FIRST_GRADING_UID - 1
    top = tmp_path / "root"
    for folder, mode in (("tmp", 0o1777), ("run", 0o755), ("run/lock", 0o1777), ("run/lock/below", 0o1777),
                         ("etc", 0o755), ("var", 0o755), ("var/lib", 0o755), ("var/lib/deeper", 0o777)):
        (top / folder).mkdir(parents=True)
        (top / folder).chmod(mode)
    (top / "var" / "lock").symlink_to(top / "run" / "lock")
    found = uids.shared_writable(str(top))
    assert sorted(found) == [str(top / "run" / "lock"), str(top / "tmp")]  # var/lib/deeper: three levels down
    machine = Path("/run/lock")
    if machine.is_dir() and not machine.is_symlink() and machine.stat().st_mode & 0o002:  # this machine's own
        assert {"/run/lock", "/tmp"} <= set(uids.shared_writable())
    workdir = tmp_path / "work"
    workdir.mkdir()
    kept = top / "run" / "lock" / "kept"
    kept.write_bytes(b"x" * (3 << 20))
    os.chown(kept, uid, uid)
    limits = sandbox.Limits(timeout_s=60, disk_bytes=2 << 20)
    ended, message = watch.watch(_Running(), workdir, limits, uid, "token", time.monotonic(), _Counted(1),
                                 shared=found)
    assert ended == "disk_full" and "kept 3 MiB on disk" in message, message
    uids.remove_files_of(uid, found)
    assert not kept.exists() and (top / "run" / "lock" / "below").is_dir()


def test_a_run_that_touches_its_limit_once_is_not_a_bomb():
    """Crowded means near the limit, or refusing forks, for over a second."""
    crowding = watch.Crowding(sandbox.Limits())
    assert [crowding.saw(count, refused, now) for count, refused, now in [
        (100, 0, 0.0), (4096, 1, 0.5), (2000, 1, 1.0), (2000, 1, 3.0),   # one refusal, then calm
        (3500, 1, 4.0), (3500, 1, 4.6), (3500, 1, 5.1),                  # near the limit for over 1 s
    ]] == [False, False, False, False, False, False, True]
    assert crowding.most == 4096


@contextlib.contextmanager
def in_a_cgroup(code: str, processes: int):
    """(the cgroup, the Python process running `code` in it); both gone afterwards."""
    group = isolation.Cgroup.create(1 << 30, processes)
    if group is None:
        pytest.fail("no cgroup can be made here as root: the fork-bomb watch cannot be tested")
    started = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=lambda: [path.write_text(str(os.getpid())) for path in group.procs_files()])
    try:
        yield group, started
    finally:
        group.refuse_forks()
        os.killpg(started.pid, signal.SIGKILL)
        started.wait()
        deadline = time.monotonic() + 5
        while group.tasks() and time.monotonic() < deadline:  # and those in sessions of their own
            for pid in (group.paths["pids"] / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            time.sleep(0.05)
        group.remove()


def test_a_runs_cgroup_counts_its_processes_and_threads_as_proc_does():
    """The fork-bomb watch reads the run's cgroup (pids.current, one read) rather than scanning
    /proc, which a bomb's load can slow past the run's time limit: the count is /proc's."""
    code = ("import os, sys, threading, time\n"
            "threads = [threading.Thread(target=time.sleep, args=(30,), daemon=True) for _ in range(3)]\n"
            "[t.start() for t in threads]\n"
            "for _ in range(2):\n"
            "    if os.fork() == 0: time.sleep(30); os._exit(0)\n"
            "print('ready', flush=True); time.sleep(30)\n")
    with in_a_cgroup(code, processes=100) as (group, started):
        assert started.stdout.readline().strip() == "ready"
        pids = [started.pid, *(child.pid for child in psutil.Process(started.pid).children(recursive=True))]
        from_proc = sum(len(os.listdir(f"/proc/{pid}/task")) for pid in pids)
        assert from_proc == 1 + 3 + 2 and group.tasks() == from_proc


def test_runs_spinners_share_one_cpu_entity():
    """A fork bomb's spinning processes are one entity to the scheduler (the run's cpu cgroup),
    even when each calls setsid() and so escapes the autogroup Linux gives each session: on
    one CPU, 30 of them in a run's cgroup and one spinner outside it get about half each.
    Without the group the one outside got 0.06 s of 2 s here (a 31st), the bomb 1.87 s."""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    code = (f"import os\nos.sched_setaffinity(0, {{{cpu}}})\n"
            "for _ in range(29):\n"
            "    if os.fork() == 0: os.setsid(); break\n"  # a session, so an autogroup, each
            "else:\n"
            "    print('ready', flush=True)\n"
            "while True: pass\n")

    def ran_ns(pids):
        return sum(busy_machine._schedstat(f"/proc/{pid}/task/{pid}")[0] for pid in pids)

    with in_a_cgroup(code, processes=100) as (group, started):
        assert group.cpu_group(), "the run's cgroup has no cpu controller here: a bomb would take every CPU"
        assert started.stdout.readline().strip() == "ready"
        bomb = [started.pid, *(child.pid for child in psutil.Process(started.pid).children(recursive=True))]
        assert len(bomb) == 30
        outside = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True,
                                   preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        try:
            waits.wait_for(lambda: ran_ns([outside.pid]), what="the outside spinner's first run")
            before = ran_ns(bomb), ran_ns([outside.pid])
            time.sleep(1.0)  # the window whose CPU shares the test compares
            bomb_ran, outside_ran = ran_ns(bomb) - before[0], ran_ns([outside.pid]) - before[1]
        finally:
            outside.kill()
            outside.wait()
    # about 1:1 with the group; 1:30 without it
    assert outside_ran >= bomb_ran / 3, (outside_ran / 1e9, bomb_ran / 1e9)


def test_a_runs_cgroup_counts_the_forks_its_limit_refused_as_the_forks_do():
    """The second sign of a bomb: pids.events counts each fork pids.max refused, exactly
    the forks that failed with EAGAIN in the process that asked."""
    code = ("import os, time\n"
            "failed = 0\n"
            "for _ in range(7):\n"
            "    try:\n"
            "        if os.fork() == 0: time.sleep(30); os._exit(0)\n"
            "    except BlockingIOError:\n"
            "        failed += 1\n"
            "print(failed, flush=True); time.sleep(30)\n")
    with in_a_cgroup(code, processes=4) as (group, started):
        failed = int(started.stdout.readline())
        assert (failed, group.refused_forks(), group.tasks()) == (4, 4, 4)  # itself and 3 children


def test_children_over_memory_limit_stop(tmp_path):
    """Each child stays under the per-process limit; together they pass the run's."""
    probe = isolation.Cgroup.create(1 << 30, 100)
    if probe is None:
        pytest.fail("no cgroup can be made here as root: the run's memory limit cannot be tested")
    probe.remove()
    hog = ("import os, time\n"
           "for _ in range(6):\n"
           "    if os.fork() == 0:\n"
           "        block = bytearray(200 << 20)\n"
           "        for i in range(0, len(block), 4096):\n"
           "            block[i] = 1\n"
           "        time.sleep(60)\n"
           "        os._exit(0)\n"
           "time.sleep(60)")
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "labkit", "display_name": "labkit",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("from labkit.instructor.basics import exports\n"
                                          "exports.save(['before'], {}, [])"),
                nbformat.v4.new_code_cell(hog)]
    lease = UidLease(1)
    limits = sandbox.Limits(timeout_s=90, run_memory_bytes=600 << 20)
    base = sandbox.make_base()
    try:
        path = sandbox.prepare_workdir(base / "work", nb, "hog", uid=lease.uids[0])
        run = sandbox.run_notebook(path, base / "work", profile=None, limits=limits, uid=lease.uids[0])
    finally:
        shutil.rmtree(base, ignore_errors=True)
        lease.close()
    assert run.outcome == "memory", (run.outcome, run.message)
    assert "600 MiB" in run.message
    assert run.elapsed_s < 30  # stopped at the first kill, not when the hog ends (60 s)
    assert "before" in exports.read(run.exports.decode())


# ---------------------------------------------------------------------------
# the student's own functions from earlier notebooks, adopted in the run as on their machine


def test_grading_takes_earlier_functions(tmp_path):
    """Grading takes the functions a student wrote in earlier notebooks and not the stubs."""
    from labkit.instructor.grading.grader import _earlier_functions
    from labkit.instructor.basics.submissions import handed_in

    def earlier_in(notebook, path):
        return _earlier_functions(handed_in(path, notebook), notebook)

    folder = tmp_path / "ana"
    folder.mkdir()
    teacher = nbformat.read(paths.NOTEBOOKS / "01_proc_service.ipynb", as_version=4)
    released, _ = release.release_notebook(nbformat.from_dict(teacher), "01_proc_service")
    nbformat.write(released, folder / "01_proc_service.ipynb")
    later = ("02_multiplexing", folder / "02_multiplexing.ipynb")
    assert earlier_in(*later) == {}  # the stubs as released: nothing to try
    nbformat.write(teacher, folder / "01_proc_service.ipynb")  # solved, as the instructor's
    found = earlier_in(*later)
    assert set(found) == {"procstat_parse", "ev_poll"}
    assert found == {name: editions.written_in(teacher, name) for name in found}
    assert earlier_in("01_proc_service", folder / "01_proc_service.ipynb") == {}  # its own
    (folder / "04_write_strategies.ipynb").symlink_to(paths.NOTEBOOKS / "04_write_strategies.ipynb")
    assert "fill_iovec" not in earlier_in("07_your_server", folder / "07.ipynb")  # a link


def test_earlier_function_adopted_if_passing(tmp_path):
    """A runs lab adopts an earlier function only where its visible check passes there."""
    lab = tmp_path / "lab"
    lab_copy.copy(lab)
    procstat_c = (paths.CSRC / "services" / "procstat.c").read_text()
    solved = editions.function_text(procstat_c, "procstat_parse")
    wrong = solved.replace("{", "{\n    return -1;", 1)  # compiles, parses nothing
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, sys\n"
        "from labkit import build\n"
        "from labkit.exercises.c_exercises import adopt_earlier\n"
        "from labkit.stubs import which_edition\n"
        "said = adopt_earlier(json.loads(sys.argv[1]))\n"
        "print(json.dumps([said, build.parse_stat_line('7 (a) b) S ' + '1 ' * 20),\n"
        "                  [e.function for e in which_edition.still_stubbed()]]))\n")

    def adopt(functions):
        ran = subprocess.run([sys.executable, str(probe), json.dumps(functions)], cwd=lab, capture_output=True,
                             text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(lab),
                                                          "HOME": str(tmp_path / "home")})
        assert ran.returncode == 0, ran.stderr[-3000:]
        return json.loads(ran.stdout.splitlines()[-1])

    said, parsed, stubbed = adopt({"procstat_parse": wrong, "ev_poll": "int ev_poll(void) { not C"})
    assert [line.split(": ", 1)[1][:30] for line in said] == ["its visible check did not pass"] * 2, said
    assert parsed is None and "procstat_parse" in stubbed and "ev_poll" in stubbed  # the stubs stay
    said, parsed, stubbed = adopt({"procstat_parse": solved})
    assert said == ["exercise 1.1 (procstat_parse) from 01_proc_service: adopted"]
    assert parsed == {"pid": 7, "name": "a) b", "utime": 1, "stime": 1}  # the programs run the student's own
    assert "procstat_parse" not in stubbed and solved in (lab / "csrc" / "services" / "procstat.c").read_text()

"""labkit.build: make driven from Python, and the servers' procstat parser through cffi.

Build tests work on a copy of csrc/ in a temporary directory: the real tree
is never broken, and other builds running at the same time are not disturbed.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from labkit import build, makefile, paths, procstat
from labkit.errors import BuildError, LabError

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def csrc_copy(tmp_path) -> Path:
    copy = tmp_path / "csrc"
    shutil.copytree(paths.CSRC, copy)
    return copy


@pytest.fixture(scope="module")
def built_once(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of csrc/ and its build, made once for the tests that start from a built tree."""
    top = tmp_path_factory.mktemp("built")
    shutil.copytree(paths.CSRC, top / "csrc")
    build.build(csrc=top / "csrc", build_dir=top / "build")
    return top / "csrc", top / "build"


@pytest.fixture
def built_copy(built_once, tmp_path) -> tuple[Path, Path]:
    """built_once copied here, modification times kept and make's dependency files pointed at
    the copy (as paths.own_sources seeds a user's build): make finds it up to date."""
    csrc, build_dir = tmp_path / "csrc", tmp_path / "build"
    paths.copy_built_tree(*built_once, csrc, build_dir)
    return csrc, build_dir


def _outputs(build_dir: Path) -> dict:
    """Every file make produced, with its modification time."""
    return {p: p.stat().st_mtime_ns for p in build_dir.rglob("*") if p.is_file()}


def test_second_build_compiles_nothing(built_copy):
    csrc, build_dir = built_copy
    assert (build_dir / "bin" / "loadgen").is_file()
    for model in build.models(csrc):
        assert os.access(build_dir / "bin" / model, os.X_OK), model
    before = _outputs(build_dir)
    assert before

    build.build(csrc=csrc, build_dir=build_dir, force=True)  # make itself, not build()'s memory of it
    assert _outputs(build_dir) == before  # nothing recompiled, nothing relinked


def _liburing_header() -> bool:
    """Whether liburing's header is where csrc/Makefile looks for it (LIBURING_H)."""
    return any(Path(h).exists() for h in makefile.make_print("LIBURING_H").split())


def _programs_make_starts(csrc: Path, build_dir: Path, *args: str) -> list[str]:
    """The programs `make -C csrc` starts (strace's execve of each process but make's own)."""
    trace = build_dir.parent / "execve.trace"
    done = subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-e", "signal=none", "-o", str(trace),
                           "make", "-s", "-C", str(csrc), f"BUILD={build_dir}", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    started = [line.split('execve("', 1)[1].split('"', 1)[0] for line in trace.read_text().splitlines()
               if 'execve("' in line and "= 0" in line]
    return [Path(program).name for program in started[1:]]


def test_make_probes_liburing_once_per_build_folder(built_copy):
    """make runs before every sweep: once the build folder holds the answer to the liburing
    probe (a compile and a link), make starts no process but its recipes' (none for a
    build with nothing to do)."""
    csrc, build_dir = built_copy
    (build_dir / "liburing.mk").unlink(missing_ok=True)
    first = _programs_make_starts(csrc, build_dir, "print-MODELS")
    header = _liburing_header()
    assert ("cc" in first) == header and (build_dir / "liburing.mk").exists() == header, first
    assert _programs_make_starts(csrc, build_dir, "print-MODELS") == ["echo"]  # its recipe alone
    assert _programs_make_starts(csrc, build_dir) == []  # a build with nothing to do
    # and `make` with no goal (make build, an install's build) still builds every program
    assert makefile.make(["-s", "print-.DEFAULT_GOAL"], csrc, build_dir).stdout.strip() == "all"


def test_unwritable_build_folder_is_quiet(csrc_copy, tmp_path):
    """An install's build folder, which its users cannot write (here a path under a file,
    which not even root can make): make still finds liburing, and prints only what it was
    asked for (labkit reads `make print-PROCSTAT_SRC`'s output as a path)."""
    (tmp_path / "a-file").write_text("")
    unwritable = tmp_path / "a-file" / "build"
    printed = makefile.make(["-s", "print-PROCSTAT_SRC"], csrc_copy, unwritable)
    assert (printed.returncode, printed.stdout) == (0, f"{csrc_copy}/services/procstat.c\n")
    header = _liburing_header()
    models = makefile.make(["-s", "print-MODELS"], csrc_copy, unwritable).stdout.split()
    assert ("uring" in models) == header and "epoll" in models


def test_an_edited_source_is_recompiled(built_copy):
    csrc, build_dir = built_copy
    loadgen = build_dir / "bin" / "loadgen"
    first = loadgen.stat().st_mtime_ns
    source = csrc / "loadgen" / "loadgen.c"
    source.write_text(source.read_text() + "\n/* edited */\n")
    os.utime(source, ns=(first + 10**9, first + 10**9))
    build.build(csrc=csrc, build_dir=build_dir)
    assert loadgen.stat().st_mtime_ns > first


def test_make_runs_again_only_when_a_source_changed_or_an_output_is_gone(built_copy, monkeypatch):
    """How many times build() runs make after each change: none when this process built the
    same tree and nothing under csrc/ changed (a make with nothing to do costs 60 ms, and a
    point asks three times)."""
    csrc, build_dir = built_copy
    runs = []
    real_make = build.make
    monkeypatch.setattr(build, "make", lambda *args: runs.append(args) or real_make(*args))

    def runs_of(action) -> int:
        before = len(runs)
        action()
        return len(runs) - before

    source = csrc / "servers" / "epoll.c"
    notes = csrc / "servers" / "notes.txt"
    steps = [  # (what happens before build(), how many times make runs)
        ("the first build in this process", lambda: None, 1),
        ("nothing changed", lambda: None, 0),
        ("a source edited", lambda: source.write_text(source.read_text() + "\n/* edited */\n"), 1),
        ("nothing changed since", lambda: None, 0),
        ("a new file", lambda: notes.write_text("x"), 1),
        ("a file removed", notes.unlink, 1),
        ("the bin folder removed", lambda: shutil.rmtree(build_dir / "bin"), 1),
    ]
    for what, change, expected in steps:
        assert runs_of(lambda: (change(), build.build(csrc=csrc, build_dir=build_dir))) == expected, what
    assert os.access(build_dir / "bin" / "epoll", os.X_OK)
    assert runs_of(lambda: build.build(csrc=csrc, build_dir=build_dir, force=True)) == 1, "forced"

    # The sanitizer build is another output: its own make, with SAN=1 (not run here: 5 s), of
    # the lab's programs ("lab": a student's own server, servers/mine.c, is built apart).
    monkeypatch.setattr(build, "make", lambda args, *where: runs.append(args) or
                        subprocess.CompletedProcess(args, 0, ""))
    (build_dir / "san" / "bin").mkdir(parents=True, exist_ok=True)
    assert runs_of(lambda: build.build(True, csrc=csrc, build_dir=build_dir)) == 1 and runs[-1] == ["SAN=1", "lab"]


def test_a_broken_source_raises_build_error_with_gccs_own_message(csrc_copy, tmp_path):
    # common/util.c is compiled into every program, so make reaches it whatever it builds first.
    broken = csrc_copy / "common" / "util.c"
    broken.write_text(broken.read_text() + "\nint lab_broken_line = ;\n")
    with pytest.raises(BuildError) as caught:
        build.build(csrc=csrc_copy, build_dir=tmp_path / "build")
    output = caught.value.output
    assert "util.c:" in output and "error:" in output  # file:line: error: ... as gcc printed it
    assert "lab_broken_line" in output or "expected expression" in output
    assert caught.value.fix


def test_missing_compiler_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(makefile.shutil, "which", lambda tool: None)
    with pytest.raises(LabError) as caught:
        build.build(build_dir=tmp_path / "build")
    assert "apt-get install build-essential" in caught.value.fix


def test_models_follow_the_files_in_servers(csrc_copy):
    models = build.models(csrc_copy)
    assert models == sorted(p.stem for p in (paths.CSRC / "servers").glob("*.c"))
    (csrc_copy / "servers" / "my_new_model.c").write_text("int main(void) { return 0; }\n")
    assert "my_new_model" in build.models(csrc_copy)


def test_unknown_program_lists_the_models():
    with pytest.raises(LabError) as caught:
        build.binary("no_such_model")
    for model in build.models():
        assert model in caught.value.fix


def test_binary_builds_and_returns_an_executable():
    loadgen = build.binary("loadgen")
    assert loadgen.parent == paths.BIN and os.access(loadgen, os.X_OK)


# --- procstat through cffi ---------------------------------------------------


def test_parse_stat_line_keeps_spaces_and_parentheses_in_the_name():
    line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 120 0 0 0 17 5 0 0 20 0 1 0 100 1000 10"
    assert build.parse_stat_line(line) == {"pid": 4242, "utime": 17, "stime": 5, "name": "my (odd) name"}


def test_parse_stat_line_rejects_garbage():
    assert build.parse_stat_line("not a stat line") is None
    assert build.parse_stat_line("") is None


def test_parse_stat_line_matches_psutil_for_this_process():
    with open(f"/proc/{os.getpid()}/stat") as stat:
        parsed = build.parse_stat_line(stat.read())
    assert parsed["pid"] == os.getpid()
    assert parsed["name"] == psutil.Process().name()[:15]


def test_top_processes_agrees_with_psutil():
    ticks = os.sysconf("SC_CLK_TCK")
    busiest = {}
    for proc in psutil.process_iter(["cpu_times"]):
        times = proc.info["cpu_times"]
        if times is not None:
            busiest[proc.pid] = times.user + times.system
    top_by_psutil = max(busiest, key=busiest.get)

    top = build.top_processes(5)
    assert 1 <= len(top) <= 5
    assert top_by_psutil in [entry["pid"] for entry in top]
    totals = [entry["utime"] + entry["stime"] for entry in top]
    assert totals == sorted(totals, reverse=True)
    # The C code's ticks and psutil's seconds describe the same process.
    assert abs(totals[0] / ticks - max(busiest.values())) < 2.0


def test_procstat_is_compiled_once_per_source_version():
    first = build.procstat()
    assert build.procstat() is first
    assert Path(first.__file__).parent == paths.CFFI_DIR
    assert first.__name__.startswith("_procstat_")


def test_processes_that_find_procstat_missing_at_once_each_get_it(tmp_path):
    """Eight processes load the parser's module from an empty folder at the same moment, as two
    graders started together do on a fresh build: each compiles its own and renames it into
    place, and every one of them loads it (a temporary name shared between them would let
    one take another's file away mid-build); nothing of the builds is left beside the module."""
    script = ("import sys; from labkit import paths, procstat; from pathlib import Path\n"
              "paths.CFFI_DIR, paths.INSTALL_BUILD = Path(sys.argv[1]), Path(sys.argv[1]).parent / 'none'\n"
              "sys.stdin.read()\n"  # the start line: all eight begin together
              "print(procstat.module().lib.procstat_top is not None)")
    folder = tmp_path / "cffi"
    started = [subprocess.Popen([sys.executable, "-c", script, str(folder)], cwd=paths.ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    for process in started:  # the start line to each, before any is waited for
        process.stdin.write("go")
        process.stdin.close()
    outcomes = [(process.stdout.read(), process.stderr.read(), process.wait(timeout=120))[:2] for process in started]
    assert [(process.returncode, out.strip()) for process, (out, _) in zip(started, outcomes)] == [(0, "True")] * 8, \
        [err[-1500:] for _, err in outcomes]
    assert [p.suffix for p in folder.iterdir()] == [".so"], sorted(p.name for p in folder.iterdir())


def test_procstat_compile_error_is_a_build_error_with_gccs_message(csrc_copy, tmp_path, monkeypatch):
    procstat_c = csrc_copy / "services" / "procstat.c"
    procstat_c.write_text(procstat_c.read_text() + "\nstatic int lab_broken = ;\n")
    monkeypatch.setattr(paths, "CSRC", csrc_copy)
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    monkeypatch.setattr(paths, "CFFI_DIR", tmp_path / "build" / "cffi")
    monkeypatch.setattr(procstat, "_module", None)
    with pytest.raises(BuildError) as caught:
        build.procstat()
    assert "procstat.c:" in caught.value.output and "error:" in caught.value.output

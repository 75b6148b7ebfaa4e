"""The capstone: the battery judged on servers whose answers are known, the template built
as a student gets it and as the instructor holds it, and a model of the student's own in
the lab's build.

Two student models are kept: the template's reference solution (threads plus epoll, written
as a student would) and the same with a classic bug, flush_output() reporting everything it
offered to write() as written (tests/data/capstone/no_partial_write.c).  The battery itself
is checked first on the lab's own models, whose behaviour the rest of the suite asserts:
a bug in a case would show there.  The two graded as a class are test_capstone_grading's."""

import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import serverproc
from capstone_servers import reference, skeleton, with_bug
from labkit import battery, capstone, paths
from labkit.errors import BuildError


def failed(report: battery.Report) -> set[str]:
    return set(report.failed)


# The lab's models, whose behaviour other tests assert, through the whole visible battery:
# each fails exactly what its design cannot do.  iterative serves one client at a time, so
# the clients behind a silent one wait for ever; every other design passes everything.
LAB_MODELS = [
    ("threaded", set()),
    ("epoll", set()),
    ("pool", set()),            # 2 workers: one holds the silent client, the other serves the rest
    ("uring", set()),
    ("iterative", {"many clients, behind a silent one"}),
]


@pytest.mark.parametrize("model, fails", LAB_MODELS, ids=[m for m, _ in LAB_MODELS])
def test_the_battery_fails_a_lab_model_only_where_its_design_cannot_serve(model, fails):
    if model not in serverproc.MODELS:
        pytest.fail(f"{model} is not built here (make -C csrc print-MODELS): the battery cannot be checked on it")
    report = battery.run_binaries(serverproc.bin_dir() / model, serverproc.bin_dir(san=True) / model)
    print(report)
    assert failed(report) == fails, str(report)
    if fails:
        message = next(r.message for r in report.results if not r.passed)
        assert "silent" in message and "were not served" in message


def test_the_reference_solution_passes_every_case_visible_and_hidden():
    visible = battery.run(reference())
    print(visible)
    assert visible.passed, str(visible)
    assert {r.case.group for r in visible.results} | {"sanitizers"} == set(battery.GROUPS)
    hidden = battery.run(reference(), [g for g in battery.GROUPS if g != "sanitizers"], hidden=True)
    print(hidden)
    assert hidden.passed, str(hidden)


def test_the_partial_write_bug_fails_the_slow_reader_and_the_message_names_the_fix():
    """The classic bug passes every request/reply case, and loses bytes for a client that
    reads late: the echo case fails, and its message says what to fix."""
    report = battery.run(with_bug(), [g for g in battery.GROUPS if g != "sanitizers"])
    print(report)
    assert "echo: reads nothing until the output is full" in failed(report)
    assert failed(report) <= {"echo: reads nothing until the output is full", "top: 1000-row replies read late"}
    echo = next(r for r in report.results if r.case.name == "echo: reads nothing until the output is full")
    assert "dropped" in echo.message and "session_did_write(n)" in echo.message, echo.message
    with pytest.raises(AssertionError, match="session_did_write"):
        battery.check(with_bug(), "slow_reader")
    assert battery.check(reference(), "slow_reader").startswith("2 case(s) passed")


class UnboundedEcho:
    """An echo server with no bound on its output: a thread reads everything a client sends
    into memory at once, another writes it back when it can.  Correct bytes, no back-pressure."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        conn, _ = self.listener.accept()
        backlog = queue.SimpleQueue()
        threading.Thread(target=self._write, args=(conn, backlog), daemon=True).start()
        while chunk := conn.recv(1 << 20):
            backlog.put(chunk)
        backlog.put(b"")

    @staticmethod
    def _write(conn, backlog):
        while chunk := backlog.get():
            conn.sendall(chunk)


def test_a_server_whose_output_has_no_bound_fails_the_slow_reader_whatever_the_kernel_buffers():
    """The verdict asks for more bytes than the kernel's buffers can hold (tcp_rmem's and
    tcp_wmem's largest, which autotuning reaches on its own, differ by machine and kernel)."""
    case = next(c for c in battery.CASES if c.name == "echo: reads nothing until the output is full")
    with pytest.raises(battery.CaseFailed, match="more than the kernel's buffers can hold .*: its output has no bound"):
        case.run(UnboundedEcho().port, battery.VISIBLE)


def test_a_loop_that_retries_accept_on_emfile_is_caught_spinning():
    """accept4() in place of server_accept(): out of descriptors, accept fails at once with
    EMFILE and leaves the connection queued, and the acceptor tries again: a spin."""
    text = reference()
    assert "server_accept(cfg->listen_fd, false)" in text
    spinning = text.replace("server_accept(cfg->listen_fd, false)", "accept4(cfg->listen_fd, NULL, NULL, SOCK_CLOEXEC)")
    report = battery.run(spinning, "out_of_descriptors")
    print(report)
    assert not report.passed and "it spins" in report.results[0].message, str(report)


def test_the_students_skeleton_compiles_and_says_what_to_write():
    text = skeleton()
    assert "BEGIN SOLUTION" not in text and "epoll_wait" not in text, "the skeleton holds the answer"
    report = battery.run(text, "protocol")
    assert not report.passed
    assert "serve() is not written yet" in report.results[0].message, report.results[0].message


def test_a_compile_error_names_the_students_file_and_line():
    broken = reference().replace("static const service_t *service;", "static const service_t *service", 1)
    with pytest.raises(BuildError) as raised:
        capstone.build_text(broken)
    assert "mine.c:" in raised.value.output and "error" in raised.value.output


def test_a_server_that_does_not_compile_leaves_the_lab_built_and_is_refused_by_name(tmp_path):
    """In the student's own tree: the lab's programs build, mine's error is raised when mine is
    asked for, and no stale mine is left to be measured."""
    script = """
import sys
from labkit import build, capstone, paths
capstone.start()
assert "mine" in build.models(), build.models()
built = build.build()
assert (built / "mine").is_file()
path = capstone.path()
path.write_text(path.read_text().replace("static const service_t *service;", "static const service_t *service", 1))
built = build.build()
assert (built / "epoll").is_file() and not (built / "mine").exists()
try:
    build.binary("mine")
except build.BuildError as failure:
    print("REFUSED", failure.output.count("mine.c:"))
print("HOME", paths.HOME, paths.CSRC)
"""
    env = dict(os.environ, LABKIT_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "REFUSED" in done.stdout and "REFUSED 0" not in done.stdout, done.stdout
    assert f"HOME {tmp_path / 'home'} {tmp_path / 'home' / 'csrc'}" in done.stdout
    assert not (paths.ROOT / "csrc" / capstone.SOURCE).exists(), "the lab's own csrc/ was written"


def test_start_makes_the_file_once_and_never_overwrites_it(tmp_path):
    script = """
from labkit import capstone
first = capstone.start()
first.write_text(first.read_text() + "\\n/* mine now */\\n")
second = capstone.start()
assert first == second and second.read_text().endswith("/* mine now */\\n")
print(capstone.source()[-16:])
"""
    env = dict(os.environ, LABKIT_HOME=str(tmp_path / "home"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "mine now" in done.stdout, done.stdout + done.stderr


STANDING = [
    # rows (model, clients, value), metric direction -> the sentence's end
    ([("mine", 10, 5.0), ("mine", 50, 9.0), ("epoll", 50, 10.0), ("threaded", 50, 7.0), ("epoll", 10, 1.0)], True,
     "at clients = 50 (higher is better): epoll 10; mine 9; threaded 7: mine is 2nd of 3"),
    ([("mine", 50, 9.5), ("epoll", 50, 10250.0)], False,
     "(lower is better): mine 9.500; epoll 10,250: mine is 1st of 2"),
    ([("epoll", 50, 10.0)], True, "mine has no successful measurement"),
    # three models keeping up with the same offered rate: no rank between them
    ([("mine", 50, 3001.0), ("epoll", 50, 3001.4), ("threaded", 50, 2999.0)], True,
     "mine ties for 1st of 3 (with epoll, threaded, within 1%)"),
    ([("mine", 50, 99.5), ("epoll", 50, 120.0), ("threaded", 50, 100.0), ("pool", 50, 80.0)], True,
     "mine ties for 2nd of 4 (with threaded, within 1%)"),
    ([("mine", 50, 2.0), ("epoll", 50, 1.0), ("threaded", 50, 2.01)], False,
     "mine ties for 2nd of 3 (with threaded, within 1%)"),
]


@pytest.mark.parametrize("rows, higher, says", STANDING)
def test_standing_places_mine_among_the_models_at_the_largest_point(rows, higher, says):
    import pandas as pd

    df = pd.DataFrame([{"model": m, "clients": c, "rps": v, "status": "ok"} for m, c, v in rows])
    assert capstone.standing(df, "rps", higher).endswith(says) or says in capstone.standing(df, "rps", higher), \
        capstone.standing(df, "rps", higher)


def test_a_check_on_a_server_that_does_not_compile_fails_with_gccs_words():
    broken = reference().replace("static const service_t *service;", "static const service_t *service", 1)
    with pytest.raises(AssertionError, match=r"mine\.c:\d+"):
        battery.check(broken, "protocol")


def test_under_an_address_space_limit_the_sanitizer_cases_are_not_measurable_not_failed():
    """An ASan build reserves terabytes of address space: under a hard RLIMIT_AS it cannot
    start, which is the machine's limit, not the server's fault: the check errs, saying so."""
    script = """
import resource
from labkit import battery
from capstone_servers import reference
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
report = battery.run(reference(), "sanitizers")
print([r.unmeasurable for r in report.results])
try:
    battery.check(reference(), "sanitizers")
except AssertionError:
    print("FAILED")
except Exception as problem:
    print("ERRED", type(problem).__name__, "RLIMIT_AS" in str(problem))
"""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[True, True" in done.stdout and "ERRED LabError True" in done.stdout, done.stdout

"""The capstone: the battery judged on servers whose answers are known, the template built
as a student gets it and as the instructor holds it, and a model of the student's own in
the lab's build.

Two student models are kept: the template's reference solution (threads plus epoll, written
as a student would) and the same with a classic bug, flush_output() reporting everything it
offered to write() as written (tests/data/capstone/no_partial_write.c).  The battery itself
is checked first on the lab's own models, whose behaviour the rest of the suite asserts:
a bug in a case would show there.  The one with the bug is graded as a class in
test_capstone_grading."""

import html
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import serverproc
from capstone_servers import RESOURCE_BUGS, reference, skeleton, still_watched, with_bug
from labkit import battery, capstone, paths
from labkit.errors import BuildError


def failed(report: battery.Report) -> set[str]:
    return set(report.failed)


# The lab's models, whose behaviour other tests assert, through the visible battery but its
# resource group (which every model meets below, test_every_lab_model_uses_nothing_idle...):
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
    report = battery.run_binaries(serverproc.bin_dir() / model, serverproc.bin_dir(san=True) / model,
                                  [g for g in battery.GROUPS if g != "resources"])  # every model's: below
    print(report)
    assert failed(report) == fails, str(report)
    if fails:
        message = next(r.message for r in report.results if not r.passed)
        assert "silent" in message and "were not served" in message


def test_the_reference_solution_passes_every_case_visible_and_hidden():
    visible = battery.run(reference())
    print(visible)
    assert visible.passed, str(visible)
    # what it used, said beside each passed resource case, in the table and in its text
    used = {r.case.name: r.measured for r in visible.results if r.case.group == "resources"}
    assert re.search(r"s of CPU in [\d.]+ s with 10 silent clients", used[IDLE]), used
    assert "descriptors after 120 connections came and went" in \
        used["top: descriptors back after connections come and go"]
    assert re.search(r"moved it by [+-]\d+ KiB, then [+-]\d+ KiB", used["memory back after connections come and go"])
    assert used[IDLE] in repr(visible) and html.escape(used[IDLE]) in visible._repr_html_()
    assert {r.case.group for r in visible.results} | {"sanitizers"} == set(battery.GROUPS)
    hidden = battery.run(reference(), [g for g in battery.GROUPS if g != "sanitizers"], hidden=True)
    print(hidden)
    assert hidden.passed, str(hidden)


def test_partial_write_bug_fails_slow_reader():
    """The classic bug passes every request/reply case, and loses bytes for a client that
    reads late: the echo case fails, and its message says what to fix."""
    report = battery.run(with_bug(), [g for g in battery.GROUPS if g not in ("sanitizers", "resources")])
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


def test_unbounded_output_fails_slow_reader():
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


def test_server_that_does_not_compile_is_refused(tmp_path):
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


FEW = "too few replications to tell (a rank test needs 4 of each)"
STANDING = [
    # rows (model, clients, value), metric direction -> the sentence's end
    ([("epoll", 50, 10.0)], True, "mine has no successful measurement"),
    # one run each, no interval of its own (a rate): the noise cannot be told, so no rank
    ([("mine", 10, 5.0), ("mine", 50, 9.0), ("epoll", 50, 10.0), ("threaded", 50, 7.0), ("epoll", 10, 1.0)], True,
     f"at clients = 50 (higher is better): epoll 10; mine 9; threaded 7: mine ties for 1st of 3 (with epoll: {FEW}; "
     f"threaded: {FEW})"),
    # three repeats each: [min, max] is a 75% interval, and a rank test of 3 and 3 cannot reach 5%
    ([("mine", 50, v) for v in (9.0, 9.1, 9.2)] + [("epoll", 50, v) for v in (9.3, 9.4, 9.5)], True,
     f"mine ties for 1st of 2 (with epoll: {FEW})"),
    # eight replications each: the rank test decides
    ([("mine", 50, 9.0 + v / 100) for v in range(8)] + [("epoll", 50, 9.5 + v / 100) for v in range(8)], True,
     "mine is 2nd of 2"),
    ([("mine", 50, v) for v in (100, 150, 200, 120, 170, 110, 190, 140)]
     + [("epoll", 50, v) for v in (110, 130, 190, 160, 105, 180, 125, 145)], True,
     "mine ties for 1st of 2 (with epoll: rank test on 8 and 8 replications: p = 0."),
]


@pytest.mark.parametrize("rows, higher, says", STANDING)
def test_standing_places_mine_among_the_models_at_the_largest_point(rows, higher, says):
    import pandas as pd

    df = pd.DataFrame([{"model": m, "clients": c, "rps": v, "status": "ok"} for m, c, v in rows])
    assert says in capstone.standing(df, "rps", higher), capstone.standing(df, "rps", higher)


def test_one_run_each_is_ranked_by_the_runs_own_intervals():
    import pandas as pd

    rows = [{"model": "mine", "lat_p99_us": 900.0, "lat_p99_low_us": 850.0, "lat_p99_high_us": 950.0},
            {"model": "epoll", "lat_p99_us": 1500.0, "lat_p99_low_us": 1400.0, "lat_p99_high_us": 1600.0}]
    df = pd.DataFrame([{**row, "lat_p99_confidence": 0.95, "status": "ok"} for row in rows])
    assert capstone.standing(df, "lat_p99_us", higher_is_better=False).endswith("mine is 1st of 2")


def test_a_check_on_a_server_that_does_not_compile_fails_with_gccs_words():
    broken = reference().replace("static const service_t *service;", "static const service_t *service", 1)
    with pytest.raises(AssertionError, match=r"mine\.c:\d+"):
        battery.check(broken, "protocol")


def test_sanitizer_cases_under_address_limit():
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
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))  # tests/: capstone_servers
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[True, True" in done.stdout and "ERRED LabError True" in done.stdout, done.stdout


# ---- what a server uses (labkit/battery/resources.py)

IDLE = "idle clients: no CPU while they say nothing"
# Every lab model through the resource cases, and those run under ASan too: each passes, but
# the two designed to poll without ever sleeping (their lesson: seed 002's 2a and 2b).
BACK_PRESSURE = "echo: no CPU while a client that reads nothing holds the server back"
RESOURCE_FAILS = {  # and so, for the same reason, while a client that reads nothing holds them back
    "busypoll": {IDLE, BACK_PRESSURE},  # tries every socket in turn, round after round: a whole CPU while idle
    "aio": {IDLE, BACK_PRESSURE},       # polls each request's aio_error(), in a loop that never waits
}


def test_lab_models_give_back_resources():
    """Every lab model uses nothing idle and gives back what connections took."""
    jobs = [(model, case, san) for model in serverproc.MODELS
            for case, san in battery.cases(["resources", "sanitizers"]) if case.group == "resources"]

    def one(job):
        model, case, san = job
        return model, battery.run_case(serverproc.bin_dir(san=san) / model, case, battery.VISIBLE, san)

    serverproc.bin_dir(san=True)  # built once, before the threads
    with ThreadPoolExecutor(8) as pool:  # mostly waiting: the idle case's second, the servers' closes
        results = list(pool.map(one, jobs))
    failed: dict[str, set] = {}
    for model, result in results:
        if not result.passed:
            failed.setdefault(model, set()).add(result.label)
    assert len(serverproc.MODELS) >= 15 and failed == RESOURCE_FAILS, "\n".join(
        f"{model}: {r.label}: {r.message}" for model, r in results if not r.passed)
    spun = next(r for model, r in results if model == "busypoll" and r.case.name == IDLE)
    assert "it never sleeps while nothing happens" in spun.message, spun.message


# Each planted bug (tests/capstone_servers.py): the case it must fail, and words of its message.
# (The reference passes every case, test_the_reference_solution_passes_every_case_visible_and_hidden;
# each bug is held to its own case only, which keeps the suite within its minutes.)
RESOURCE_VERDICTS = [
    ("always watches EPOLLOUT", IDLE, "it never sleeps"),
    ("polls with a zero timeout", IDLE, "it never sleeps"),
    ("always watches EPOLLIN", BACK_PRESSURE, "with its input full, the server used"),
    ("keeps a descriptor per connection", "echo: descriptors back after connections come and go",
     "anon_inode:[eventpoll] x 120"),
    ("keeps each session", "memory back after connections come and go", "bytes a connection"),
    ("keeps the session of a reset connection", "memory back after connections come and go", "bytes a connection"),
]


@pytest.mark.parametrize("bug, name, says", RESOURCE_VERDICTS, ids=[bug for bug, *_ in RESOURCE_VERDICTS])
def test_leaking_server_fails_that_case(bug, name, says):
    """A server that answers right but keeps what it used fails that case naming the fix."""
    case = next(c for c in battery.CASES if c.name == name)
    result = battery.run_case(capstone.build_text(RESOURCE_BUGS[bug]()), case)
    print(result.message)
    assert not result.passed and not result.unmeasurable and says in result.message, result.message
    report = battery.Report([result])
    assert f"what to fix: {case.fix}" in str(report)


def test_use_after_free_caught_under_asan():
    """Each worker touches the connection it closed before: harmless at its first close, a
    use after free from its second.  The protocol cases under ASan (a connection or two on
    two workers) never get there; connections coming and going do, and the report names
    the function.  (The ASan build is of this text: a scratch copy of the lab's build once
    ran the lab's own ASan `mine` in its place.)"""
    report = battery.run(RESOURCE_BUGS["uses a closed connection at the next close"](), "sanitizers")
    print(report)
    late = {f"{s}: descriptors back after connections come and go (ASan+UBSan)" for s in ("top", "echo", "sink")}
    assert failed(report) & late and failed(report) <= late, str(report)
    caught = next(r for r in report.results if not r.passed)
    assert "heap-use-after-free" in caught.message and "in close_conn" in caught.message, caught.message


PIDFD_GETFD = 438  # pidfd_getfd(2), Linux 5.6: the same number on every architecture


def _closed_while_held(server, reset: bool) -> str:
    """A client sends a whole PUT and closes (or resets) while this process holds a copy of
    the server's socket for it (pidfd_getfd, as `ss -p` or lsof does for a moment through
    /proc/PID/fd); then a second client is served.  What went wrong, or ""."""
    import ctypes
    import struct

    import psutil

    client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    client.sendall(b"PUT 5\nhello")
    assert client.recv(100).startswith(b"OK"), "the sink did not answer its PUT"
    accepted = [c.fd for c in psutil.Process(server.pid).net_connections("tcp")
                if c.raddr and c.raddr.port == client.getsockname()[1]]
    assert len(accepted) == 1, f"the server holds {accepted} for one connection"
    pidfd = os.pidfd_open(server.pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        held = libc.syscall(PIDFD_GETFD, pidfd, accepted[0], 0)
        assert held >= 0, f"pidfd_getfd: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(pidfd)
    try:
        if reset:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        time.sleep(0.5)  # the worker's turns on the closed connection
        if server.died():
            return f"the server is gone{server.died()}"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as second:
            second.sendall(b"PUT 2\nhi")
            answer = second.recv(100)
        return "" if answer.startswith(b"OK") else f"the next client got {answer!r}"
    except OSError as failure:
        return f"the next client failed: {failure}{server.died()}"
    finally:
        os.close(held)


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_close_with_socket_held_elsewhere(reset):
    """close() takes a socket out of an epoll set only with its last reference (epoll(7),
    Q6): the reference takes it out itself first, and lives on; a template that does
    not is handed the connection it freed, and ASan says so (the plain build dies of SIGSEGV
    in the battery when other tests read processes' descriptors with `ss -p` and psutil)."""
    from labkit.battery import _env, refusals
    from labkit.scratch import ScratchServer

    server = ScratchServer(capstone.build_text(reference()), "mine (the reference)", "sink", args=["--workers", "1"])
    try:
        assert _closed_while_held(server, reset) == ""
    finally:
        server.stop()
    room = refusals.room_for_asan()
    assert not isinstance(room, str), room
    server = ScratchServer(capstone.build_text(still_watched(), sanitize=True), "mine (still watched, ASan)", "sink",
                           ready_timeout=10.0, args=["--workers", "1"], prefix=room, env=_env(True))
    try:
        went_wrong = _closed_while_held(server, reset)
        report = server.server.stderr_text()
    finally:
        server.stop()
    assert went_wrong and "ERROR: AddressSanitizer: heap-use-after-free" in report, went_wrong


def _deny_io_uring():
    """Run in the child before exec: a seccomp filter that makes io_uring_setup fail with
    EPERM (as Docker's default profile does since 25.0), everything else allowed."""
    import ctypes
    import platform

    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[platform.machine()]  # AUDIT_ARCH_*
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    program = [(ld_w_abs, 0, 0, 4), (jeq_k, 0, 3, arch), (ld_w_abs, 0, 0, 0), (jeq_k, 0, 1, 425),
               (ret_k, 0, 0, 0x00050000 | 1),  # SECCOMP_RET_ERRNO | EPERM
               (ret_k, 0, 0, 0x7FFF0000)]      # SECCOMP_RET_ALLOW

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*[Filter(*row) for row in program])
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(Program(len(program), filters)), 0, 0) == 0  # PR_SET_SECCOMP, FILTER


def test_io_uring_refused_is_not_measurable():
    """A seccomp filter refuses io_uring_setup to the battery and its servers: the lab's uring
    model (which cannot start there) is not measurable in every case, saying why, and its
    check errs rather than fails; the epoll model beside it is judged as anywhere."""
    if "uring" not in serverproc.MODELS:
        pytest.fail("the uring model is not built here: the refusal cannot be checked")
    script = f"""
from pathlib import Path
from labkit import battery
from labkit.battery import refusals
print("refused:", refusals.io_uring_refused())
for model in ("uring", "epoll"):
    report = battery.run_binaries(Path({str(serverproc.bin_dir())!r}) / model, None, "protocol")
    print(model, [r.verdict for r in report.results])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          preexec_fn=_deny_io_uring)
    assert done.returncode == 0, done.stderr[-2000:]
    said = done.stdout
    assert "refused: not measurable here: this host refuses io_uring (io_uring_setup failed with EPERM" in said, said
    assert "uring ['not measurable here', 'not measurable here'" in said and "FAILED" not in said, said
    assert "epoll ['passed', 'passed', 'passed', 'passed']" in said, said


# (the server's CPU seconds while clients waited; a spinning process's beside it; spun?)
SPIN_VERDICTS = [
    (1.8, 1.9, True),    # a loop calling accept() again at once, on a quiet machine
    (0.3, 0.6, True),    # the same on a busy one: both got a share
    (0.01, 1.9, False),  # a server that waits for a descriptor
    (0.0, 0.0, False),   # a machine that ran neither (a busy one): no verdict, not "a quarter of nothing"
    (0.02, 0.05, False),  # too little for the yardstick to mean anything
]


@pytest.mark.parametrize("server, probe, spun", SPIN_VERDICTS)
def test_the_spin_verdict_needs_a_yardstick_that_ran(server, probe, spun):
    from labkit.battery.spin_probe import spins

    assert spins(server, probe) is spun


def test_proc_reads_agree_with_ss_and_clock():
    """resources.Usage, the reading every resource verdict rests on, against tools the lab did
    not write: the sockets it finds in the server's /proc/PID/fd are the ones `ss -p` says
    the process holds (its listener and each accepted connection), and the CPU time it reads
    for a process that only spins is what that process's own clock says it used."""
    from labkit.battery import resources

    with serverproc.running("epoll", service="echo") as server:
        clients = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(5)]
        for client in clients:  # each answered: each accepted
            client.sendall(b"x")
            assert client.recv(1) == b"x"
        sockets = sum(t.startswith("socket:[") for t in resources.Usage(server.proc.pid).descriptors())
        listed = subprocess.run(["ss", "-Htanp"], capture_output=True, text=True, check=True).stdout
        held = sum(f"pid={server.proc.pid}," in line for line in listed.splitlines())
        for client in clients:
            client.close()
    assert sockets == held == 1 + len(clients), (sockets, held)

    # The spinner says its own CPU time once it is done, then waits (reading its stdin) until the
    # last reading is taken: reading while it spins races its exit (a busy machine can hold the
    # test 160 ms past the last reading, which then reads 0.35 s of 0.51).
    spinner = subprocess.Popen([sys.executable, "-c", "import sys, time\nend = time.thread_time() + 0.5\n"
                                "while time.thread_time() < end: pass\nprint(time.process_time(), flush=True)\n"
                                "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        usage = resources.Usage(spinner.pid)
        while_spinning = usage.cpu_s()
        own = float(spinner.stdout.readline())
        done = usage.cpu_s()
    finally:
        spinner.stdin.close()
        spinner.wait(timeout=10)
    assert 0 <= while_spinning <= done
    assert own - 0.02 <= done <= own + 0.02, (done, own)  # the kernel's 10 ms ticks


def test_check_reruns_only_what_did_not_pass():
    """07's checks follow its battery run on the same text: what passed there is reported as
    passed then (and says so), what failed is run again, and another text runs afresh."""
    text = RESOURCE_BUGS["keeps each session"]() + "\n/* this test's own text: no other test ran it here */\n"
    first = battery.run(text, "resources")
    assert failed(first) == {"memory back after connections come and go"} and not any(r.earlier for r in first.results)
    again = battery.run(text, "resources")
    assert [r.earlier for r in again.results] == [r.passed for r in first.results]
    assert "an earlier run of this text" in str(again) and failed(again) == failed(first)
    other = battery.run(text + "\n", "protocol")
    assert other.passed and not any(r.earlier for r in other.results)

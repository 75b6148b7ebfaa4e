"""The counts the notebooks quote, checked against tools the lab did not write, on the same run.

  system calls   the lab: perf's syscalls:sys_enter_* tracepoints attached to the server
                 (perf.syscall_tracepoints + perf.attach_tree, what measure.point does for
                 row["server_syscalls_per_request"]); the other tool: `strace -f -c -p PID`
                 attached to the same server at the same time.
  TCP segments   the lab: the load generator's TCP_INFO deltas (segments_out,
                 data_segments_out, and the row's data_segments_per_repetition); the other
                 tool: `nstat` in a network namespace that holds only the clients.
  threads        the lab: procs.Server.thread_count() (quoted by the failures notebook); the
                 other tools: /proc/PID/status's Threads (the kernel's own count) and `ps -L`.

Counts are exact, so they are compared exactly, every difference explained in a docstring.
The subject of every test here must exist: without root, perf's tracepoints, strace, nstat
or `ip netns`, a test fails and says what is missing; it does not skip.  The load is small
and bounded; only loopback and namespaces made here carry traffic; no server, perf,
strace or namespace outlives a test (tests/conftest.py checks the processes, the
namespace test checks `ip netns`).
"""

import contextlib
import importlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import serverproc
from labkit import perf, procs
from labkit.procs import LoadSpec, ServerSpec
from waits import wait_for

# make test runs these first, alone on the machine (tests/conftest.py): their counts are exact,
# and another test's traffic beside them can make the kernel retransmit (a tail loss probe
# when softirq work waits behind the other traffic), while the tracefs test unmounts what a
# perf beside it would hold.
pytestmark = [pytest.mark.measuring, pytest.mark.quiet]

SETTLE_S = 5.0  # every wait for the kernel or a process is bounded by this


def _settled(what: str, done, within: float = SETTLE_S):
    """wait_for with this file's settling time: `done()`'s value once true, or the test fails naming `what`."""
    return wait_for(done, within, what)


def _require_root_and(*tools: str) -> None:
    if os.geteuid() != 0:
        pytest.fail("these comparisons need root (perf's syscall tracepoints, ptrace of a server, "
                    "network namespaces); CI runs the tests as root", pytrace=False)
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: scripts/setup-system.sh installs it "
                    f"(the subject of this test)", pytrace=False)


# ---------------------------------------------------------------------------
# system calls: perf's tracepoints (the lab) against strace -c


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def _task_field(pid: int, tid: str, name: str) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _asleep(pid: int) -> bool:
    """Every thread of `pid` sleeps in a system call (S), none stopped by the tracer (t)."""
    tasks = _tasks(pid)
    return bool(tasks) and all(_task_field(pid, tid, "State").startswith("S") for tid in tasks)


def _quiet(pid: int, fds: int, threads: int) -> bool:
    """The server is back where it was before the load: its descriptors and threads as many
    as then (every connection closed, every connection thread gone), all of it asleep."""
    try:
        open_fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False
    return open_fds == fds and len(_tasks(pid)) == threads and _asleep(pid) and \
        (time.sleep(0.05) or _asleep(pid))  # still asleep a moment later: nothing was on its way


def parse_strace_summary(text: str) -> dict[str, int]:
    """`strace -c`'s table -> {syscall: calls}.  Its rows are `% time, seconds, usecs/call,
    calls, [errors], syscall`; the errors column is empty for calls that never failed."""
    counts = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) in (5, 6) and words[3].isdigit() and words[-1] != "total" and not line.startswith("%"):
            counts[words[-1]] = int(words[3])
    return counts


def test_the_strace_summary_parser_reads_calls_with_and_without_errors():
    table = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 61.22    0.000541           0      1020           read
 38.78    0.000343          17        20         3 accept4
------ ----------- ----------- --------- --------- ----------------
100.00    0.000884           0      1040         3 total
"""
    assert parse_strace_summary(table) == {"read": 1020, "accept4": 20}


@contextlib.contextmanager
def strace_counting(pid: int):
    """`strace -f -c -p pid` attached to every thread of `pid` (and following new ones) for the
    block; the dict it yields holds {syscall: calls} once the block ends.  Attached means the
    kernel says so: every thread's TracerPid is strace's.  Attaching interrupts the system call
    each thread sleeps in (it returns EINTR or is restarted); the block starts only when every
    thread sleeps again."""
    counts: dict[str, int] = {}
    fd, path = tempfile.mkstemp(prefix="labkit-strace-", suffix=".txt")
    os.close(fd)
    tracer = subprocess.Popen(["strace", "-f", "-c", "-o", path, "-p", str(pid)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _settled(f"strace (pid {tracer.pid}) attached to every thread of {pid}",
                  lambda: tracer.poll() is not None or all(
                      _task_field(pid, tid, "TracerPid") == str(tracer.pid) for tid in _tasks(pid)))
        assert tracer.poll() is None, f"strace exited: {tracer.stderr.read().decode(errors='replace')}"
        _settled(f"the threads of {pid} asleep again after strace attached", lambda: _asleep(pid))
        time.sleep(0.05)
        yield counts
    finally:
        if tracer.poll() is None:
            tracer.send_signal(signal.SIGINT)  # strace detaches and writes its summary
        try:
            tracer.wait(timeout=SETTLE_S)
        except subprocess.TimeoutExpired:
            tracer.kill()
            tracer.wait()
        said = tracer.stderr.read().decode(errors="replace")
        tracer.stderr.close()
        text = Path(path).read_text()
        os.unlink(path)
    counts.update(parse_strace_summary(text))
    assert counts, f"strace -c wrote no table:\n{text}\n{said}"


WARM_UP = 16  # connections at once before counting, more than glibc's 8 malloc arenas before it asks for the CPUs
SYSCALL_CASES = [
    # model, connections, echo exchanges on each (64 bytes), the system calls that each
    # exchange and each connection make, exactly: {name: (per exchange, per connection)}.
    # Not listed, because the scheduler decides them (both tools must still agree on them):
    # epoll's epoll_wait and its accept4 (one that fails with EAGAIN ends each batch of accepts).
    pytest.param("epoll", 20, 50, {"write": (1, 0), "read": (1, 1), "close": (0, 1), "epoll_ctl": (0, 2)},
                 id="epoll"),
    pytest.param("threaded", 20, 50, {"write": (1, 0), "read": (1, 1), "close": (0, 1), "clone3": (0, 1),
                                      "accept4": (0, 1)}, id="threaded"),
]


def test_system_calls_are_counted_on_a_machine_that_never_mounted_tracefs():
    """A freshly booted machine may have no tracefs mounted, and a development machine that
    ran perf once has it mounted for ever, which hid this: the lab asks perf, which mounts
    it as root, rather than calling the system calls unmeasurable until something else ran
    perf.  Here tracefs is unmounted first (the serial phase: no perf runs beside it)."""
    _require_root_and("perf")
    probe = importlib.import_module("labkit.perf.probe")  # the module: labkit.perf.probe is its function

    for mount in ("/sys/kernel/debug/tracing", "/sys/kernel/tracing"):
        if os.path.ismount(mount):
            done = subprocess.run(["umount", mount], capture_output=True, text=True)
            assert done.returncode == 0, f"umount {mount}: {done.stderr.strip()} (is a perf still running?)"
    assert probe._tracefs() is None, "tracefs is still readable after it was unmounted"
    probe._asked_perf_to_mount.clear()
    probe._tracepoints.clear()
    events, why_not = perf.syscall_tracepoints(perf.SERVER_SYSCALLS)
    assert events and why_not == "", why_not
    assert os.path.ismount("/sys/kernel/tracing"), "the tracepoints were counted, but tracefs is not mounted"


@pytest.mark.parametrize("model, clients, exchanges, exact", SYSCALL_CASES)
def test_system_calls_counted_by_perf_tracepoints_agree_with_strace(built_bin, model, clients, exchanges, exact):
    """perf's sys_enter tracepoints (the lab's count) and strace's -c table, both attached to
    one echo server over one fixed load (`clients` connections x `exchanges` echoes of 64
    bytes), must give every system call the lab counts the same number of calls.

    Both count what the server asked the kernel: the tracepoint fires on each entry to a
    system call, strace stops the thread at each entry and exit, failed calls included
    (EAGAIN from a non-blocking accept4 or read).  Their windows nest: strace attaches
    first and detaches last, perf counts in between, and the server is asleep and idle at
    both ends of perf's window (the load over, every connection closed and its thread
    gone) - so the only calls in one window and not the other are the one each thread
    sleeps in at the edges (epoll_wait, or threaded's accept4).  At perf's start that call
    was entered before perf attached, and strace counts it when it returns; at perf's end
    it was entered while perf counted, and strace, detaching, does not count a call that
    never returned.  One each way: the counts are equal, not close.

    And the load fixes some counts by itself, whichever tool counts: one read and one write
    per 64-byte echo (a 64-byte message is one segment on loopback, read whole), one more
    read per connection for its end of file, one close per connection; epoll's epoll_ctl
    adds and removes each connection; the thread per connection model makes one clone3 per
    connection and, its main thread asleep in accept4 at both edges, one accept4 per
    connection in perf's window.  A warm-up before both windows takes out the one read that
    is not the load's (see WARM_UP below)."""
    _require_root_and("strace", "perf")
    events, why_not = perf.syscall_tracepoints(perf.SERVER_SYSCALLS)
    assert events, f"the lab cannot count system calls here: {why_not}"
    load = LoadSpec(clients, exchanges, "echo", {"size": 64}, timeout=30.0)
    with serverproc.running(model, service="echo") as server:
        pid = server.proc.pid
        _settled(f"{model} asleep, waiting for clients", lambda: _asleep(pid))
        fds, threads = len(os.listdir(f"/proc/{pid}/fd")), len(_tasks(pid))
        # Before counting: WARM_UP connections open at once, an echo on each, closed.  A
        # process's malloc, the first time a 9th thread needs an arena of its own, reads
        # /sys/devices/system/cpu/online (one openat, read, close in a process's life:
        # glibc sizes its arena limit by the CPUs).  Whether the measured load has 9
        # connection threads at once depends on timing; these 16 surely do, so that read
        # is over before either tool counts.
        warm = [serverproc.Client(server.port) for _ in range(WARM_UP)]
        for client in warm:
            client.send(b"x\n")
            assert client.line() == b"x"
        for client in warm:
            client.close()
        _settled(f"{model} done with the warm-up", lambda: _quiet(pid, fds, threads))
        with strace_counting(pid) as by_strace:
            with perf.attach_tree(pid, events) as counting:
                run = procs.run_load(load, server.port)
                _settled(f"{model} done with the load (its {fds} descriptors and {threads} threads again)",
                          lambda: _quiet(pid, fds, threads))
    assert run.returncode == 0 and run.summary["requests_ok"] == clients * exchanges, run.summary
    assert counting.source == "perf", counting.note
    # As measure._WhereTheTimeGoes.fill names them for the row: "syscalls:sys_enter_read" -> "read".
    by_perf = {event.split("sys_enter_", 1)[1]: value for event, value in counting.counters.items()}
    assert not [name for name, value in by_perf.items() if value != value], f"not counted: {counting.note}"
    by_perf = {name: int(value) for name, value in by_perf.items()}

    table = {name: (by_perf[name], by_strace.get(name, 0)) for name in sorted(by_perf)
             if by_perf[name] or by_strace.get(name, 0)}
    print(f"\n{model}: system call, perf (lab), strace -c: {table}")
    disagree = {name: pair for name, pair in table.items() if pair[0] != pair[1]}
    assert not disagree, f"perf (lab) and strace -c disagree on {model}: {disagree}; all: {table}"
    for name, (per_exchange, per_connection) in exact.items():
        expected = per_exchange * clients * exchanges + per_connection * clients
        assert by_perf.get(name, 0) == expected, (name, by_perf.get(name, 0), expected, table)
    assert "epoll_wait" in table if model == "epoll" else "accept4" in table, table


# ---------------------------------------------------------------------------
# TCP segments: TCP_INFO (the load generator) against nstat in a namespace of our own

SERVER_ADDRESS, CLIENT_ADDRESS = "198.18.0.1", "198.18.0.2"  # RFC 2544's benchmarking range, a /30


def _ip(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"
    return done


def _namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


@contextlib.contextmanager
def two_hosts():
    """Two network namespaces of this test's own, the server's and the client's, joined by
    one veth pair (198.18.0.1/30 and .2/30, no other route); both removed on leaving, however
    the block ends.  The veth ends are made inside the namespaces: the host's never sees them."""
    tag = f"lkx{secrets.token_hex(3)}"
    server_ns, client_ns = f"{tag}s", f"{tag}c"
    made = []
    try:
        for ns in (server_ns, client_ns):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", server_ns, "link", "add", "vs", "type", "veth", "peer", "name", "vc", "netns", client_ns)
        for ns, dev, address in ((server_ns, "vs", SERVER_ADDRESS), (client_ns, "vc", CLIENT_ADDRESS)):
            _ip("-n", ns, "addr", "add", f"{address}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        for ns, dev in ((server_ns, "vs"), (client_ns, "vc")):
            _settled(f"{dev} in {ns} up", lambda: "LOWER_UP" in _ip("-n", ns, "link", "show", dev).stdout)
        yield server_ns, client_ns
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        left = [ns for ns in _namespaces() if ns.startswith(tag)]
        assert not left, f"namespaces left: {left}"


def nstat(ns: str) -> dict[str, int]:
    """Every TCP counter of namespace `ns` as `nstat` reads it: absolute values (-a), zeros
    included (-z), its history file left alone (-s)."""
    done = subprocess.run(["ip", "netns", "exec", ns, "nstat", "-asz"], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    counters = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1].isdigit():
            counters[words[0]] = int(words[1])
    assert "TcpOutSegs" in counters and "TcpExtTCPOrigDataSent" in counters, done.stdout[:2000]
    return counters


def _tcp_states(ns: str) -> list[str]:
    done = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Htan"], capture_output=True, text=True, timeout=20)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


TCP_CASES = [
    # strategy, buffers x bytes, TCP_NODELAY: the write-strategies notebook's grid, in small
    pytest.param("many", "15x100", "on", id="many-15x100-nodelay"),
    pytest.param("many", "15x100", "off", id="many-15x100-nagle"),
    pytest.param("writev", "15x100", "on", id="writev-15x100"),
    pytest.param("single", "100x15", "on", id="single-100x15"),
    pytest.param("msg_more", "100x15", "off", id="msg_more-100x15-nagle"),
    pytest.param("cork", "15x100", "on", id="cork-15x100"),
]


@pytest.mark.parametrize("strategy, shape, nodelay", TCP_CASES)
def test_tcp_segments_from_tcp_info_agree_with_nstat_in_the_clients_namespace(built_bin, strategy, shape, nodelay):
    """The segments the load generator's connections sent, by TCP_INFO (the lab: its
    segments_out and data_segments_out, whose quotient by repetitions is the row's
    data_segments_per_repetition), against nstat's deltas in a namespace that holds nothing
    but those connections: the server runs in another namespace, across a veth pair, so
    every segment counted in the client's namespace is one of the load generator's.

    The load generator reads TCP_INFO on each connection after connect() returned and
    again after its last reply, before close(), so per connection nstat sees exactly 4
    segments more than TCP_INFO's window: the SYN and the handshake's final ACK before it
    (connect() returns only once that ACK is sent), the FIN at close() and the ACK of the
    server's FIN (sent from the time-wait socket, whether the server's FIN came with the ACK
    of ours or after it).  TcpOutSegs counts them all; tcpi_segs_out the window's.  Each
    counts a GSO super-segment as the MSS-sized segments it carries, the same way.
      TcpOutSegs             = segments_out      + 4 x connections
    TcpExtTCPOrigDataSent counts every segment sent with new sequence space, data or a FIN
    (the kernel's tcp_event_new_data_sent); tcpi_data_segs_out those with data.  The FIN is
    the only new sequence space outside the window (a SYN is not counted by either):
      TcpExtTCPOrigDataSent  = data_segments_out + 1 x connections
    Both hold as written without retransmissions.  With them: __tcp_transmit_skb
    (net/ipv4/tcp_output.c) adds a segment to tcpi_segs_out, and one with data to
    tcpi_data_segs_out, every time it is sent, but to TcpOutSegs only if it is new or a
    pure ACK, and TcpExtTCPOrigDataSent counts new data only; so each of the R segments
    retransmitted in the window (the lab's retransmitted_segments, tcpi_total_retrans) is
    in the lab's counts and in neither of nstat's:
      TcpOutSegs             = segments_out      - R + 4 x connections
      TcpExtTCPOrigDataSent  = data_segments_out - R + 1 x connections
    A clean veth rarely retransmits, but on a busy machine a tail-loss probe or an RTO can
    fire before a delayed ACK comes back (2 in a run).  TcpRetransSegs counts R and any
    retransmitted SYN or FIN outside the window (neither in TcpOutSegs: not new), so it is
    at least R.  The one way timing could break an equation: a delayed ACK for the last
    reply sent between the last TCP_INFO read and close() - the delayed-ACK timer waits
    40 ms or more, the gap is a few microseconds."""
    _require_root_and("ip", "nstat", "ss")
    clients, requests, repetitions = 4, 10, 10
    load = LoadSpec(clients, requests, "sink", {"strategy": strategy, "shape": shape, "nodelay": nodelay,
                                                "repetitions": repetitions}, timeout=30.0)
    with two_hosts() as (server_ns, client_ns):
        server = procs.start_server(ServerSpec("epoll", "sink", flags={"host": SERVER_ADDRESS}),
                                    prefix=["ip", "netns", "exec", server_ns])
        try:
            before = {"client": nstat(client_ns), "server": nstat(server_ns)}
            run = procs.run_load(load, server.port, host=SERVER_ADDRESS, prefix=["ip", "netns", "exec", client_ns])
            # Every connection closed on both sides: the client's all in TIME-WAIT (its last
            # ACK sent), the server's all gone (that ACK received); only the listener is left.
            _settled("the connections closed on both sides",
                      lambda: _tcp_states(client_ns) == ["TIME-WAIT"] * clients
                      and _tcp_states(server_ns) == ["LISTEN"])
            after = {"client": nstat(client_ns), "server": nstat(server_ns)}
        finally:
            stopped = server.stop()
        assert stopped == 0, f"the server exited with {stopped} on SIGTERM: {server.stderr_text()}"

    summary = run.summary
    assert run.returncode == 0 and summary["requests_ok"] == clients * requests, summary
    delta = {side: {name: after[side][name] - before[side].get(name, 0) for name in after[side]}
             for side in after}
    client = delta["client"]
    assert client["TcpActiveOpens"] == clients and delta["server"]["TcpPassiveOpens"] == clients, delta
    assert client["TcpOutRsts"] == 0 and delta["server"]["TcpOutRsts"] == 0, "resets"
    lab = {name: summary[name] for name in ("segments_out", "data_segments_out", "retransmitted_segments")}
    retransmitted = lab["retransmitted_segments"]
    print(f"\n{strategy} {shape} nodelay {nodelay}: lab {lab}, nstat TcpOutSegs {client['TcpOutSegs']}, "
          f"TcpExtTCPOrigDataSent {client['TcpExtTCPOrigDataSent']}, TcpRetransSegs {client['TcpRetransSegs']}")
    assert 0 <= retransmitted <= client["TcpRetransSegs"], (client["TcpRetransSegs"], lab)
    assert client["TcpOutSegs"] == lab["segments_out"] - retransmitted + 4 * clients, (client["TcpOutSegs"], lab)
    assert client["TcpExtTCPOrigDataSent"] == lab["data_segments_out"] - retransmitted + clients, \
        (client["TcpExtTCPOrigDataSent"], lab)
    # the row's column is that same count per repetition
    assert summary["data_segments_per_repetition"] * clients * requests * repetitions == \
        pytest.approx(lab["data_segments_out"], abs=1e-6)
    assert not [ns for ns in _namespaces() if ns in (server_ns, client_ns)]


# ---------------------------------------------------------------------------
# threads: procs.Server.thread_count() against /proc/PID/status and ps -L

THREAD_CASES = [
    # model, --workers, idle connections, threads the model must have with them open
    pytest.param("threaded", None, 0, 1, id="threaded-0"),
    pytest.param("threaded", None, 1, 2, id="threaded-1"),
    pytest.param("threaded", None, 16, 17, id="threaded-16"),
    pytest.param("pool", 3, 3, 4, id="pool-3-workers"),
    pytest.param("epoll", None, 16, 1, id="epoll-16"),
]


def _independent_thread_counts(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as f:
        status = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    ps = subprocess.run(["ps", "-L", "-o", "lwp=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
    return {"/proc/PID/status Threads": status, "ps -L": len(ps.stdout.split())}


@pytest.mark.parametrize("model, workers, connections, expected", THREAD_CASES)
def test_thread_counts_agree_with_proc_status_and_ps(built_bin, model, workers, connections, expected):
    """The lab's thread count of a server (procs.Server.thread_count(), the entries of
    /proc/PID/task) against the kernel's own number in /proc/PID/status (Threads:, the
    thread group's counter) and procps's `ps -L`, with `connections` clients connected and
    silent after one echo each: equal, and what the model promises - the thread per
    connection model one main thread plus one per connection, the pool its main thread
    and --workers threads, epoll one thread however many connections.  None has a helper
    thread (only --expect starts one, not used here).

    Each client's echo came back before counting, so the server had accepted it and (for
    threaded) its thread was running: nothing is on its way when the tools count.  After
    the clients close, threaded's connection threads end, and the counts fall back to 1."""
    _require_root_and("ps")
    server = procs.start_server(ServerSpec(model, "echo", workers))
    clients = []
    try:
        for _ in range(connections):
            client = serverproc.Client(server.port)
            clients.append(client)
            client.send(b"x\n")
            assert client.line() == b"x"
        with_clients = {"lab (procs.Server.thread_count)": server.thread_count(),
                        **_independent_thread_counts(server.pid)}
        for client in clients:
            client.close()
        clients = []
        alone = 1 if model == "threaded" else expected
        _settled(f"{model}'s connection threads ended", lambda: server.thread_count() == alone)
        without = {"lab (procs.Server.thread_count)": server.thread_count(), **_independent_thread_counts(server.pid)}
    finally:
        for client in clients:
            client.close()
        stopped = server.stop()
    print(f"\n{model} with {connections} connections: {with_clients}; after they closed: {without}")
    assert set(with_clients.values()) == {expected}, with_clients
    assert set(without.values()) == {alone}, without
    assert stopped == 0, f"{model} exited with {stopped} on SIGTERM: {server.stderr_text()}"

"""labkit.kernel_view reads /proc as `ss`, `nstat` and `ps` do: each reading is compared with
the tool's own on the same sockets and processes, at the same moment.

  accept queue     kernel_view.accept_queues (/proc/PID/net/tcp's rx_queue of a LISTEN
                   socket) against `ss -lnt`'s Recv-Q, for a listener the test fills itself
  ListenOverflows  kernel_view.tcp_ext (/proc/PID/net/netstat) against `nstat -azs`
  resident memory  kernel_view.tree_rss against `ps -o rss` summed over the same processes
and labkit.server_counters reads the servers' exit lines exactly.
"""

import socket
import subprocess
import sys
import time

import pytest

import waits
from nstat import nstat
from labkit import kernel_view, server_counters

SETTLE_S = 5.0


def _ss_recv_q(port: int) -> int:
    out = subprocess.run(["ss", "-lnt", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    lines = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert len(lines) == 1, out
    return int(lines[0][1])  # State Recv-Q Send-Q Local Peer


def test_the_accept_queue_is_ss_recv_q_and_holds_the_backlog_plus_one():
    backlog = 2
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(backlog)
    port = listener.getsockname()[1]
    clients = []
    try:
        for _ in range(backlog + 3):  # more than fit: the extra SYNs are dropped, their connects wait
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", port))
            clients.append(client)
        deadline = time.monotonic() + SETTLE_S
        while kernel_view.accept_queues("self", port) != [backlog + 1] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert kernel_view.accept_queues("self", port) == [backlog + 1] == [_ss_recv_q(port)]
        # The connects whose SYNs were dropped retransmit them (after 1 s, then 3 s...): one
        # landing after the accept below would fill the room it makes.  They are the last
        # ones (loopback queues each SYN as connect sends it): abandoned first, no packet sent.
        for client in clients[backlog + 1:]:
            client.close()
        # one accept() makes room for one: the queue is one shorter, as ss says too
        listener.accept()[0].close()
        assert kernel_view.accept_queues("self", port) == [backlog] == [_ss_recv_q(port)]
    finally:
        for client in clients:
            client.close()
        listener.close()


def test_listen_overflows_are_nstats_and_rise_when_syns_are_dropped():
    before = kernel_view.tcp_ext()
    assert before["ListenOverflows"] == nstat("TcpExtListenOverflows")
    assert before["ListenDrops"] == nstat("TcpExtListenDrops")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # holds one
    port = listener.getsockname()[1]
    clients = []
    try:
        for _ in range(4):
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", port))
            clients.append(client)

        def overflowed():  # the SYNs the full queue dropped, counted
            now = kernel_view.tcp_ext()
            return now if now["ListenOverflows"] - before["ListenOverflows"] >= 3 else None

        after = waits.wait_until(overflowed, within=5) or kernel_view.tcp_ext()
        # system-wide counters: at least the SYNs this test had dropped (3), others' too
        assert after["ListenOverflows"] - before["ListenOverflows"] >= 3
        assert after["ListenDrops"] - before["ListenDrops"] >= 3
        assert after["ListenOverflows"] <= nstat("TcpExtListenOverflows")
    finally:
        for client in clients:
            client.close()
        listener.close()


def _ps_tree_rss_kib(root: int) -> int:
    """`ps`'s RSS of `root` and every descendant, the tree walked from ps's own ppid column."""
    table = [line.split() for line in subprocess.run(["ps", "-e", "-o", "pid=,ppid=,rss="], capture_output=True,
                                                     text=True, check=True).stdout.splitlines()]
    tree, grew = {root}, True
    while grew:
        more = {int(pid) for pid, ppid, _ in table if int(ppid) in tree}
        grew = not more <= tree
        tree |= more
    return sum(int(rss) for pid, _, rss in table if int(pid) in tree)


def test_tree_rss_is_ps_rss_summed_over_the_processes():
    script = "import os, sys, time\nos.fork()\nsys.stdout.write('forked\\n'); sys.stdout.flush()\ntime.sleep(30)\n"
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == parent.stdout.readline() == "forked\n"  # both are running
        waits.settled(lambda: _ps_tree_rss_kib(parent.pid), quiet=0.1)  # their pages faulted in
        ps_kib = _ps_tree_rss_kib(parent.pid)
        ours_kib = kernel_view.tree_rss(parent.pid) / 1024
        assert abs(ours_kib - ps_kib) <= 0.02 * ps_kib, (ours_kib, ps_kib)
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


def test_what_cannot_be_read_is_nan_never_zero():
    gone = 2 ** 22 + 17  # above pid_max's default: no such process
    assert all(value != value for value in kernel_view.tcp_ext(gone).values())
    assert kernel_view.tree_rss(gone) != kernel_view.tree_rss(gone)
    assert kernel_view.accept_queues(gone, 80) == []


@pytest.mark.parametrize("text, reports, columns", [
    ("listening 4000\n", [], {}),
    ("listening 4000\ncounters pid=10 accepted=3 futile_accepts=1 listener_wakeups=4 shed_idle=0\n",
     [{"pid": 10, "accepted": 3, "futile_accepts": 1, "listener_wakeups": 4, "shed_idle": 0}],
     {"server_accepted": 3, "server_futile_accepts": 1, "server_accepted_by_worker": [3],
      "futile_accepts_per_connection": 1 / 3, "busiest_worker_share": 1.0, "server_reporting_processes": 1}),
    ("counters pid=10 accepted=1 futile_accepts=5 listener_wakeups=6 shed_idle=0\n"
     "expect: batch 1: ...\n"
     "counters pid=11 accepted=3 futile_accepts=0 listener_wakeups=3 shed_idle=2\n",
     [{"pid": 10, "accepted": 1, "futile_accepts": 5, "listener_wakeups": 6, "shed_idle": 0},
      {"pid": 11, "accepted": 3, "futile_accepts": 0, "listener_wakeups": 3, "shed_idle": 2}],
     {"server_accepted": 4, "server_futile_accepts": 5, "server_shed_idle": 2, "server_accepted_by_worker": [3, 1],
      "futile_accepts_per_connection": 1.25, "wakeups_per_connection": 2.25, "busiest_worker_share": 0.75}),
    ("counters pid=10 accepted=2\n",  # a model that counts less: the rest is NaN, never 0
     [{"pid": 10, "accepted": 2}], {"server_accepted": 2, "server_shed_idle": float("nan")}),
])
def test_server_counters_read_every_line_and_sum_the_workers(text, reports, columns):
    assert server_counters.parse(text) == reports
    row = {}
    server_counters.fill(row, text)
    for name, expected in columns.items():
        if expected != expected:
            assert row[name] != row[name], name
        else:
            assert row[name] == expected, name
    if not reports:
        assert row == {}


@pytest.mark.parametrize("release, thresh, says", [
    ("6.8.0-40-generic", 1.0, "every write-write-read exchange after the first"),  # the sysctl (6.7+)
    ("6.8.0", 3.0, "about one exchange in 3"),
    ("6.1.0", float("nan"), "every write-write-read exchange after the first"),  # 5.19+: threshold 1
    ("5.15.0-100-generic", float("nan"), "some exchanges stall, or none"),  # 5.1 to 5.18: 3, coarse
    ("4.19.0", float("nan"), "every write-write-read exchange after the first"),  # before 5.1: 1
])
def test_the_delayed_ack_note_follows_the_kernels_pingpong_threshold(release, thresh, says):
    assert says in kernel_view.delayed_ack_note(release, thresh)

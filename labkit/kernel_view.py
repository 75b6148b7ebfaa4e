"""What the kernel shows of a point while it runs: the listener's accept queue, the
TCP counters of overflowing it, and the memory the server's connections hold.

    with kernel_view.Watch(server.pid, server.port, memory=True, accept_queue=True) as watch:
        ...run the load...
    watch.fill(row)

Everything is read from /proc, as `ss`, `nstat` and `free` read it (the tests compare
them):
  * /proc/<pid>/net/netstat, TcpExt: ListenOverflows (a SYN or a handshake's last ACK
    arrived when the listener's accept queue was full) and ListenDrops (every request a
    listener dropped, those included).  Read through the server's pid, so a server in a
    network namespace of its own is counted in that namespace; on the host's loopback
    the counters are the whole namespace's, other programs' listeners included.
  * /proc/<pid>/net/tcp and tcp6: for a LISTEN socket the rx_queue column is its accept
    queue (sk_ack_backlog, connections the handshake finished and accept() has not yet
    taken: get_tcp4_sock() in net/ipv4/tcp_ipv4.c), which `ss -lnt` shows as Recv-Q.
  * /proc/<pid>/status VmRSS, summed over the server's processes: memory its pages
    occupy (a thread's stack counts only the pages it touched; a forked child's pages
    shared with its parent are counted once per process).
  * /proc/meminfo Slab, KernelStack and PageTables: the kernel's own memory, the whole
    machine's.  Over loopback the client's sockets live in the same kernel, so a
    connection's kernel memory is both of its ends.
The samples run in a thread every SAMPLE_S while the load runs; a point keeps the
largest value seen and the value before the load started.  What could not be read is
NaN, never 0.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

NAN = float("nan")
SAMPLE_S = 0.02
LISTEN_COUNTERS = ("ListenOverflows", "ListenDrops")
KERNEL_MEMORY = ("Slab", "KernelStack", "PageTables")
_TCP_LISTEN = "0A"  # the state column of a LISTEN socket in /proc/net/tcp


def tcp_ext(pid: int | str = "self") -> dict[str, float]:
    """The TcpExt counters of the network namespace `pid` lives in (LISTEN_COUNTERS),
    NaN for any this kernel does not report."""
    found = dict.fromkeys(LISTEN_COUNTERS, NAN)
    try:
        lines = Path(f"/proc/{pid}/net/netstat").read_text().splitlines()
    except OSError:
        return found
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:]))
            found.update({name: float(table[name]) for name in LISTEN_COUNTERS if name in table})
    return found


def accept_queues(pid: int | str, port: int) -> list[int]:
    """The accept queue of every socket listening on `port` in `pid`'s namespace (one per
    listener: an SO_REUSEPORT server has several)."""
    queues: dict[str, int] = {}  # by inode: the kernel may list a socket twice while others come and go
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st tx_queue:rx_queue tr:when retrnsmt uid timeout inode ...
            if len(fields) > 9 and fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                queues[fields[9]] = int(fields[4].split(":")[1], 16)
    return list(queues.values())


def somaxconn() -> float:
    """net.core.somaxconn: the kernel caps every listen() backlog at it (NaN if unreadable)."""
    try:
        return float(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return NAN


def meminfo() -> dict[str, float]:
    """KERNEL_MEMORY from /proc/meminfo, in bytes."""
    found = dict.fromkeys(KERNEL_MEMORY, NAN)
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in found:
            found[name] = float(value.split()[0]) * 1024  # "kB" is KiB
    return found


def tree_rss(pid: int) -> float:
    """VmRSS summed over `pid` and its descendants, in bytes (NaN once it is gone)."""
    import psutil

    try:
        processes = [psutil.Process(pid)]
        processes += processes[0].children(recursive=True)
    except psutil.Error:
        return NAN
    total = 0.0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue  # a child that just ended
    return total


class Watch:
    """Samples what the kernel shows of a running server (see the module's doc)."""

    def __init__(self, pid: int, port: int, memory: bool = False, accept_queue: bool = False):
        self.pid, self.port = pid, port
        self.memory, self.accept_queue = memory, accept_queue
        self.counters_before = self.counters_after = dict.fromkeys(LISTEN_COUNTERS, NAN)
        self.rss_before = self.rss_max = NAN
        self.kernel_before = self.kernel_max = dict.fromkeys(KERNEL_MEMORY, NAN)
        self.queue_max = NAN
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Watch":
        self.counters_before = tcp_ext(self.pid)
        if self.memory:
            self.rss_before = self.rss_max = tree_rss(self.pid)
            self.kernel_before = meminfo()
            self.kernel_max = dict(self.kernel_before)
        if self.accept_queue:
            self.queue_max = max(accept_queues(self.pid, self.port), default=NAN)
        if self.memory or self.accept_queue:
            self._thread = threading.Thread(target=self._sample, name="kernel-view", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.samples += 1
            if self.accept_queue:
                queues = accept_queues(self.pid, self.port)
                if queues:
                    self.queue_max = max(_max(self.queue_max, q) for q in queues)
            if self.memory:
                self.rss_max = _max(self.rss_max, tree_rss(self.pid))
                now = meminfo()
                self.kernel_max = {name: _max(self.kernel_max[name], now[name]) for name in KERNEL_MEMORY}

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.counters_after = tcp_ext(self.pid)

    def fill(self, row: dict, connections: int) -> None:
        """The row's kernel columns; per connection over `connections` (those held at once)."""
        for name in LISTEN_COUNTERS:
            row[f"tcp_{name.lower()}"] = self.counters_after[name] - self.counters_before[name]
        if self.accept_queue:
            row["accept_queue_max"] = self.queue_max
            row["somaxconn"] = somaxconn()
        if self.memory and connections > 0:
            row["server_rss_kib_per_connection"] = (self.rss_max - self.rss_before) / 1024 / connections
            for name in KERNEL_MEMORY:
                grown = self.kernel_max[name] - self.kernel_before[name]
                row[f"kernel_{name.lower()}_kib_per_connection"] = grown / 1024 / connections
            row["kernel_kib_per_connection"] = sum(row[f"kernel_{name.lower()}_kib_per_connection"]
                                                   for name in KERNEL_MEMORY)


def _max(a: float, b: float) -> float:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return max(a, b)


def pingpong_thresh() -> float:
    """net.ipv4.tcp_pingpong_thresh (mainline Linux 6.7, commit 562b1fdf061b; in 6.6.y only
    from its 2026 updates): how many quick replies put a connection's delayed ACKs in
    interactive (pingpong) mode.  NaN where this kernel has no such setting."""
    try:
        return float(Path("/proc/sys/net/ipv4/tcp_pingpong_thresh").read_text())
    except (OSError, ValueError):
        return NAN


def delayed_ack_note(release: str | None = None, thresh: float | None = None) -> str:
    """Which write-write-read exchanges (notebook 04, section 5) this kernel should stall on a
    delayed ACK.  A reply sent soon after data arrived counts towards pingpong mode
    (tcp_event_data_sent); in that mode the receiver's read no longer sends the ACK at once
    (tcp_cleanup_rbuf), so Nagle's second write waits for the delayed-ACK timer, which leaves
    the mode and starts the count again (tcp_delack_timer_handler).  The threshold is the
    sysctl where there is one, else 1, except 3 in mainline 5.1 to 5.18 (commit 4a41f453bedf,
    reverted by 4d8f24eeedc5, which the stable kernels took in August 2022).  Then whether a
    route's rto_min shortens the delay on this kernel (rto_min_note)."""
    import platform
    import re

    release = platform.release() if release is None else release
    thresh = pingpong_thresh() if thresh is None else thresh
    found = re.match(r"(\d+)\.(\d+)", release)
    version = (int(found[1]), int(found[2])) if found else None
    if thresh == thresh:
        n, source = int(thresh), f"net.ipv4.tcp_pingpong_thresh = {int(thresh)}"
    elif version is not None and (5, 1) <= version <= (5, 18):
        return (f"Linux {release}: a 5.1 to 5.18 kernel needs 3 quick replies (counted coarsely, in jiffies) "
                "before it delays ACKs, unless it is a stable update that took the 2022 revert to 1: some "
                f"exchanges stall, or none; read the histogram. {rto_min_note(version)}")
    else:
        n, source = 1, "no tcp_pingpong_thresh, so the threshold is 1"
    if n <= 1:
        said = (f"Linux {release} ({source}): every write-write-read exchange after the first should stall "
                "on the delayed-ACK timer, about 40 ms on loopback")
    else:
        said = (f"Linux {release} ({source}): about one exchange in {n} should stall on the delayed-ACK timer, "
                "the others not; read the p99 and the histogram")
    return f"{said}. {rto_min_note(version)}"


def rto_min_note(version: tuple[int, int] | None) -> str:
    """Whether a route's rto_min shortens the delayed ACK on a kernel of `version` (major,
    minor).  Since mainline Linux 6.7 (commit "tcp: derive delack_max from rto_min",
    tcp_delack_max) a route whose rto_min is locked caps the delayed-ACK timer one jiffy
    below that rto_min; `ip route ... rto_min 5ms` always locks it (iproute2 6.1 shows
    "rto_min lock 5ms").  The timer fires on a tick, so the stall lasts about the rto_min in
    whole ticks: on the lab's 6.18 kernel (250 Hz) loopback stalled 44 ms by default, 8 ms
    with an rto_min of 5 ms (2 ticks) and 20 ms with 20 ms.  On 6.6 and earlier the route's
    rto_min leaves the delayed ACK alone."""
    if version is None:
        return ("Whether a route's lower rto_min shortens the delay depends on the kernel: from Linux 6.7 on, "
                "not before; this kernel's version could not be read")
    if version >= (6, 7):
        return ("From Linux 6.7 a route's rto_min, which `ip route ... rto_min 5ms` sets and locks, also caps "
                "the delayed-ACK timer one jiffy below it (tcp_delack_max): the stall then lasts about that "
                "rto_min, in whole ticks of the kernel's clock")
    return ("Before Linux 6.7 a route's lower rto_min does not shorten the delayed ACK: it stays about 40 ms "
            "(tcp_delack_max, which derives it from a locked rto_min, came in 6.7)")


def syn_retries() -> float:
    """net.ipv4.tcp_syn_retries: how many times an unanswered SYN is sent again before
    connect() gives up (Linux 6.5 and later add tcp_syn_linear_timeouts to it); NaN if
    unreadable."""
    try:
        return float(Path("/proc/sys/net/ipv4/tcp_syn_retries").read_text())
    except (OSError, ValueError):
        return NAN


def syn_linear_timeouts() -> float:
    """net.ipv4.tcp_syn_linear_timeouts (NaN where this kernel has no such setting): n, where
    after the initial 1 s timeout n more stay at 1 s (n + 1 resends of a dropped SYN, 1 s apart)
    before the timeouts start doubling."""
    try:
        return float(Path("/proc/sys/net/ipv4/tcp_syn_linear_timeouts").read_text())
    except (OSError, ValueError):
        return NAN

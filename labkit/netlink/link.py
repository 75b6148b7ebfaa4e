"""The Link: a server namespace and a client namespace joined by a veth link, shaped by tbf,
delayed and lossy by netem or the lab's delay line (see labkit.netlink), made and removed
with `with`, and read back from the kernel (its routes, TCP counters, sysctls, qdiscs)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from labkit import paths
from labkit.errors import LabError

from .host import (CLIENT_ADDRESS, IP_TIMEOUT_S, PREFIX_LEN, SERVER_ADDRESS, UserNamespace, delay_line_problem,
                   netem_available, rate_bits, run_ip, unprivileged_fix, user_namespaces_allowed)
from .leftovers import LIVE, start_reaper

EMULATORS = ("auto", "netem", "delayline")


@dataclass
class Link:
    """A server namespace and a client namespace joined by a veth link (see labkit.netlink)."""

    rate: str | None = None        # tbf on both ends, "100mbit"; None: as fast as veth goes
    delay_ms: float = 0.0          # each direction
    jitter_ms: float = 0.0
    loss_percent: float = 0.0
    mtu: int = 1500
    emulator: str = "auto"         # delay, jitter and loss by: netem where it exists, else the delay line
    autocorking: bool = True       # net.ipv4.tcp_autocorking in both hosts' namespaces (per namespace; on by default)
    id: str = field(default_factory=lambda: secrets.token_hex(3))
    made: bool = False
    counters: dict = field(default_factory=dict)  # after remove(): the kernel's TCP counts, the delay line's

    def __post_init__(self):
        if self.rate is not None:
            rate_bits(self.rate)
        for name, value, most in (("delay_ms", self.delay_ms, 10_000), ("jitter_ms", self.jitter_ms, 10_000),
                                  ("loss_percent", self.loss_percent, 100)):
            if not 0 <= value <= most:
                raise LabError(f"{name} {value} is outside 0 to {most}", f"give {name} from 0 to {most}")
        if self.jitter_ms > self.delay_ms:
            raise LabError(f"jitter_ms {self.jitter_ms:g} is more than delay_ms {self.delay_ms:g}",
                           "give a jitter no larger than the delay")
        if not 576 <= self.mtu <= 65535:
            raise LabError(f"mtu {self.mtu} is outside 576 to 65535", "use an MTU such as 1500 or 9000")
        if self.emulator not in EMULATORS:
            raise LabError(f"unknown emulator {self.emulator!r}", f"choose one of: {', '.join(EMULATORS)}")
        self._delay_line = None
        self._home = None  # as a normal user: the UserNamespace (host.py) the link lives in
        self._reaper = None  # as root: what deletes the namespaces if this process dies first
        self.made_names: set[str] = set()  # the namespaces this link made (and so removes)

    @property
    def impaired(self) -> bool:
        """Whether the link has a delay, jitter or loss (not only a rate)."""
        return bool(self.delay_ms or self.jitter_ms or self.loss_percent)

    @property
    def mechanism(self) -> str:
        """What adds the delay and loss: "netem", "delayline", or "" for none."""
        if not self.impaired:
            return ""
        if self.emulator == "auto":
            return "netem" if netem_available()[0] else "delayline"
        return self.emulator

    # -- names ---------------------------------------------------------------
    @property
    def server_ns(self) -> str:
        return f"lk{self.id}s"

    @property
    def client_ns(self) -> str:
        return f"lk{self.id}c"

    @property
    def middle_ns(self) -> str:
        return f"lk{self.id}m"

    @property
    def namespaces(self) -> list[str]:
        middle = [self.middle_ns] if self.mechanism == "delayline" else []
        return [self.server_ns, *middle, self.client_ns]

    def prefix(self, ns: str) -> list[str]:
        """The launch prefix of a process in namespace `ns`.  In a user namespace, entering it
        changes credentials, which clears the death signal: setpriv gives it back."""
        from labkit import launcher

        again = launcher.death_signal_prefix() if self._home else []
        return [*self.enter, *again, "ip", "netns", "exec", ns]

    @property
    def server_prefix(self) -> list[str]:
        return self.prefix(self.server_ns)

    @property
    def client_prefix(self) -> list[str]:
        return self.prefix(self.client_ns)

    server_address = SERVER_ADDRESS
    client_address = CLIENT_ADDRESS

    @property
    def record(self):
        return paths.RUN_DIR / f"netns-{self.id}.json"

    @property
    def shaping(self) -> str:
        """What shapes the link, for a results row: 'tbf 100mbit, delay line 20ms loss 1%', 'none'..."""
        parts = [f"tbf {self.rate}"] if self.rate else []
        if self.impaired:
            what = [f"{self.delay_ms:g}ms"] + ([f"jitter {self.jitter_ms:g}ms"] if self.jitter_ms else []) + (
                [f"loss {self.loss_percent:g}%"] if self.loss_percent else [])
            parts.append(("netem delay " if self.mechanism == "netem" else "delay line ") + " ".join(what))
        if not self.autocorking:
            parts.append("autocorking off")
        return ", ".join(parts) or "none"

    # -- making and removing it ----------------------------------------------
    def create(self) -> "Link":
        if shutil.which("ip") is None:
            raise LabError("the `ip` command is missing", "sudo apt-get install iproute2")
        if os.geteuid() != 0:
            allowed, why = user_namespaces_allowed()
            if not allowed:
                raise LabError(f"namespaces and veth links need root here: {why}", unprivileged_fix())
        if self.mechanism == "netem" and not netem_available()[0]:
            raise LabError(f"delay, jitter and loss by netem, but {netem_available()[1]}",
                           "leave the emulator at auto (the lab's delay line stands in), or load sch_netem")
        if self.mechanism == "delayline" and delay_line_problem():
            raise LabError(f"the delay line cannot run: {delay_line_problem()}",
                           "build it (make build) and run as root, or leave delay and loss at 0")
        paths.RUN_DIR.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.record, "x") as record:  # "x": a link of the same id is refused, its record kept
                record.write(json.dumps({"namespaces": self.namespaces, "owner_pid": os.getpid(),
                                         "started": time.time()}))
        except FileExistsError:
            raise LabError(f"a link named lk{self.id} is already recorded ({self.record.name}: another run's, or "
                           "one a crash left)", "run again (a new link gets a new name); `labkit doctor --clean` "
                           "removes what a crash left") from None
        LIVE[self.id] = self
        try:
            if os.geteuid() != 0:
                self._home = UserNamespace()
            else:
                self._reaper = start_reaper(self.namespaces, self.record)
            self._make()
        except BaseException:
            self.remove()
            raise
        self.made = True
        return self

    def _make(self) -> None:
        server_end, client_end = f"lk{self.id}a", f"lk{self.id}b"
        for ns in self.namespaces:
            added = self._ip("netns", "add", ns, check=False)
            if added.returncode != 0 and "exists" in added.stderr:
                self.made_names.discard(ns)  # someone else's: not ours to remove
                raise LabError(f"a network namespace named {ns} already exists (another run's, or one a crash "
                               "left)", "run again (a new link gets a new name); `labkit doctor --clean` removes "
                               "what a crash left")
            if added.returncode != 0:
                self._ip("netns", "add", ns)  # raises, saying why
            self.made_names.add(ns)
            self._ip("-n", ns, "link", "set", "lo", "up")
        if self.mechanism == "delayline":
            self._make_through_delay_line(server_end, client_end)
        else:
            self._ip("link", "add", server_end, "netns", self.server_ns, "mtu", str(self.mtu), "type", "veth",
                "peer", "name", client_end, "netns", self.client_ns, "mtu", str(self.mtu))
        for ns, end, address in ((self.server_ns, server_end, SERVER_ADDRESS),
                                 (self.client_ns, client_end, CLIENT_ADDRESS)):
            self._ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", end)
            self._ip("-n", ns, "link", "set", end, "up")
            self._shape(ns, end)
            if not self.autocorking:  # a per-namespace sysctl: this host's own stays as it is
                self._sysctl(ns, "net.ipv4.tcp_autocorking=0")
        self.check_isolated()
        if self.mechanism == "delayline":
            self._start_delay_line()

    def _make_through_delay_line(self, server_end: str, client_end: str) -> None:
        """Two veth pairs meeting in the middle namespace, whose ends have no address (and no
        IPv6: the middle must stay silent).  With a loss, the hosts' ends send wire-sized
        frames (gso_max_segs 1), so one loss is one segment, as on a wire; without, they
        pass 64 KiB GSO frames, 40 times fewer for the delay line to copy (each is held
        as long; tbf has already paced them to the rate)."""
        middle = self.middle_ns
        for name in ("all", "default"):
            self._sysctl(middle, f"net.ipv6.conf.{name}.disable_ipv6=1")
        wire_sized = ["gso_max_segs", "1"] if self.loss_percent else []
        for end, ns, middle_end in ((server_end, self.server_ns, f"lk{self.id}x"),
                                    (client_end, self.client_ns, f"lk{self.id}y")):
            self._ip("link", "add", end, "netns", ns, "mtu", str(self.mtu), *wire_sized, "type", "veth",
                "peer", "name", middle_end, "netns", middle, "mtu", str(self.mtu))
            self._ip("-n", middle, "link", "set", middle_end, "up")

    def _start_delay_line(self) -> None:
        from labkit import build, launcher, procs

        argv = [str(build.binary(build.DELAY_LINE)), "--left", f"lk{self.id}x", "--right", f"lk{self.id}y",
                "--delay-ms", f"{self.delay_ms:g}", "--jitter-ms", f"{self.jitter_ms:g}",
                "--loss-percent", f"{self.loss_percent:g}"]
        self._delay_line = launcher.spawn(argv, role="delayline", prefix=self.prefix(self.middle_ns),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = procs.read_ready_line(self._delay_line.popen, timeout=5)
        if not line.startswith(b"delayline: ready"):
            launcher.stop_child(self._delay_line, timeout=1)
            said = self._delay_line.popen.stderr.read().decode(errors="replace").strip()
            self._delay_line = None
            raise LabError(f"the delay line did not start: {said or line.decode(errors='replace') or 'no output'}",
                           "run `labkit doctor`: it checks the delay line")

    def _stop_delay_line(self) -> None:
        from labkit import launcher

        child, self._delay_line = self._delay_line, None
        if child is None:
            return
        launcher.stop_child(child, timeout=2)
        for line in child.popen.stdout.read().decode(errors="replace").splitlines():
            if line.startswith("{"):
                self.counters["delayline"] = json.loads(line)["delayline"]

    def _shape(self, ns: str, end: str) -> None:
        netem = []
        if self.mechanism == "netem":
            if self.delay_ms or self.jitter_ms:
                netem += ["delay", f"{self.delay_ms:g}ms"] + ([f"{self.jitter_ms:g}ms"] if self.jitter_ms else [])
            if self.loss_percent:
                netem += ["loss", f"{self.loss_percent:g}%"]
        if self.rate:
            # burst: at least one 64 KiB GSO packet, and 4 ms of the rate
            burst = max(65536 + 1600, int(rate_bits(self.rate) / 8 / 250))
            done = self._in(ns, "tc", "qdisc", "add", "dev", end, "root", "handle", "1:", "tbf", "rate", self.rate,
                            "burst", str(burst), "latency", "50ms")
            if done.returncode != 0:
                raise LabError(f"tc could not add tbf at {self.rate}: {done.stderr.strip()}",
                               "check that the kernel has sch_tbf (it almost always has)")
        if netem:
            parent = ["parent", "1:1"] if self.rate else ["root"]
            done = self._in(ns, "tc", "qdisc", "add", "dev", end, *parent, "netem", *netem)
            if done.returncode != 0:
                raise LabError(f"tc could not add netem ({' '.join(netem)}): {done.stderr.strip()}",
                               "leave the emulator at auto (the lab's delay line stands in)")

    def check_isolated(self) -> None:
        """Refuse the link if any of its namespaces has a route beyond the link's /30."""
        for ns in self.namespaces:
            routes = self._ip("-n", ns, "-4", "route", "show").stdout.splitlines()
            beyond = [r for r in routes if not r.startswith("198.18.0.0/30 ")]
            routes6 = [r for r in self._ip("-n", ns, "-6", "route", "show").stdout.splitlines()
                       if not r.startswith(("fe80::", "multicast", "::1"))]
            if beyond or routes6:
                raise LabError(f"namespace {ns} has routes beyond the lab's link: {beyond + routes6}",
                               "this should not happen in a new namespace: report it")

    def tcp_counters(self) -> dict:
        """The kernel's TCP counters (/proc/net/snmp's Tcp and /proc/net/netstat's TcpExt) of
        the server's and the client's namespace: {'server': {'RetransSegs': ..., 'OutSegs': ...,
        'TCPAutoCorking': ...}, 'client': {...}}."""
        found = {}
        for side, ns in (("server", self.server_ns), ("client", self.client_ns)):
            done = self._in(ns, "cat", "/proc/net/snmp", "/proc/net/netstat")
            for prefix in ("Tcp:", "TcpExt:"):
                table = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith(prefix)]
                if len(table) == 2:
                    found.setdefault(side, {}).update({name: int(value) for name, value in zip(*table)})
        return found

    def route_to(self, address: str) -> str:
        """The client namespace's route to `address`: its line from `ip route get`, or "none (...)"."""
        done = self._ip("-n", self.client_ns, "route", "get", address, check=False)
        if done.returncode != 0:
            return f"none ({done.stderr.strip().removeprefix('RTNETLINK answers: ')})"
        return done.stdout.split("\n")[0].strip()

    def sysctl(self, name: str, side: str = "server") -> str:
        """A sysctl as the server's (or client's) namespace has it: "net.ipv4.tcp_rmem" -> "4096 131072 6291456"."""
        ns = self.server_ns if side == "server" else self.client_ns
        done = self._in(ns, "sysctl", "-n", name)
        if done.returncode != 0:
            raise LabError(f"`sysctl -n {name}` in {ns} failed: {done.stderr.strip()}", "check the name: sysctl -a")
        return " ".join(done.stdout.split())

    def describe(self) -> list[dict]:
        """What the link is now, read from the kernel: per namespace, in order from server to
        client, its role and its interfaces (name, IPv4 address or "no address", qdisc)."""
        roles = {self.server_ns: "server", self.middle_ns: "delay line", self.client_ns: "client"}
        found = []
        for ns in self.namespaces:
            interfaces = []
            for entry in json.loads(self._ip("-n", ns, "-j", "addr", "show").stdout or "[]"):
                if entry["ifname"] == "lo":
                    continue
                ipv4 = [f"{a['local']}/{a['prefixlen']}" for a in entry.get("addr_info", []) if a["family"] == "inet"]
                qdisc = self._in(ns, "tc", "qdisc", "show", "dev", entry["ifname"]).stdout.split(" ")[1:2]
                interfaces.append({"name": entry["ifname"], "address": ipv4[0] if ipv4 else "no address",
                                   "qdisc": qdisc[0] if qdisc else "", "mtu": entry.get("mtu")})
            found.append({"namespace": ns, "role": roles[ns], "interfaces": interfaces})
        return found

    def remove(self) -> None:
        self._stop_delay_line()
        if self.made:
            self.counters["tcp"] = self.tcp_counters()
        for ns in sorted(self.made_names):
            self._ip("netns", "del", ns, check=False)  # its veth ends, qdiscs and addresses go with it
        self.made_names.clear()
        if self._home:
            self._home.stop()  # and with it whatever is left in its namespaces
            self._home = None
        if self._reaper:
            from labkit import launcher

            launcher.stop_child(self._reaper, timeout=1.0, signum=signal.SIGKILL)  # its work is done
            self._reaper = None
        self.record.unlink(missing_ok=True)
        LIVE.pop(self.id, None)
        self.made = False

    def row_counters(self) -> dict:
        """The results row's link columns, from the counters remove() kept."""
        tcp = self.counters.get("tcp", {})
        line = self.counters.get("delayline")
        nan = float("nan")
        return {
            "tcp_retrans_segs": sum(side.get("RetransSegs", 0) for side in tcp.values()) if tcp else nan,
            # the times the client's kernel held a small write back while its last packet was still
            # queued (tcp_push: LINUX_MIB_TCPAUTOCORKING, never counted with tcp_autocorking off)
            "client_autocorked": tcp.get("client", {}).get("TCPAutoCorking", nan),
            "link_lost_frames": (line["left_to_right"]["lost"] + line["right_to_left"]["lost"]) if line else nan,
            "link_max_late_us": max(line["left_to_right"]["max_late_us"], line["right_to_left"]["max_late_us"])
            if line else nan,
        }

    # -- running commands where the link lives ---------------------------------
    @property
    def enter(self) -> list[str]:
        """The prefix that runs a command where the link's namespaces are named: nothing as
        root; as a normal user, inside the user namespace that holds them (UserNamespace)."""
        return self._home.enter if self._home else []

    def _ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run_ip(*args, check=check, enter=self.enter)

    def _in(self, ns: str, *argv: str) -> subprocess.CompletedProcess:
        """`argv` run in namespace `ns` (its stdout, stderr, status)."""
        return subprocess.run([*self.enter, "ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                              timeout=IP_TIMEOUT_S)

    def _sysctl(self, ns: str, setting: str) -> None:
        done = self._in(ns, "sysctl", "-qw", setting)
        if done.returncode != 0:
            raise LabError(f"`sysctl -w {setting}` in {ns} failed: {done.stderr.strip()}",
                           "run it by hand in a namespace to see why")

    def __enter__(self) -> "Link":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.remove()

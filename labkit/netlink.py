"""Two network namespaces joined by a veth pair: "different hosts" on one machine.

    with netlink.Link(rate="100mbit") as link:
        server = procs.start_server(ServerSpec("epoll", "echo", flags={"host": link.server_address}),
                                    prefix=link.server_prefix)
        run = procs.run_load(load, server.port, host=link.server_address, prefix=link.client_prefix)

A Link is two namespaces (lk<id>s for the server, lk<id>c for the client), each
with its end of one veth pair, 198.18.0.1/30 and 198.18.0.2/30 (RFC 2544's range for
network benchmarking), and no route but the link's own, checked before a byte is
sent.  `rate` shapes both directions with tbf; `delay`, `jitter` and `loss` need
netem (sch_netem), which some kernels lack: the Link refuses them there, saying so.
Names carry a random id, so two runs at once never collide.

Every Link is recorded in build/run/netns-<id>.json (names, owner pid) before it
is made, and removed with it: on leaving the `with`, on an exception, at exit; if
its owner is killed with -9, `labkit doctor --clean` finds the record whose owner
is gone and deletes the namespaces (their veth ends go with them).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from . import paths
from .errors import LabError

SERVER_ADDRESS, CLIENT_ADDRESS, PREFIX_LEN = "198.18.0.1", "198.18.0.2", 30
RECORD_GLOB = "netns-*.json"
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")
_RATE_BITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
ROOT_FIX = ("namespaces and veth links need CAP_NET_ADMIN: run the lab as root (sudo), or in a "
            "container or VM where you are root")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and done.returncode != 0:
        message = done.stderr.strip() or done.stdout.strip()
        fix = ROOT_FIX if "permitted" in message.lower() else "run the same `ip` command by hand to see why"
        raise LabError(f"`ip {' '.join(args)}` failed: {message}", fix)
    return done


def _tc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", *args], capture_output=True, text=True, timeout=20)


def rate_bits(rate: str) -> float:
    """'100mbit' -> 1e8; a LabError for anything else (tc's units, bits per second)."""
    found = _RATE.match(str(rate).strip().lower())
    if not found or float(found.group(1)) <= 0:
        raise LabError(f"the link rate {rate!r} is not a rate like 100mbit or 1gbit",
                       "give the rate in tc's units: kbit, mbit or gbit, e.g. 100mbit")
    bits = float(found.group(1)) * _RATE_BITS[found.group(2)]
    if not 1e5 <= bits <= 1e11:
        raise LabError(f"the link rate {rate} is outside 100kbit to 100gbit", "choose e.g. 100mbit or 1gbit")
    return bits


def netem_available() -> tuple[bool, str]:
    """Whether this kernel has sch_netem (tc's delay, jitter and loss), tried on a test link."""
    if shutil.which("tc") is None:
        return False, "tc is not installed: sudo apt-get install iproute2"
    name = f"lkprobe{secrets.token_hex(2)}"  # a veth pair: not every kernel has the dummy device
    made = _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p", check=False)
    if made.returncode != 0:
        return False, f"cannot make a test link ({made.stderr.strip()}): {ROOT_FIX}"
    try:
        done = _tc("qdisc", "add", "dev", name, "root", "netem", "delay", "1ms")
        if done.returncode == 0:
            return True, "sch_netem is available"
        return False, (f"this kernel has no sch_netem ({done.stderr.strip()}): delay and loss cannot be added "
                       "with tc here (load the module: sudo modprobe sch_netem, or use a distribution kernel)")
    finally:
        _ip("link", "del", name, check=False)


@dataclass
class Link:
    """A server namespace and a client namespace joined by a veth pair (see the module)."""

    rate: str | None = None        # tbf on both ends, "100mbit"; None: as fast as veth goes
    delay_ms: float = 0.0          # netem, each direction
    jitter_ms: float = 0.0
    loss_percent: float = 0.0
    mtu: int = 1500
    id: str = field(default_factory=lambda: secrets.token_hex(3))
    made: bool = False

    def __post_init__(self):
        if self.rate is not None:
            rate_bits(self.rate)
        for name, value, most in (("delay_ms", self.delay_ms, 10_000), ("jitter_ms", self.jitter_ms, 10_000),
                                  ("loss_percent", self.loss_percent, 100)):
            if not 0 <= value <= most:
                raise LabError(f"{name} {value} is outside 0 to {most}", f"give {name} from 0 to {most}")
        if not 576 <= self.mtu <= 65535:
            raise LabError(f"mtu {self.mtu} is outside 576 to 65535", "use an MTU such as 1500 or 9000")

    # -- names ---------------------------------------------------------------
    @property
    def server_ns(self) -> str:
        return f"lk{self.id}s"

    @property
    def client_ns(self) -> str:
        return f"lk{self.id}c"

    @property
    def server_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.server_ns]

    @property
    def client_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.client_ns]

    server_address = SERVER_ADDRESS
    client_address = CLIENT_ADDRESS

    @property
    def record(self):
        return paths.RUN_DIR / f"netns-{self.id}.json"

    @property
    def shaping(self) -> str:
        """What shapes the link, for a results row: 'tbf 100mbit', 'none'..."""
        parts = [f"tbf {self.rate}"] if self.rate else []
        if self.delay_ms or self.jitter_ms or self.loss_percent:
            parts.append(f"netem delay {self.delay_ms:g}ms jitter {self.jitter_ms:g}ms loss {self.loss_percent:g}%")
        return ", ".join(parts) or "none"

    # -- making and removing it ----------------------------------------------
    def create(self) -> "Link":
        if shutil.which("ip") is None:
            raise LabError("the `ip` command is missing", "sudo apt-get install iproute2")
        if (self.delay_ms or self.jitter_ms or self.loss_percent):
            available, why = netem_available()
            if not available:
                raise LabError(f"delay, jitter and loss need netem, and {why}",
                               "use a kernel with sch_netem, or leave delay, jitter and loss at 0")
        paths.RUN_DIR.mkdir(parents=True, exist_ok=True)
        self.record.write_text(json.dumps({"namespaces": [self.server_ns, self.client_ns],
                                           "owner_pid": os.getpid(), "started": time.time()}))
        _LIVE[self.id] = self
        try:
            self._make()
        except BaseException:
            self.remove()
            raise
        self.made = True
        return self

    def _make(self) -> None:
        server_end, client_end = f"lk{self.id}a", f"lk{self.id}b"
        _ip("netns", "add", self.server_ns)
        _ip("netns", "add", self.client_ns)
        _ip("link", "add", server_end, "netns", self.server_ns, "mtu", str(self.mtu), "type", "veth",
            "peer", "name", client_end, "netns", self.client_ns, "mtu", str(self.mtu))
        for ns, end, address in ((self.server_ns, server_end, SERVER_ADDRESS),
                                 (self.client_ns, client_end, CLIENT_ADDRESS)):
            _ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", end)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", end, "up")
            self._shape(ns, end)
        self.check_isolated()

    def _shape(self, ns: str, end: str) -> None:
        netem = []
        if self.delay_ms or self.jitter_ms:
            netem += ["delay", f"{self.delay_ms:g}ms"] + ([f"{self.jitter_ms:g}ms"] if self.jitter_ms else [])
        if self.loss_percent:
            netem += ["loss", f"{self.loss_percent:g}%"]
        if self.rate:
            # burst: at least one 64 KiB GSO packet, and 4 ms of the rate
            burst = max(65536 + 1600, int(rate_bits(self.rate) / 8 / 250))
            done = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", end, "root",
                                   "handle", "1:", "tbf", "rate", self.rate, "burst", str(burst),
                                   "latency", "50ms"], capture_output=True, text=True, timeout=20)
            if done.returncode != 0:
                raise LabError(f"tc could not add tbf at {self.rate}: {done.stderr.strip()}",
                               "check that the kernel has sch_tbf (it almost always has)")
        if netem:
            parent = ["parent", "1:1"] if self.rate else ["root"]
            done = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", end, *parent,
                                   "netem", *netem], capture_output=True, text=True, timeout=20)
            if done.returncode != 0:
                raise LabError(f"tc could not add netem ({' '.join(netem)}): {done.stderr.strip()}",
                               "use a kernel with sch_netem, or leave delay and loss at 0")

    def check_isolated(self) -> None:
        """Refuse the link if either namespace has a route beyond the link's /30."""
        for ns in (self.server_ns, self.client_ns):
            routes = _ip("-n", ns, "-4", "route", "show").stdout.splitlines()
            beyond = [r for r in routes if not r.startswith("198.18.0.0/30 ")]
            routes6 = [r for r in _ip("-n", ns, "-6", "route", "show").stdout.splitlines()
                       if not r.startswith(("fe80::", "multicast", "::1"))]
            if beyond or routes6:
                raise LabError(f"namespace {ns} has routes beyond the lab's link: {beyond + routes6}",
                               "this should not happen in a new namespace: report it")

    def remove(self) -> None:
        for ns in (self.server_ns, self.client_ns):
            _ip("netns", "del", ns, check=False)  # its veth end, qdiscs and addresses go with it
        self.record.unlink(missing_ok=True)
        _LIVE.pop(self.id, None)
        self.made = False

    def __enter__(self) -> "Link":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.remove()


# Links made by this process, removed at exit whatever happened.
_LIVE: dict[str, Link] = {}


@atexit.register
def _remove_all() -> None:
    for link in list(_LIVE.values()):
        link.remove()


def leftover_records() -> list[tuple[str, list[str]]]:
    """(record file name, namespaces) of links whose owner is gone (killed with -9)."""
    import psutil

    found = []
    for record in sorted(paths.RUN_DIR.glob(RECORD_GLOB)) if paths.RUN_DIR.is_dir() else []:
        try:
            data = json.loads(record.read_text())
            owner, namespaces = int(data["owner_pid"]), list(data["namespaces"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not psutil.pid_exists(owner):
            found.append((record.name, namespaces))
    return found


def clean_leftovers() -> list[str]:
    """Delete the namespaces of every link whose owner is gone, and their records."""
    done = []
    for name, namespaces in leftover_records():
        for ns in namespaces:
            if _ip("netns", "del", ns, check=False).returncode == 0:
                done.append(f"deleted network namespace {ns}")
        (paths.RUN_DIR / name).unlink(missing_ok=True)
        done.append(f"removed link record {name}")
    return done


def lab_namespaces() -> list[str]:
    """The lab's namespaces that exist now (`ip netns list`)."""
    listed = _ip("netns", "list", check=False).stdout.split()
    return [name for name in listed if re.fullmatch(r"lk[0-9a-f]{6}[sc]", name)]

"""What this machine allows a Link: the `ip` command, tc's rates, netem, the lab's delay line,
and (for a normal user) a user namespace to hold the link in.  Each question is asked of
the kernel by trying, and each refusal says the exact command that would lift it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from labkit.errors import LabError

SERVER_ADDRESS, CLIENT_ADDRESS, PREFIX_LEN = "198.18.0.1", "198.18.0.2", 30
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")
_RATE_BITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
ROOT_FIX = ("namespaces and veth links need CAP_NET_ADMIN: run the lab as root (sudo), or in a "
            "container or VM where you are root")


# `ip netns add` can wait over 20 s on a busy 2-CPU machine (while other runs make and remove
# namespaces); it normally takes milliseconds.
IP_TIMEOUT_S = 60


def run_ip(*args: str, check: bool = True, enter=()) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run([*enter, "ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LabError(f"`ip {' '.join(args)}` did not finish within {IP_TIMEOUT_S} s: the machine is too busy",
                       "run again when it is less busy; `labkit doctor --clean` removes what a crash left") from None
    if check and done.returncode != 0:
        message = done.stderr.strip() or done.stdout.strip()
        fix = ROOT_FIX if "permitted" in message.lower() else "run the same `ip` command by hand to see why"
        raise LabError(f"`ip {' '.join(args)}` failed: {message}", fix)
    return done


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


_netem_probe: tuple[bool, str] | None = None


def netem_available() -> tuple[bool, str]:
    """Whether this kernel has sch_netem (tc's delay, jitter and loss), tried once on a test link."""
    global _netem_probe
    if _netem_probe is None:
        _netem_probe = _probe_netem()
    return _netem_probe


def _probe_netem() -> tuple[bool, str]:
    """Add netem to a veth in a throw-away network namespace (a user namespace's, for a
    normal user): it vanishes with the probe, nothing to remove."""
    if shutil.which("tc") is None:
        return False, "tc is not installed: sudo apt-get install iproute2"
    fresh = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--net"]
    script = ("ip link add lkprobe type veth peer name lkprobep || exit 3; "
              "tc qdisc add dev lkprobe root netem delay 1ms")
    done = subprocess.run([*fresh, "sh", "-c", script], capture_output=True, text=True, timeout=20)
    if done.returncode == 0:
        return True, "sch_netem is available"
    if done.returncode == 3 or "unshare" in done.stderr:
        return False, f"cannot make a test link ({done.stderr.strip()}): {ROOT_FIX}"
    return False, f"this kernel has no sch_netem (tc said: {done.stderr.strip().removeprefix('Error: ')})"


def delay_line_problem() -> str:
    """Why the delay line cannot run here, or "" (it is built, and AF_PACKET sockets open)."""
    from labkit import build

    try:
        build.binary(build.DELAY_LINE)
    except LabError as problem:
        return f"it does not build ({problem.what}): run `make build` to see why"
    if os.geteuid() != 0:  # it runs as root of the link's user namespace, if there is one
        allowed, why = user_namespaces_allowed()
        return "" if allowed else why
    import socket

    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
    except OSError as problem:
        return f"cannot open an AF_PACKET socket ({problem.strerror}): {ROOT_FIX}"
    return ""


def user_namespaces_allowed() -> tuple[bool, str]:
    """Whether this (non-root) user may make a user namespace with its own mounts and network
    (`unshare -Urmn`), and if not, why: the setting that forbids it."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False, "util-linux's unshare and nsenter are missing"
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--net", "true"], capture_output=True,
                          text=True, timeout=20)
    if done.returncode == 0:
        return True, "unprivileged user namespaces are allowed"
    return False, f"this kernel refuses unprivileged user namespaces ({done.stderr.strip() or 'unshare failed'})"


def _user_namespace_setting() -> str:
    """The sysctl that forbids unprivileged user namespaces here, as the command that allows them."""
    for path, allowed, command in (
            ("/proc/sys/kernel/unprivileged_userns_clone", "1", "sudo sysctl -w kernel.unprivileged_userns_clone=1"),
            ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "0",
             "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
            ("/proc/sys/user/max_user_namespaces", None, "sudo sysctl -w user.max_user_namespaces=15000")):
        try:
            value = open(path).read().strip()
        except OSError:
            continue
        if (allowed is not None and value != allowed) or (allowed is None and value == "0"):
            return command
    return ""


def unprivileged_fix() -> str:
    """What a normal user must do to get namespaces: the exact command."""
    setting = _user_namespace_setting()
    allow = f"allow unprivileged user namespaces (`{setting}`), or " if setting else ""
    return (f"{allow}run the lab as root (`sudo make lab`), or in a container or VM where you are root; "
            "same_host placement needs nothing")


class UserNamespace:
    """A user namespace this user owns and is root in, with its own mounts (a fresh /run,
    so `ip netns add` may mount there) and network: where a normal user's Link lives.

    It is a `sleep` that unshare started, with the launcher's death signal (given back by
    setpriv after unshare's change of credentials): when it ends, its mounts go, and with
    them the named namespaces and everything in them.  `enter` runs a command inside, as
    root of the namespace (nsenter)."""

    SCRIPT = "mount -t tmpfs labkit-run /run && mkdir /run/netns && echo ready && exec sleep infinity"

    def __init__(self):
        from labkit import launcher, procs

        argv = ["unshare", "--user", "--map-root-user", "--mount", "--net", *launcher.death_signal_prefix(),
                "sh", "-c", self.SCRIPT]
        self.child = launcher.spawn(argv, role="userns", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = procs.read_ready_line(self.child.popen, timeout=5)
        if not line.startswith(b"ready"):
            launcher.stop_child(self.child, timeout=1)
            said = self.child.popen.stderr.read().decode(errors="replace").strip()
            raise LabError(f"could not make a user namespace for the link: {said or 'no output'}", unprivileged_fix())

    @property
    def enter(self) -> list[str]:
        # --preserve-credentials: our uid is root there already, and setgroups is denied in it
        return ["nsenter", "--target", str(self.child.pid), "--user", "--mount", "--net", "--preserve-credentials"]

    def stop(self) -> None:
        from labkit import launcher

        launcher.stop_child(self.child, timeout=1)

"""What confines this process, read from the kernel's own files: the capabilities it holds,
its seccomp mode, and its cgroup's CPU quota and CPU set.

On a laptop none of these is in the way.  On a JupyterHub each is the spawner's choice (a
container's capabilities and seccomp profile, a pod's CPU limit), and each costs the lab
something named here; `labkit doctor` reports them, and what works in spite of them shows in
its perf and namespaces checks, which try the real thing.

    capabilities()   CapEff of /proc/self/status, as the names the lab cares about
    seccomp()        the Seccomp and Seccomp_filters fields of /proc/self/status
    cpu_quota()      cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us
    cpu_set()        cgroup v2 cpuset.cpus.effective, or v1 cpuset.effective_cpus
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")

# Bits of linux/capability.h, and what the lab cannot do without each.
CAPABILITIES = {
    "CAP_NET_ADMIN": (12, "links between namespaces: veth pairs, tc qdiscs (netem), the delay line's set-up"),
    "CAP_SYS_ADMIN": (21, "network namespaces (unshare, ip netns), and perf past perf_event_paranoid "
                          "on kernels before 5.8"),
    "CAP_PERFMON": (38, "perf past perf_event_paranoid (Linux 5.8 and newer): kernel samples and the "
                        "syscall tracepoints of the flame charts (the kernel frames' names need CAP_SYSLOG too, "
                        "or kernel.kptr_restrict 0 with perf_event_paranoid 1 or less)"),
}


def _status(pid: int | str = "self") -> dict[str, str]:
    fields = {}
    for line in (PROC / str(pid) / "status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def capabilities(pid: int | str = "self") -> dict[str, bool]:
    """Whether the process holds each of CAPABILITIES in its effective set."""
    effective = int(_status(pid)["CapEff"], 16)
    return {name: bool(effective >> bit & 1) for name, (bit, _) in CAPABILITIES.items()}


@dataclass(frozen=True)
class Seccomp:
    mode: str            # "none", "strict" or "filter"
    filters: int | None  # how many filters (Seccomp_filters, Linux 5.9 and newer), None where unknown


def seccomp(pid: int | str = "self") -> Seccomp | None:
    """The process's seccomp mode; None on a kernel built without CONFIG_SECCOMP."""
    fields = _status(pid)
    if "Seccomp" not in fields:
        return None
    mode = {"0": "none", "1": "strict", "2": "filter"}.get(fields["Seccomp"], fields["Seccomp"])
    filters = int(fields["Seccomp_filters"]) if "Seccomp_filters" in fields else None
    return Seccomp(mode, filters)


def _cgroup_dirs(pid: int | str = "self") -> dict[str, Path]:
    """controller -> this process's folder of it ("" for cgroup v2's unified tree)."""
    found = {}
    for line in (PROC / str(pid) / "cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            found[""] = CGROUP_ROOT / relative if not (CGROUP_ROOT / "unified").is_dir() \
                else CGROUP_ROOT / "unified" / relative
        for controller in controllers.split(","):
            if controller and (CGROUP_ROOT / controller).is_dir():
                found[controller] = CGROUP_ROOT / controller / relative
    return found


@dataclass(frozen=True)
class Quota:
    cpus: float | None   # CPUs' worth of time per period; None: no quota
    source: str          # the file and what it said


def _quota_in(folder: Path) -> Quota | None:
    """The quota one cgroup folder sets (Quota with cpus None: it sets none); None: no file."""
    if (folder / "cpu.max").is_file():  # v2
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return Quota(None if quota == "max" else int(quota) / int(period), f"{folder / 'cpu.max'}: {quota} {period}")
    if (folder / "cpu.cfs_quota_us").is_file():  # v1
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
        return Quota(None if quota < 0 else quota / period,
                     f"{folder / 'cpu.cfs_quota_us'}: {quota} (period {period} µs)")
    return None


def cpu_quota(pid: int | str = "self") -> Quota | None:
    """The CPU time the process's cgroup may use, as CPUs (cpu.max "50000 100000" is 0.5):
    the smallest quota of its cgroup and the ones above it, whose limits all apply.  None
    where no cgroup file says (no cpu controller for it); Quota(None, ...): no quota."""
    dirs = _cgroup_dirs(pid)
    for controller in ("", "cpu"):
        folder = dirs.get(controller)
        if folder is None:
            continue
        top = CGROUP_ROOT / "unified" if controller == "" and (CGROUP_ROOT / "unified").is_dir() \
            else CGROUP_ROOT / controller if controller else CGROUP_ROOT
        found = []
        while True:
            quota = _quota_in(folder)
            if quota is not None:
                found.append(quota)
            if folder == top or top not in folder.parents:
                break
            folder = folder.parent
        if found:
            limited = [q for q in found if q.cpus is not None]
            return min(limited, key=lambda q: q.cpus) if limited else found[0]
    return None


def parse_cpu_list(text: str) -> list[int]:
    """"0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpu list format)."""
    cpus = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def cpu_set(pid: int | str = "self") -> list[int] | None:
    """The CPUs the process's cgroup lets it run on; None where no cgroup file says."""
    dirs = _cgroup_dirs(pid)
    candidates = [dirs[""] / "cpuset.cpus.effective"] if "" in dirs else []
    if "cpuset" in dirs:
        candidates.append(dirs["cpuset"] / "cpuset.effective_cpus")
    for path in candidates:
        if path.is_file():
            return parse_cpu_list(path.read_text())
    return None

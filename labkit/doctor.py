"""What this machine can build and measure, each problem with the command that fixes it.

`labkit doctor` prints report(checks()); notebook 00 shows to_html(checks()).
`labkit doctor --clean` runs orphans.clean(): it stops lab processes that a crash
left behind (a server still holding its port, a perf still attached).
"""

from __future__ import annotations

import html
import os
import platform
import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

from labkit import confinement, netlink, orphans, paths, perf, syscall_probe, system
from labkit.errors import LabError

OK, WARN, FAIL = "ok", "warn", "fail"

# Experiment 2 opens 10,000 client connections; each side also needs a few
# descriptors of its own (listening socket, stdio, the spare fd, perf's).
CONNECTIONS_WANTED = 10_000
NOFILE_WANTED = CONNECTIONS_WANTED + 100


@dataclass
class Check:
    name: str
    status: str   # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""


# ---------------------------------------------------------------------------
# The checks, one function each
# ---------------------------------------------------------------------------

def _check_tool(name: str, what: str, fix: str) -> Check:
    path = shutil.which(name)
    if path is None:
        return Check(name, FAIL, f"{name} not found: {what}", fix)
    first = system._run([name, "--version"]) or ""
    return Check(name, OK, first.splitlines()[0].strip() if first else path)


def check_home() -> Check:
    """Where this user's results and builds go (labkit.paths): the checkout, or LABKIT_HOME
    beside a shared install; a place this user cannot write loses every measurement."""
    if not (paths.ROOT / "csrc").is_dir():
        return Check("lab home", FAIL, f"no lab beside labkit in {paths.ROOT} (no csrc/): labkit was installed "
                     "apart from the lab's folder", "export LABKIT_ROOT=/path/to/the/lab (the folder with csrc/ "
                     "and notebooks/), or install it from there: pip install -e /path/to/the/lab")
    home = paths.HOME
    place = next(folder for folder in [home, *home.parents] if folder.exists())  # made when first needed
    if not os.access(place, os.W_OK):
        return Check("lab home", FAIL, f"{home}: you cannot write there, so no result could be kept",
                     "export LABKIT_HOME=~/labkit (a folder of yours) and restart the kernel or the command")
    return Check("lab home", OK, paths.describe())


def check_compiler() -> Check:
    return _check_tool("gcc", "the C servers cannot be built", "sudo apt-get install build-essential")


def check_make() -> Check:
    return _check_tool("make", "the C servers cannot be built", "sudo apt-get install build-essential")


def check_perf_present(found: perf.PerfProbe) -> Check:
    if os.environ.get("LABKIT_NO_PERF") == "1":
        return Check("perf installed", WARN, "LABKIT_NO_PERF=1: perf is switched off, counters come from /proc",
                     "unset LABKIT_NO_PERF")
    if found.path is None:
        return Check("perf installed", WARN, "perf is not installed: counters come from /proc and "
                     "getrusage (fewer events, coarser task-clock)", perf.install_fix())
    if found.version is None:
        return Check("perf installed", WARN, found.problem, found.fix)
    return Check("perf installed", OK, f"perf {found.version} at {found.path}")


def check_perf_permitted(found: perf.PerfProbe) -> Check:
    level = found.paranoid
    meaning = perf.paranoid_meaning(level)
    who = "root: not limited by it" if os.geteuid() == 0 else f"for you: {meaning}"
    detail = f"kernel.perf_event_paranoid = {level} ({who})"
    if found.path is None or found.version is None or os.environ.get("LABKIT_NO_PERF") == "1":
        return Check("perf permitted", WARN, detail + "; perf not in use", "")
    if not found.usable:
        return Check("perf permitted", WARN, f"{detail}; {found.problem}; counters come from /proc", found.fix)
    if found.user_only:
        return Check("perf permitted", WARN, f"{detail}; context switches come from /proc, CPU "
                     "migrations are not measured", perf.PARANOID_FIX)
    return Check("perf permitted", OK, detail)


def check_events(found: perf.PerfProbe) -> Check:
    if not found.usable:
        return Check("perf events", WARN, "perf counts nothing here: task-clock, page-faults and "
                     "context switches come from /proc; cycles, instructions, branches not measured",
                     found.fix)
    counted = ", ".join(found.counted)
    missing = [e for e in perf.HARDWARE_EVENTS if e not in found.counted]
    if missing:
        return Check("perf events", WARN, f"counted: {counted}. Missing: {', '.join(missing)} -- "
                     f"{perf.HARDWARE_NOTE}; they are shown as missing, never as 0",
                     perf.HARDWARE_FIX)
    return Check("perf events", OK, f"counted: {counted}")


def check_syscall_counts(found: perf.PerfProbe) -> Check:
    """perf's syscalls:sys_enter_* tracepoints, which count the system calls per request of
    notebooks 04 and 06.  They live in tracefs, which a freshly booted machine may not have
    mounted: perf mounts it when run as root (syscall_tracepoints asks it to)."""
    if not found.usable:
        return Check("system-call counts", WARN, "not measurable: perf is not usable here", found.fix)
    counted, why_not = perf.syscall_tracepoints(("read", "write"))
    if counted:
        return Check("system-call counts", OK, "perf counts the syscall tracepoints (tracefs is mounted)")
    detail, _, fix = why_not.partition("): ")
    return Check("system-call counts", WARN, f"not measurable ({detail}): the system calls per request of "
                 "notebooks 04 and 06 are shown as missing", fix or why_not)


def check_cpus() -> Check:
    cpus = system.usable_cpus()
    server, client, note = system.default_pinning()
    if len(cpus) >= 2:
        return Check("CPUs for pinning", OK, f"{len(cpus)} usable CPUs {cpus}: server on {server}, "
                     f"client on {client} by default")
    return Check("CPUs for pinning", WARN, note + " (the client's CPU time competes with the server's)",
                 "give the VM a second CPU (VirtualBox: Settings > System > Processor; "
                 "WSL2: processors=2 in %UserProfile%\\.wslconfig)")


def check_cpu_quota() -> Check:
    """A cgroup's CPU quota (a pod's CPU limit) throttles server and client together."""
    quota, pinned, where = confinement.cpu_quota(), min(len(system.usable_cpus()), 2), confinement.cpu_set()
    cpus = f"; its CPU set: {where}" if where is not None else ""
    if quota is None or quota.cpus is None or quota.cpus >= pinned:
        said = "no cgroup file gives one" if quota is None else \
            f"{'none' if quota.cpus is None else f'{quota.cpus:g} CPUs'} ({quota.source})"
        return Check("CPU quota", OK, said + cpus)
    return Check("CPU quota", WARN, f"{quota.cpus:g} CPUs of time ({quota.source}){cpus}: server and client get less "
                 f"than the {pinned} CPUs they are pinned to, and the kernel throttles them (cpu.stat's nr_throttled): "
                 "times measured here include waiting for the quota", "ask for a CPU limit of 2 or more (on a hub: "
                 "the spawner's cpu_limit), or read the figures as the quota's")


def check_capabilities() -> Check:
    held = confinement.capabilities()
    if not (missing := [name for name, has in held.items() if not has]):
        return Check("capabilities", OK, "held: " + ", ".join(held))
    costs = "; ".join(f"without {name}: no {confinement.CAPABILITIES[name][1]}" for name in missing)
    return Check("capabilities", WARN, f"not held: {', '.join(missing)} ({costs}). The perf and "
                 "namespaces checks show what works all the same",
                 "run as root (sudo), or grant them to the container (Docker: --cap-add; a hub: "
                 "the spawner's capabilities, README)")


def check_seccomp() -> Check:
    """A seccomp filter (a container's profile): which of the calls the lab needs it refuses,
    each tried for real (labkit.syscall_probe), and how to let each through."""
    mode = confinement.seccomp()
    if mode is None or mode.mode == "none":
        return Check("seccomp", OK, "no seccomp filter" if mode else "the kernel has no seccomp")
    where = f"seccomp mode {mode.mode} ({mode.filters} filter(s), where the kernel says)"
    refused = [r for r in syscall_probe.refusals() if r.by == "seccomp"]
    if not refused:
        return Check("seccomp", OK, f"{where}: it lets through what the lab tries, io_uring_setup, "
                     "perf_event_open and unshare")
    said = "; ".join(f"{r.call} ({r.error}): no {syscall_probe.CALLS[r.call]}" for r in refused)
    fixes = []
    if any(r.call != "unshare" for r in refused):
        fixes.append("run the container with the lab's profile, which allows io_uring and perf_event_open: "
                     "--security-opt seccomp=container/seccomp.json (make lab CONTAINER=1 and "
                     ".devcontainer/devcontainer.json do)")
    if any(r.call == "unshare" for r in refused):
        fixes.append("grant the container CAP_SYS_ADMIN (--cap-add=SYS_ADMIN): Docker's and containerd's "
                     "default profiles allow unshare only to a container that holds it")
    return Check("seccomp", WARN, f"{where} refuses {said}", "; ".join(fixes) + " (a hub: docs/deploy.md)")


def check_nofile() -> Check:
    soft, hard = system.nofile_limit()
    hard_text = "unlimited" if hard == -1 else str(hard)
    detail = f"open files: soft {soft}, hard {hard_text}"
    if soft >= NOFILE_WANTED:
        return Check("open-file limit", OK, detail)
    if hard == -1 or hard >= NOFILE_WANTED:
        return Check("open-file limit", OK, f"{detail}; labkit raises the soft limit to "
                     f"{NOFILE_WANTED} for the 10,000-connection experiments")
    return Check("open-file limit", WARN,
                 f"{detail}: the 10,000-connection experiments need {NOFILE_WANTED}; "
                 f"up to {hard - 100} connections will work",
                 "raise the hard limit: add the lines '* soft nofile 65536' and '* hard nofile 65536' "
                 "to /etc/security/limits.d/lab.conf and log in again (if Jupyter runs as a systemd "
                 "service: LimitNOFILE=65536 in its unit); then `ulimit -n 65536` in a new shell "
                 "shows the new limit")


def check_kernel() -> Check:
    release = system.kernel()
    numbers = re.match(r"(\d+)\.(\d+)", release)
    version = (int(numbers.group(1)), int(numbers.group(2))) if numbers else (0, 0)
    wsl = "microsoft" in release.lower()
    detail = f"Linux {release}" + (" (WSL2)" if wsl else "")
    if version < (5, 6):
        return Check("kernel", WARN, detail + ": io_uring networking needs 5.6 or newer; "
                     "the io_uring server is skipped", "use a newer kernel (any current distribution)")
    return Check("kernel", OK, detail)


def check_chromium() -> Check:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return Check("chromium", OK, f"{path}: figures can be exported to PNG, SVG and PDF")
    return Check("chromium", WARN, "no Chromium/Chrome: figures show in the notebook, but PNG/SVG/PDF "
                 "export (kaleido) needs a browser", "sudo apt-get install chromium")


def check_liburing() -> Check:
    headers = [Path("/usr/include/liburing.h"), Path("/usr/local/include/liburing.h")]
    if any(h.exists() for h in headers):
        return Check("liburing", OK, "liburing headers found: the io_uring server can be built")
    return Check("liburing", WARN, "liburing headers not found: the io_uring server is skipped",
                 "sudo apt-get install liburing-dev")


def check_anchors() -> Check:
    """The reference tools the lab measures itself against, on this machine, in the same run."""
    anchors = {"sockperf": "round trips (bench rtt)",
               "iperf3": "the one-stream ceiling of uploads (notebook 03, bench upload)"}
    missing = [tool for tool in anchors if shutil.which(tool) is None]
    if not missing:
        return Check("anchors", OK, "sockperf and iperf3 found: round trips and uploads have a reference")
    return Check("anchors", WARN, "; ".join(f"{tool} not found: no reference for {anchors[tool]}" for tool in missing)
                 + " (the lab's own figures still work)", f"sudo apt-get install {' '.join(missing)}")


def check_namespaces() -> Check:
    """Network namespaces joined by veth, shaped by tbf, with delay and loss by netem or the
    lab's delay line: the "different hosts" links."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return Check("namespaces", WARN, "ip or tc is missing: no links between namespaces",
                     "sudo apt-get install iproute2")
    try:
        with netlink.Link(rate="1gbit"):
            pass
    except LabError as failure:
        return Check("namespaces", WARN, f"cannot make a link between namespaces: {failure.what}", failure.fix)
    netem, why_not_netem = netlink.netem_available()
    line_problem = netlink.delay_line_problem()
    if not line_problem:
        try:
            with netlink.Link(delay_ms=1, emulator="delayline"):
                pass
        except LabError as failure:
            line_problem = failure.what
    works = "network namespaces, veth and tbf work"
    if netem and not line_problem:
        return Check("namespaces", OK, f"{works}; delay and loss by netem, and by the lab's delay line")
    if not line_problem:
        return Check("namespaces", OK, f"{works}; delay and loss by the lab's delay line, since {why_not_netem}",
                     "nothing to do (for netem too: sudo modprobe sch_netem, or a distribution kernel)")
    if netem:
        return Check("namespaces", WARN, f"{works}; delay and loss by netem; the delay line does not run: "
                     f"{line_problem}", "make build (it builds csrc/link/delayline.c)")
    return Check("namespaces", WARN, f"{works}; delay and loss do not: no netem ({why_not_netem}) and the delay "
                 f"line does not run ({line_problem})", "make build, and run as root")


def check_orphans() -> Check:
    found = orphans.find_orphans()
    links = netlink.leftover_records()
    if links:
        return Check("leftover processes", WARN, f"{len(links)} network link(s) left by an earlier crash "
                     f"(namespaces {', '.join(ns for _, names in links for ns in names)})",
                     "labkit doctor --clean   (or: python -m labkit doctor --clean)")
    if not found:
        return Check("leftover processes", OK, "no lab process left behind by an earlier run")
    listed = "; ".join(orphans.describe(p) for p in found[:5]) + (" ..." if len(found) > 5 else "")
    return Check("leftover processes", WARN,
                 f"{len(found)} lab process(es) left by an earlier crash (they may hold ports "
                 f"and CPU): {listed}", "labkit doctor --clean   (or: python -m labkit doctor --clean)")


def check_cluster_certs(certs: Path | str | None = None) -> list[Check]:
    """A grading machine's certificates (labkit cluster init): each role's found here, in date, with
    the days it has left.  Nothing on a machine with none (a student's), unless asked with --certs."""
    from labkit.instructor.cluster import certs as certificates

    base = Path(certs or os.environ.get(certificates.CERTS_ENV) or certificates.DEFAULT_DIR)
    try:
        here = certificates.role_in(base)
    except LabError:  # no cryptography: then no certificates to check either
        here = None
    found = [role for role in certificates.ROLES if (base / role / "cert.pem").is_file() or here == role]
    if not found:
        if certs or os.environ.get(certificates.CERTS_ENV):
            return [Check("cluster certificates", FAIL, f"no grading-cluster certificate in {base}",
                          certificates.MAKE_THEM)]
        return []
    checks = []
    for role in found:
        name = f"cluster {role} certificate"
        try:
            loaded = certificates.load(role, base)
        except LabError as problem:
            checks.append(Check(name, FAIL, problem.what, problem.fix))
            continue
        days = loaded.days_left()
        detail = f"{loaded.subject}, in {loaded.folder}, expires {loaded.expires:%Y-%m-%d} ({days:.0f} days left)"
        if days < 14:
            checks.append(Check(name, WARN, detail + ": it will stop the cluster when it expires",
                                "make new ones before then: labkit cluster init DIR --force, and copy them"))
        else:
            checks.append(Check(name, OK, detail))
    return checks


def checks(certs: Path | str | None = None) -> list[Check]:
    """Every check, in the order a student would fix them (a grading machine's certificates last)."""
    found = perf.probe()
    return [
        check_home(),
        check_compiler(),
        check_make(),
        check_perf_present(found),
        check_perf_permitted(found),
        check_events(found),
        check_syscall_counts(found),
        check_cpus(),
        check_cpu_quota(),
        check_capabilities(),
        check_seccomp(),
        check_nofile(),
        check_kernel(),
        check_chromium(),
        check_liburing(),
        check_anchors(),
        check_namespaces(),
        check_orphans(),
        *check_cluster_certs(certs),
    ]


# ---------------------------------------------------------------------------
# Showing the checks
# ---------------------------------------------------------------------------

_MARK = {OK: "ok", WARN: "WARN", FAIL: "FAIL"}


def report(found: list[Check]) -> str:
    """A terminal table: one line per check, the fix indented under each problem."""
    width = max(len(c.name) for c in found)
    lines = [f"labkit doctor -- {platform.node()}", ""]
    for check in found:
        prefix = f"{_MARK[check.status]:<4}  {check.name:<{width}}  "
        wrapped = textwrap.wrap(check.detail, 100 - len(prefix)) or [""]
        lines.append(prefix + wrapped[0])
        lines += [" " * len(prefix) + more for more in wrapped[1:]]
        if check.status != OK and check.fix:
            lines += textwrap.wrap(check.fix, 100, initial_indent=" " * len(prefix) + "fix: ",
                                   subsequent_indent=" " * (len(prefix) + 5))
    problems = sum(c.status != OK for c in found)
    lines += ["", f"{len(found) - problems} ok, {problems} to look at"]
    return "\n".join(lines)


_COLOUR = {OK: "#1a7f37", WARN: "#9a6700", FAIL: "#cf222e"}


def to_html(found: list[Check]) -> str:
    """The same table for a notebook (display(HTML(...)))."""
    rows = []
    for check in found:
        fix = (f"<br><span style='opacity:.8'>fix:</span> <code>{html.escape(check.fix)}</code>"
               if check.status != OK and check.fix else "")
        rows.append(
            f"<tr><td style='color:{_COLOUR[check.status]};font-weight:bold'>{check.status}</td>"
            f"<td style='text-align:left'>{html.escape(check.name)}</td>"
            f"<td style='text-align:left'>{html.escape(check.detail)}{fix}</td></tr>")
    problems = sum(c.status != OK for c in found)
    return (f"<table><caption style='text-align:left'>labkit doctor: {len(found) - problems} ok, {problems} to "
            "look at</caption><thead><tr><th scope='col'>status</th><th scope='col' style='text-align:left'>check"
            "</th><th scope='col' style='text-align:left'>detail</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")

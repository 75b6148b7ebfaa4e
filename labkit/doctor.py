"""What this machine can build and measure, each problem with the command that fixes it.

`labkit doctor` prints report(findings()); notebook 00 shows to_html(findings()).  A finding is
one fact about this machine (ok, warn or fail) with its fix; the lab's other "checks" are a
notebook's exercises' (docs/architecture.md, the glossary).
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
class Finding:
    name: str
    status: str   # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""


# ---------------------------------------------------------------------------
# The findings, one function each
# ---------------------------------------------------------------------------

def _find_tool(name: str, what: str, fix: str) -> Finding:
    path = shutil.which(name)
    if path is None:
        return Finding(name, FAIL, f"{name} not found: {what}", fix)
    first = system._run([name, "--version"]) or ""
    return Finding(name, OK, first.splitlines()[0].strip() if first else path)


def find_home() -> Finding:
    """Where this user's results and builds go (labkit.paths): the checkout, or LABKIT_HOME
    beside a shared install; a place this user cannot write loses every measurement."""
    if not (paths.ROOT / "csrc").is_dir():
        return Finding("lab home", FAIL, f"no lab beside labkit in {paths.ROOT} (no csrc/): labkit was installed "
                     "apart from the lab's folder", "export LABKIT_ROOT=/path/to/the/lab (the folder with csrc/ "
                     "and notebooks/), or install it from there: pip install -e /path/to/the/lab")
    home = paths.HOME
    place = next(folder for folder in [home, *home.parents] if folder.exists())  # made when first needed
    if not os.access(place, os.W_OK):
        return Finding("lab home", FAIL, f"{home}: you cannot write there, so no result could be kept",
                     "export LABKIT_HOME=~/labkit (a folder of yours) and restart the kernel or the command")
    return Finding("lab home", OK, paths.describe())


def find_compiler() -> Finding:
    return _find_tool("gcc", "the C servers cannot be built", "sudo apt-get install build-essential")


def find_make() -> Finding:
    return _find_tool("make", "the C servers cannot be built", "sudo apt-get install build-essential")


def find_perf_present(found: perf.PerfProbe) -> Finding:
    if os.environ.get("LABKIT_NO_PERF") == "1":
        return Finding("perf installed", WARN, "LABKIT_NO_PERF=1: perf is switched off, counters come from /proc",
                     "unset LABKIT_NO_PERF")
    if found.path is None:
        return Finding("perf installed", WARN, "perf is not installed: counters come from /proc and "
                     "getrusage (fewer events, coarser task-clock)", perf.install_fix())
    if found.version is None:
        return Finding("perf installed", WARN, found.problem, found.fix)
    return Finding("perf installed", OK, f"perf {found.version} at {found.path}")


def find_perf_permitted(found: perf.PerfProbe) -> Finding:
    level = found.paranoid
    meaning = perf.paranoid_meaning(level)
    who = "root: not limited by it" if os.geteuid() == 0 else f"for you: {meaning}"
    detail = f"kernel.perf_event_paranoid = {level} ({who})"
    if found.path is None or found.version is None or os.environ.get("LABKIT_NO_PERF") == "1":
        return Finding("perf permitted", WARN, detail + "; perf not in use", "")
    if not found.usable:
        return Finding("perf permitted", WARN, f"{detail}; {found.problem}; counters come from /proc", found.fix)
    if found.user_only:
        return Finding("perf permitted", WARN, f"{detail}; context switches come from /proc, CPU "
                     "migrations are not measured", perf.PARANOID_FIX)
    return Finding("perf permitted", OK, detail)


def find_events(found: perf.PerfProbe) -> Finding:
    if not found.usable:
        return Finding("perf events", WARN, "perf counts nothing here: task-clock, page-faults and "
                     "context switches come from /proc; cycles, instructions, branches not measured",
                     found.fix)
    counted = ", ".join(found.counted)
    missing = [e for e in perf.HARDWARE_EVENTS if e not in found.counted]
    if missing:
        return Finding("perf events", WARN, f"counted: {counted}. Missing: {', '.join(missing)} -- "
                     f"{perf.HARDWARE_NOTE}; they are shown as missing, never as 0",
                     perf.HARDWARE_FIX)
    return Finding("perf events", OK, f"counted: {counted}")


def find_syscall_counts(found: perf.PerfProbe) -> Finding:
    """perf's syscalls:sys_enter_* tracepoints, which count the system calls per request of
    notebooks 04 and 06.  They live in tracefs, which a freshly booted machine may not have
    mounted: perf mounts it when run as root (syscall_tracepoints asks it to)."""
    if not found.usable:
        return Finding("system-call counts", WARN, "not measurable: perf is not usable here", found.fix)
    counted, why_not = perf.syscall_tracepoints(("read", "write"))
    if counted:
        return Finding("system-call counts", OK, "perf counts the syscall tracepoints (tracefs is mounted)")
    detail, _, fix = why_not.partition("): ")
    return Finding("system-call counts", WARN, f"not measurable ({detail}): the system calls per request of "
                 "notebooks 04 and 06 are shown as missing", fix or why_not)


def find_cpus() -> Finding:
    cpus = system.usable_cpus()
    server, client, note = system.default_pinning()
    if len(cpus) >= 2:
        return Finding("CPUs for pinning", OK, f"{len(cpus)} usable CPUs {cpus}: server on {server}, "
                     f"client on {client} by default")
    return Finding("CPUs for pinning", WARN, note + " (the client's CPU time competes with the server's)",
                 "give the VM a second CPU (VirtualBox: Settings > System > Processor; "
                 "WSL2: processors=2 in %UserProfile%\\.wslconfig)")


def find_cpu_quota() -> Finding:
    """A cgroup's CPU quota (a pod's CPU limit) throttles server and client together."""
    quota, pinned, where = confinement.cpu_quota(), min(len(system.usable_cpus()), 2), confinement.cpu_set()
    cpus = f"; its CPU set: {where}" if where is not None else ""
    if quota is None or quota.cpus is None or quota.cpus >= pinned:
        said = "no cgroup file gives one" if quota is None else \
            f"{'none' if quota.cpus is None else f'{quota.cpus:g} CPUs'} ({quota.source})"
        return Finding("CPU quota", OK, said + cpus)
    return Finding("CPU quota", WARN, f"{quota.cpus:g} CPUs of time ({quota.source}){cpus}: server and client get less "
                 f"than the {pinned} CPUs they are pinned to, and the kernel throttles them (cpu.stat's nr_throttled): "
                 "times measured here include waiting for the quota", "ask for a CPU limit of 2 or more (on a hub: "
                 "the spawner's cpu_limit), or read the figures as the quota's")


def find_capabilities() -> Finding:
    held = confinement.capabilities()
    if not (missing := [name for name, has in held.items() if not has]):
        return Finding("capabilities", OK, "held: " + ", ".join(held))
    costs = "; ".join(f"without {name}: no {confinement.CAPABILITIES[name][1]}" for name in missing)
    return Finding("capabilities", WARN, f"not held: {', '.join(missing)} ({costs}). The perf and "
                 "namespaces checks show what works all the same",
                 "run as root (sudo), or grant them to the container (Docker: --cap-add; a hub: "
                 "the spawner's capabilities, docs/deploy.md)")


def find_seccomp() -> Finding:
    """A seccomp filter (a container's profile): which of the calls the lab needs it refuses,
    each tried for real (labkit.syscall_probe), and how to let each through."""
    mode = confinement.seccomp()
    if mode is None or mode.mode == "none":
        return Finding("seccomp", OK, "no seccomp filter" if mode else "the kernel has no seccomp")
    where = f"seccomp mode {mode.mode} ({mode.filters} filter(s), where the kernel says)"
    refused = [r for r in syscall_probe.refusals() if r.by == "seccomp"]
    if not refused:
        return Finding("seccomp", OK, f"{where}: it lets through what the lab tries, io_uring_setup, "
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
    return Finding("seccomp", WARN, f"{where} refuses {said}", "; ".join(fixes) + " (a hub: docs/deploy.md)")


def find_emulation() -> list[Finding]:
    """An image of another architecture run through qemu-user (an arm64 image on an x86-64
    host): the calls the emulator does not translate, which no setting gives back.  None
    where the lab runs natively."""
    if not syscall_probe.emulated():
        return []
    lost = [r for r in syscall_probe.refusals() if r.by.startswith("the emulator")]
    said = "".join(f"; it does not translate {r.call} ({r.error}): no {syscall_probe.CALLS[r.call]}"
                   for r in lost)
    return [Finding("emulation", WARN, f"{platform.machine()} programs emulated on another CPU's kernel "
                    f"(qemu-user): times include the emulator's work{said}",
                    "run the image built for this machine's architecture (bash container/image.sh)")]


def find_nofile() -> Finding:
    soft, hard = system.nofile_limit()
    hard_text = "unlimited" if hard == -1 else str(hard)
    detail = f"open files: soft {soft}, hard {hard_text}"
    if soft >= NOFILE_WANTED:
        return Finding("open-file limit", OK, detail)
    if hard == -1 or hard >= NOFILE_WANTED:
        return Finding("open-file limit", OK, f"{detail}; labkit raises the soft limit to "
                     f"{NOFILE_WANTED} for the 10,000-connection experiments")
    return Finding("open-file limit", WARN,
                 f"{detail}: the 10,000-connection experiments need {NOFILE_WANTED}; "
                 f"up to {hard - 100} connections will work",
                 "raise the hard limit: add the lines '* soft nofile 65536' and '* hard nofile 65536' "
                 "to /etc/security/limits.d/lab.conf and log in again (if Jupyter runs as a systemd "
                 "service: LimitNOFILE=65536 in its unit); then `ulimit -n 65536` in a new shell "
                 "shows the new limit")


def find_kernel() -> Finding:
    release = system.kernel()
    numbers = re.match(r"(\d+)\.(\d+)", release)
    version = (int(numbers.group(1)), int(numbers.group(2))) if numbers else (0, 0)
    wsl = "microsoft" in release.lower()
    detail = f"Linux {release}" + (" (WSL2)" if wsl else "")
    if version < (5, 6):
        return Finding("kernel", WARN, detail + ": io_uring networking needs 5.6 or newer; "
                     "the io_uring server is skipped", "use a newer kernel (any current distribution)")
    return Finding("kernel", OK, detail)


def find_chromium() -> Finding:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return Finding("chromium", OK, f"{path}: figures can be exported to PNG, SVG and PDF")
    return Finding("chromium", WARN, "no Chromium/Chrome: figures show in the notebook, but PNG/SVG/PDF "
                 "export (kaleido) needs a browser", "sudo apt-get install chromium")


def find_liburing() -> Finding:
    headers = [Path("/usr/include/liburing.h"), Path("/usr/local/include/liburing.h")]
    if any(h.exists() for h in headers):
        return Finding("liburing", OK, "liburing headers found: the io_uring server can be built")
    return Finding("liburing", WARN, "liburing headers not found: the io_uring server is skipped",
                 "sudo apt-get install liburing-dev")


def find_anchors() -> Finding:
    """The reference tools the lab measures itself against, on this machine, in the same run."""
    anchors = {"sockperf": "round trips (bench rtt)",
               "iperf3": "the one-stream ceiling of uploads (notebook 03, bench upload)"}
    missing = [tool for tool in anchors if shutil.which(tool) is None]
    if not missing:
        return Finding("anchors", OK, "sockperf and iperf3 found: round trips and uploads have a reference")
    return Finding("anchors", WARN, "; ".join(f"{tool} not found: no reference for {anchors[tool]}" for tool in missing)
                 + " (the lab's own figures still work)", f"sudo apt-get install {' '.join(missing)}")


def find_namespaces() -> Finding:
    """Network namespaces joined by veth, shaped by tbf, with delay and loss by netem or the
    lab's delay line: the "different hosts" links."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return Finding("namespaces", WARN, "ip or tc is missing: no links between namespaces",
                     "sudo apt-get install iproute2")
    try:
        with netlink.Link(rate="1gbit"):
            pass
    except LabError as failure:
        return Finding("namespaces", WARN, f"cannot make a link between namespaces: {failure.what}", failure.fix)
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
        return Finding("namespaces", OK, f"{works}; delay and loss by netem, and by the lab's delay line")
    if not line_problem:
        return Finding("namespaces", OK, f"{works}; delay and loss by the lab's delay line, since {why_not_netem}",
                     "nothing to do (for netem too: sudo modprobe sch_netem, or a distribution kernel)")
    if netem:
        return Finding("namespaces", WARN, f"{works}; delay and loss by netem; the delay line does not run: "
                     f"{line_problem}", "make build (it builds csrc/link/delayline.c)")
    return Finding("namespaces", WARN, f"{works}; delay and loss do not: no netem ({why_not_netem}) and the delay "
                 f"line does not run ({line_problem})", "make build, and run as root")


def find_orphans() -> Finding:
    found = orphans.find_orphans()
    links = netlink.leftover_records()
    if links:
        return Finding("leftover processes", WARN, f"{len(links)} network link(s) left by an earlier crash "
                     f"(namespaces {', '.join(ns for _, names in links for ns in names)})",
                     "labkit doctor --clean   (or: python -m labkit doctor --clean)")
    if not found:
        return Finding("leftover processes", OK, "no lab process left behind by an earlier run")
    listed = "; ".join(orphans.describe(p) for p in found[:5]) + (" ..." if len(found) > 5 else "")
    return Finding("leftover processes", WARN,
                 f"{len(found)} lab process(es) left by an earlier crash (they may hold ports "
                 f"and CPU): {listed}", "labkit doctor --clean   (or: python -m labkit doctor --clean)")


def find_cluster_certs(certs: Path | str | None = None) -> list[Finding]:
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
            return [Finding("cluster certificates", FAIL, f"no grading-cluster certificate in {base}",
                            certificates.MAKE_THEM)]
        return []
    result = []
    for role in found:
        name = f"cluster {role} certificate"
        try:
            loaded = certificates.load(role, base)
        except LabError as problem:
            result.append(Finding(name, FAIL, problem.what, problem.fix))
            continue
        days = loaded.days_left()
        detail = f"{loaded.subject}, in {loaded.folder}, expires {loaded.expires:%Y-%m-%d} ({days:.0f} days left)"
        if days < 14:
            result.append(Finding(name, WARN, detail + ": it will stop the cluster when it expires",
                                  "make new ones before then: labkit cluster init DIR --force, and copy them"))
        else:
            result.append(Finding(name, OK, detail))
    return result


def findings(certs: Path | str | None = None) -> list[Finding]:
    """Every finding, in the order a student would fix them (a grading machine's certificates last)."""
    found = perf.probe()
    return [
        find_home(),
        find_compiler(),
        find_make(),
        find_perf_present(found),
        find_perf_permitted(found),
        find_events(found),
        find_syscall_counts(found),
        find_cpus(),
        find_cpu_quota(),
        find_capabilities(),
        find_seccomp(),
        *find_emulation(),
        find_nofile(),
        find_kernel(),
        find_chromium(),
        find_liburing(),
        find_anchors(),
        find_namespaces(),
        find_orphans(),
        *find_cluster_certs(certs),
    ]


# ---------------------------------------------------------------------------
# Showing the findings
# ---------------------------------------------------------------------------

_MARK = {OK: "ok", WARN: "WARN", FAIL: "FAIL"}


def report(found: list[Finding]) -> str:
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


def to_html(found: list[Finding]) -> str:
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


checks = findings  # the old name, for notebooks handed out before it was renamed

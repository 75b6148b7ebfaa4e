"""The grading platforms' containers, reproduced on this machine (as root): what decides a
grading's outcome there, and nothing else, around the platform's own entry point.

  Platform      a platform's settings: memory, CPUs, processes, network, the time after
                which the platform kills the container, where the package and the submission
                lie, the entry point it runs
  build_image   an image layer: the package (the zip, or PrairieLearn's folder) where the
                platform puts it, built by a command run in a container as a build would run it
  run           one grading: a container started, its entry point run, results.json read back

A container here, as Docker starts one by default (Gradescope's and PrairieLearn's graders
run in Docker):
  * a root of its own: an overlay per grading over the machine's own root, read-only below
    (it stands for the platform's base image), with the image layer over it (overlayfs:
    a fresh upper layer per container, so nothing one grading writes reaches the next);
  * mount and PID namespaces of its own (and a network namespace with only `lo` where the
    platform gives no network: PrairieLearn's enableNetworking false), a private /proc and
    /tmp; the machine's /work and /root are hidden (the image holds no instructor checkout);
  * Docker's default capability bounding set (moby's oci/caps/defaults.go): no
    CAP_SYS_ADMIN, so the grader can make no namespace or mount of its own;
  * a cgroup of its own made from outside (memory, CPU quota, pids), which the container
    sees read-only at /sys/fs/cgroup, as Docker mounts it: the grader can make no cgroup;
  * killed, every process, when the platform's time is up: results not written by then are lost.

Where it differs from the platform (say so, and why it does not change the outcome):
  * the base image is this machine's root, not Ubuntu's (Gradescope) or Debian's (the
    Dockerfile's): the same Debian 12 packages the lab's setup installs; a fresh Debian root
    built by setup.sh itself is scripts/platform-image.sh's, run apart from make test;
  * the image's Python environment is the machine's (.venv, bound read-only at the lab's
    .venv and at its own path, which its kernel spec names) where the platform's build makes
    one with `make setup`; the C build is made in the image by the build command given;
  * no seccomp profile: Docker's refuses perf_event_open (without CAP_PERFMON) and, since
    Engine 25, io_uring; the lab's checks that need them say "not measurable" either way,
    where labkit doctor finds them missing, and this machine has them;
  * the CPU limit is a CFS quota, as `docker run --cpus` sets it;
  * the grader is told to lease grading uids from CONTAINER_UIDS (LABKIT_FIRST_GRADING_UID),
    apart from the suite's graders that run beside it on this machine.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
VENV = Path(__file__).resolve().parent.parent / ".venv"
# Docker's default capabilities (moby oci/caps/defaults.go): CAP_SYS_ADMIN is not among them.
DOCKER_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
               "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap")
CGROUP = Path("/sys/fs/cgroup")
# The grader in a container leases grading uids from here, not from labkit's 61000: graders on
# this machine's own PID namespace (the suite's other grading tests, beside this one) kill a
# leased uid's every process, which reaches into a container that shares the kernel's uids
# (the platforms run one grading per container, and no grader outside them).
CONTAINER_UIDS = 64000


@dataclass(frozen=True)
class Platform:
    name: str
    memory_bytes: int
    cpus: float
    pids: int | None       # None: no limit (Docker's default)
    network: bool
    kill_s: float          # the platform kills the container after this long
    top: str               # the image's folder the package lies in
    lab: str               # the package's lab in the container
    entry: str             # what the platform runs for a grading, as root
    submission: str        # where the student's files are put
    results: str           # where results.json must be


# Gradescope (its autograder docs): 768 MB and 0.5 CPU by default (an assignment's settings may
# raise them), a 10-minute default timeout, network on; /autograder/run_autograder, copied from
# the zip's root when the image is built, is run as root for each submission.
GRADESCOPE = Platform("gradescope", 768 * MIB, 0.5, None, True, 600.0, "autograder", "autograder/source/lab",
                      "/autograder/run_autograder", "autograder/submission", "autograder/results/results.json")
# PrairieLearn (docs/externalGrading.md and its grader host's defaults): 2 GiB, 0.9 CPU, 1,024
# processes, no network (enableNetworking false), killed at the question's timeout (600 s at most).
PRAIRIELEARN = Platform("prairielearn", 2048 * MIB, 0.9, 1024, False, 600.0, "lab", "lab", "/lab/run-grader",
                        "grade/student", "grade/results/results.json")
PLATFORMS = {p.name: p for p in (GRADESCOPE, PRAIRIELEARN)}


@dataclass
class Graded:
    returncode: int | None
    output: str            # the entry point's stdout and stderr (their tail)
    results: dict | None   # results.json as the platform would read it, None if not written
    results_bytes: int
    elapsed_s: float
    killed: bool           # the platform's time ran out
    oom_kills: int         # the kernel's OOM kills in the container's cgroup


def unpack(platform: Platform, package: Path, image: Path) -> Path:
    """The package where the platform puts it in `image` (a folder standing for the image's /):
    Gradescope's zip under /autograder/source with run_autograder copied to /autograder; the
    PrairieLearn folder's lab/ as /lab (its Dockerfile's COPY).  Returns the lab's folder."""
    if platform is GRADESCOPE:
        source = image / "autograder" / "source"
        with zipfile.ZipFile(package) as archive:
            for info in archive.infolist():
                target = source / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(info))
                target.chmod((info.external_attr >> 16) & 0o7777 or 0o644)
        shutil.copy2(source / "run_autograder", image / "autograder" / "run_autograder")
    else:
        shutil.copytree(package / "lab", image / "lab", symlinks=True)
    lab = image / platform.lab
    (lab / ".venv").mkdir(exist_ok=True)  # the machine's venv is bound here (module docstring)
    return lab


class Cgroup:
    """The container's cgroup, made outside it (v1 controllers or v2), its limits set."""

    def __init__(self, platform: Platform):
        name = f"labkit-platform-{uuid.uuid4().hex[:10]}"
        self.v2 = (CGROUP / "cgroup.controllers").is_file()
        self.name = name
        if self.v2:
            self.folders = {"all": CGROUP / name}
        else:
            self.folders = {c: CGROUP / c / name for c in ("memory", "pids", "cpu") if (CGROUP / c).is_dir()}
        for folder in set(self.folders.values()):
            folder.mkdir()
        quota, period = int(platform.cpus * 100_000), 100_000
        if self.v2:
            folder = self.folders["all"]
            (folder / "memory.max").write_text(str(platform.memory_bytes))
            (folder / "cpu.max").write_text(f"{quota} {period}")
            (folder / "pids.max").write_text(str(platform.pids or "max"))
        else:
            (self.folders["memory"] / "memory.limit_in_bytes").write_text(str(platform.memory_bytes))
            (self.folders["cpu"] / "cpu.cfs_period_us").write_text(str(period))
            (self.folders["cpu"] / "cpu.cfs_quota_us").write_text(str(quota))
            if platform.pids:
                (self.folders["pids"] / "pids.max").write_text(str(platform.pids))

    def procs(self) -> list[Path]:
        return [folder / "cgroup.procs" for folder in dict.fromkeys(self.folders.values())]

    def oom_kills(self) -> int:
        path = self.folders["all"] / "memory.events" if self.v2 else self.folders["memory"] / "memory.oom_control"
        for line in path.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def pids(self) -> list[int]:
        found = set()
        for path in self.procs():
            try:
                found |= {int(pid) for pid in path.read_text().split()}
            except OSError:
                pass
        return sorted(found)

    def kill_all(self) -> None:
        deadline = time.monotonic() + 30
        while self.pids() and time.monotonic() < deadline:
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def remove(self) -> None:
        self.kill_all()
        for folder in dict.fromkeys(self.folders.values()):
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)

    def visible(self) -> list[tuple[str, Path]]:
        """(name under the container's /sys/fs/cgroup, the folder bound there read-only)."""
        if self.v2:
            return [("", self.folders["all"])]
        return list(self.folders.items())


def _q(path) -> str:
    return shlex.quote(str(path))


def _script(platform: Platform, image: Path, scratch: Path, cgroup: Cgroup, command: str,
            writable_image: bool, base: Path) -> str:
    """The shell that builds the container's root in its new namespaces and runs `command` in
    it (as root, Docker's capabilities), then copies results.json out for the harness."""
    layers, root = scratch / "layers", scratch / "root"
    steps = [
        "set -eu",
        f"mkdir -p {_q(layers)} && mount -t tmpfs -o mode=700 layers {_q(layers)}",
        f"mkdir -p {_q(layers)}/sys/u {_q(layers)}/sys/w {_q(layers)}/app/u {_q(layers)}/app/w {_q(root)}",
        f"mount --bind {_q(base)} {_q(root)}" if writable_image and base != Path("/") else  # a fresh root's build
        f"mount -t overlay overlay -o lowerdir={_q(base)},upperdir={_q(layers)}/sys/u,workdir={_q(layers)}/sys/w "
        f"{_q(root)}",
        f"mkdir -p {_q(root / platform.top)}",
    ]
    top = root / platform.top
    if writable_image:  # building the image: what the build writes stays in it
        steps.append(f"mount --bind {_q(image / platform.top)} {_q(top)}")
    else:
        steps.append(f"mount -t overlay overlay -o lowerdir={_q(image / platform.top)},upperdir={_q(layers)}/app/u,"
                     f"workdir={_q(layers)}/app/w {_q(top)}")
    for hidden in ("work", "root", "tmp", "var/tmp", "dev/shm"):
        steps.append(f"mkdir -p {_q(root / hidden)} && mount -t tmpfs -o mode=1777 {hidden.replace('/', '-')} "
                     f"{_q(root / hidden)}")
    for place in (root / str(VENV).lstrip("/"), root / platform.lab / ".venv") if base == Path("/") else ():
        steps.append(f"mkdir -p {_q(place)} && mount --bind {_q(VENV)} {_q(place)} && "
                     f"mount -o remount,bind,ro {_q(place)}")
    steps += [f"mount -t proc proc {_q(root / 'proc')}", f"mount --rbind /dev {_q(root / 'dev')}",
              f"mount -t sysfs -o ro sysfs {_q(root / 'sys')}",
              f"mount -t tmpfs -o mode=755 cgroup {_q(root / 'sys/fs/cgroup')}"]
    for name, folder in cgroup.visible():
        inside = root / "sys/fs/cgroup" / name
        steps.append(f"mkdir -p {_q(inside)} && mount --bind {_q(folder)} {_q(inside)} && "
                     f"mount -o remount,bind,ro {_q(inside)}")
    steps.append(f"mount -o remount,ro {_q(root / 'sys/fs/cgroup')}")
    if not platform.network:
        steps.append("ip link set lo up")
    if platform.top == "autograder":  # Gradescope's harness makes it (its stdout goes there); PrairieLearn does not
        results = root / platform.results
        steps.append(f"mkdir -p {_q(results.parent)} && chmod 755 {_q(results.parent)}")
    if (scratch / "course").is_dir():  # PrairieLearn copies the question's serverFilesCourse folders in
        where = root / "grade" / "serverFilesCourse"
        steps.append(f"mkdir -p {_q(where)} && cp -a {_q(scratch / 'course')}/. {_q(where)}/")
    if (scratch / "submission").is_dir():
        where = root / platform.submission
        steps.append(f"mkdir -p {_q(where)} && cp -a {_q(scratch / 'submission')}/. {_q(where)}/")
    caps = "-all," + ",".join(f"+{cap}" for cap in DOCKER_CAPS)
    steps.append("set +e")
    steps.append(f"chroot {_q(root)} setpriv --bounding-set={caps} --inh-caps=-all -- "
                 f"env LABKIT_FIRST_GRADING_UID={CONTAINER_UIDS} "
                 f"sh -c {_q(command)} > {_q(scratch / 'out' / 'output.txt')} 2>&1")
    steps.append("status=$?")
    steps.append(f"cp {_q(root / platform.results)} {_q(scratch / 'out' / 'results.json')} 2>/dev/null")
    steps.append("exit $status")
    return "\n".join(steps) + "\n"


def run(platform: Platform, image: Path, command: str | None = None, submission: dict[str, bytes] | None = None,
        kill_s: float | None = None, writable_image: bool = False, base: Path = Path("/"),
        course: Path | None = None) -> Graded:
    """One container of `platform` on `image`: `submission` (relative path -> bytes) where the
    platform puts it, `course` (a folder: the course's serverFilesCourse folders the question
    names) copied to /grade/serverFilesCourse as PrairieLearn copies them into each grading
    job, `command` (default: the platform's entry point) run as root, killed with
    everything in it after `kill_s` (default: the platform's).  `base`: the root the image's
    layer lies over (this machine's, with its venv bound in; or a fresh Debian root, whose
    image layer its own setup made)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"labkit-{platform.name}-"))
    os.chmod(scratch, 0o700)
    (scratch / "out").mkdir()
    for name, data in (submission or {}).items():
        target = scratch / "submission" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    if submission is not None:
        (scratch / "submission").mkdir(exist_ok=True)
    if course is not None:
        shutil.copytree(course, scratch / "course", symlinks=True)
    command = command or f"cd /{platform.top} && exec {platform.entry}"
    cgroup = Cgroup(platform)
    (scratch / "container.sh").write_text(_script(platform, image, scratch, cgroup, command, writable_image, base))
    join = "; ".join(f"echo $$ > {_q(path)}" for path in cgroup.procs())
    unshare = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", *(
        [] if platform.network else ["--net"])]
    started = time.monotonic()
    killed = False
    try:
        process = subprocess.Popen(["sh", "-c", f"{join}; exec \"$@\"", "join", *unshare, "--", "sh",
                                    str(scratch / "container.sh")], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            setup, _ = process.communicate(timeout=kill_s or platform.kill_s)
        except subprocess.TimeoutExpired:
            killed = True
            cgroup.kill_all()
            setup, _ = process.communicate()
        elapsed = time.monotonic() - started
        oom = cgroup.oom_kills()
        output = (scratch / "out" / "output.txt").read_bytes().decode(errors="replace") \
            if (scratch / "out" / "output.txt").is_file() else ""
        written = scratch / "out" / "results.json"
        data = written.read_bytes() if written.is_file() else b""
        try:
            results = json.loads(data) if data else None
        except ValueError:
            results = None
        return Graded(process.returncode, (setup.decode(errors="replace") + output)[-20_000:], results, len(data),
                      elapsed, killed, oom)
    finally:
        cgroup.remove()
        shutil.rmtree(scratch, ignore_errors=True)

"""What confines a process, read back as the kernel applies it: capabilities dropped by
setpriv (util-linux, read back by setpriv itself), a seccomp filter installed with prctl, and
a cgroup's CPU quota that the kernel then enforces (cpu.stat counts the throttling).  Each
check of labkit doctor that reports them says what the missing one costs."""

import contextlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

import waits
from labkit import confinement

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="dropping capabilities and making cgroups need root")
READ_BACK = ("import json; from labkit import confinement as c, doctor as d; "
             "print(json.dumps({'caps': c.capabilities(), 'seccomp': c.seccomp().__dict__, "
             "'quota': c.cpu_quota().cpus if c.cpu_quota() else 'none', "
             "'checks': {k.name: [k.status, k.detail] for k in (d.find_capabilities(), d.find_seccomp(), "
             "d.find_cpu_quota())}}))")


def read_back(prefix=(), preexec=None) -> dict:
    done = subprocess.run([*prefix, sys.executable, "-c", READ_BACK], capture_output=True, text=True,
                          timeout=60, preexec_fn=preexec)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("line, cpus", [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("", [])])
def test_cpu_lists_read_as_the_kernel_writes_them(line, cpus):
    assert confinement.parse_cpu_list(line + "\n") == cpus


@ROOT_ONLY
def test_dropped_capabilities_are_reported():
    """Capabilities dropped by setpriv are reported missing with their cost."""
    dropped = ["-net_admin", "-perfmon"]
    prefix = ["setpriv", f"--bounding-set={','.join(dropped)}", "--"]
    bounding = subprocess.run([*prefix, "setpriv", "-d"], capture_output=True, text=True, timeout=30).stdout
    names = next(line for line in bounding.splitlines() if line.startswith("Capability bounding set:"))
    names = set(names.split(":", 1)[1].strip().split(","))
    seen = read_back(prefix)
    # as root, what a program holds after exec is its bounding set: setpriv's own account of it
    assert seen["caps"] == {name: name.removeprefix("CAP_").lower() in names for name in confinement.CAPABILITIES}
    assert seen["caps"] == {"CAP_NET_ADMIN": False, "CAP_SYS_ADMIN": True, "CAP_PERFMON": False}
    status, detail = seen["checks"]["capabilities"]
    assert status == "warn" and "not held: CAP_NET_ADMIN, CAP_PERFMON" in detail
    assert "no links between namespaces" in detail and "kernel samples" in detail
    assert read_back()["checks"]["capabilities"][0] == ("ok" if os.geteuid() == 0 else "warn")


def _allow_everything_filter():
    """In the child, before exec: a seccomp filter that allows every call (prctl, as libseccomp
    does), so the mode is 'filter' and nothing is refused."""
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    BPF_RET_K, SECCOMP_RET_ALLOW = 0x06, 0x7FFF0000
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    program = (SockFilter * 1)(SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    fprog = SockFprog(1, program)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0):
        os._exit(90 + ctypes.get_errno())


def test_a_seccomp_filter_is_reported_as_one():
    assert read_back()["seccomp"]["mode"] == "none"  # this test's own process: none here
    seen = read_back(preexec=_allow_everything_filter)
    assert seen["seccomp"]["mode"] == "filter"
    if Path("/proc/self/status").read_text().count("Seccomp_filters"):  # Linux 5.9 and newer
        assert seen["seccomp"]["filters"] == 1
    status, detail = seen["checks"]["seccomp"]
    # a filter that lets everything through refuses nothing the lab tries (tests/install/test_container.py: refusals)
    assert status == "ok" and "seccomp mode filter" in detail and "perf_event_open and unshare" in detail


@contextlib.contextmanager
def _cpu_cgroup(quota_us: int, period_us: int):
    """A cgroup with this CPU quota (v2 cpu.max, or v1's cpu controller): its folder and the
    file a process is moved in by.  Afterwards the folder is gone, and on v2 the root's cpu
    controller is switched off again if this switched it on: the machine is left as found."""
    name = f"labkit-test-quota-{secrets.token_hex(4)}"
    v2 = Path("/sys/fs/cgroup")
    enabled_cpu = False
    if (v2 / "cgroup.controllers").is_file() and "cpu" in (v2 / "cgroup.controllers").read_text().split():
        if "cpu" not in (v2 / "cgroup.subtree_control").read_text().split():
            (v2 / "cgroup.subtree_control").write_text("+cpu")
            enabled_cpu = True
        folder = v2 / name
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{quota_us} {period_us}")
    else:
        v1 = Path("/sys/fs/cgroup/cpu")
        if not (v1 / "cpu.cfs_quota_us").is_file():
            pytest.fail("neither cgroup v2 with its cpu controller nor v1's cpu controller is mounted here")
        folder = v1 / name
        folder.mkdir()
        (folder / "cpu.cfs_period_us").write_text(str(period_us))
        (folder / "cpu.cfs_quota_us").write_text(str(quota_us))
    try:
        yield folder, folder / "cgroup.procs"
    finally:
        def removed():  # empty once its processes are reaped
            with contextlib.suppress(OSError):
                folder.rmdir()
            return not folder.exists()
        waits.wait_until(removed, within=5, every=0.1)
        if enabled_cpu:
            (v2 / "cgroup.subtree_control").write_text("-cpu")


@ROOT_ONLY
def test_a_cpu_quota_is_read_as_the_kernel_enforces_it():
    # Half a CPU in 10 ms periods: the spinners are throttled as soon as they get 5 ms of CPU
    # together in one period.  With the default 100 ms period they need 50 ms in one, which a
    # machine busy with four test workers did not give them (27 periods, none throttled).
    with _cpu_cgroup(5_000, 10_000) as (folder, procs):
        seen = read_back(preexec=lambda: procs.write_text(str(os.getpid())))
        assert seen["quota"] == 0.5
        status, detail = seen["checks"]["CPU quota"]
        assert status == "warn" and detail.startswith("0.5 CPUs of time") and "throttles" in detail
        # the kernel's side of the same number: two processes spinning inside are throttled.  Each
        # spins for CPU time, not wall time: on a busy machine 0.6 s of wall time may hold less
        # CPU than the quota allows, and nothing is throttled
        spin = "import time\nend = time.time() + 20\nwhile time.process_time() < 0.4 and time.time() < end: pass"
        def join():
            procs.write_text(str(os.getpid()))

        spinners = [subprocess.Popen([sys.executable, "-c", spin], preexec_fn=join) for _ in range(2)]
        for spinner in spinners:
            spinner.wait(timeout=30)
        stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
        assert int(stat["nr_throttled"]) > 0, stat
    assert read_back()["quota"] in (None, "none")  # outside it: no quota here

"""Write container/seccomp.json: the default seccomp profile of Podman (containers-common's
/usr/share/containers/seccomp.json) with one rule of the lab's added, which allows the calls
of LAB_CALLS whatever the container's capabilities.

    python3 container/seccomp_profile.py [DEFAULT_PROFILE]

Invariants:
- Every call of LAB_CALLS is named by the lab's rule alone: it is taken out of every rule of
  the default first (a rule left naming nothing is dropped), so no two rules decide it.
- Nothing else changes: every other call is refused, allowed or tied to a capability as the
  default says.  (containers-common 0.50's default, Debian 12's, refuses io_uring with
  ENOSYS, allows perf_event_open only to a container holding CAP_SYS_ADMIN, and allows
  unshare, setns, mount and clone to every container: the kernel then asks for the
  capabilities.  Docker's default allows those four only with CAP_SYS_ADMIN.)
"""

import json
import sys
from pathlib import Path

DEFAULT = Path("/usr/share/containers/seccomp.json")
OUT = Path(__file__).resolve().parent / "seccomp.json"
LAB_CALLS = {
    "io_uring_setup": "the uring server's ring (Docker 25 and later refuse it whatever the capabilities)",
    "io_uring_enter": "the uring server's submissions and completions",
    "io_uring_register": "liburing registers the ring's descriptor with it",
    "perf_event_open": "perf stat's counters of the servers and the load generator (the default allows it "
                       "only to a container holding CAP_SYS_ADMIN; Docker's, or CAP_PERFMON)",
}
COMMENT = "labkit: allowed to every process of the lab's container. " + "; ".join(
    f"{name}: {why}" for name, why in LAB_CALLS.items())


def lab_profile(default: dict) -> dict:
    profile = dict(default)
    rules = []
    for rule in default["syscalls"]:
        names = [name for name in rule["names"] if name not in LAB_CALLS]
        if names:
            rules.append({**rule, "names": names})
    lab_rule = {"names": list(LAB_CALLS), "action": "SCMP_ACT_ALLOW", "args": [], "comment": COMMENT,
                "includes": {}, "excludes": {}}
    profile["syscalls"] = [lab_rule, *rules]
    return profile


if __name__ == "__main__":
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    OUT.write_text(json.dumps(lab_profile(json.loads(source.read_text())), indent=1) + "\n")
    print(f"{OUT}: {source} with the lab's rule for {', '.join(LAB_CALLS)}")

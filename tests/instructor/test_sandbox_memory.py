"""Where a graded run's memory is bounded, and what that leaves an ASan build
(labkit/instructor/sandbox: isolation.container_memory_max, inside.lower_limits; labkit/battery/refusals).

A run with a cgroup of its own, or one under a grading uid in a container with a memory limit
(Gradescope's and PrairieLearn's graders, which can make no cgroup), has its memory bounded by
that cgroup and is the OOM killer's first choice there (oom_score_adj 1000): its address-space
limit is then soft only, so the capstone battery's ASan build may raise it for the terabytes of
shadow memory it reserves and never uses.  Elsewhere the hard limit holds, and the battery says
the sanitizer cases are not measurable here.  tests/platform_image.py --capstone grades the
reference server's sanitizer cases in both platforms' reproduced containers."""

import json
import resource
import subprocess
import sys

import pytest

from labkit.instructor.sandbox import isolation

GIB = 1 << 30


@pytest.mark.parametrize("files, expected", [
    ({"memory.max": "805306368\n"}, 805306368),                        # v2, Gradescope's 768 MB
    ({"memory.max": "max\n"}, None),                                    # v2, no limit
    ({"memory/memory.limit_in_bytes": "2147483648\n"}, 2147483648),     # v1, in the container's folder
    ({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1's root: 2^63 less a page
    ({}, None),                                                         # a machine's root cgroup: no file
])
def test_a_containers_memory_limit_is_read_from_its_cgroup(tmp_path, monkeypatch, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(isolation, "CGROUP_ROOT", tmp_path)
    assert isolation.container_memory_max() == expected


# In a process of its own (the limits it lowers hold for it and all it starts), as a run's
# inside process lowers them; then what the battery would launch its ASan build with, and
# whether a reservation like ASan's shadow (64 GiB, reserved, never touched) can be made after
# raising the soft limit as that launch does.
LOWERED = r'''
import json, mmap, resource, sys
from labkit.instructor.sandbox.inside import lower_limits
from labkit.battery.refusals import room_for_asan
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
spec = json.loads(sys.argv[1])
lower_limits(spec)
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
room = room_for_asan()
reserved = False
try:
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    mmap.mmap(-1, 64 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0),
              prot=0).close()  # PROT_NONE, as ASan reserves its shadow
    reserved = True
except (OSError, ValueError):
    pass
print(json.dumps({"soft": soft, "hard": hard, "room": room, "reserved": reserved,
                  "adj": open("/proc/self/oom_score_adj").read().strip()}))
'''


def lowered(cgroup_holds_memory: bool) -> dict:
    spec = {"limits": {"memory_bytes": 4 * GIB, "processes": 4096, "open_files": 4096, "file_bytes": 256 << 20},
            "cpu_s": 60, "extra_processes": 64, "cgroup_holds_memory": cgroup_holds_memory}
    done = subprocess.run([sys.executable, "-c", LOWERED, json.dumps(spec)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_where_a_cgroup_bounds_the_run_an_asan_build_may_reserve_its_shadow():
    held = lowered(cgroup_holds_memory=True)
    assert held["soft"] == 4 * GIB and held["hard"] == -1  # RLIM_INFINITY
    assert held["adj"] == "1000"  # the first the kernel kills when the cgroup's memory runs out
    assert held["room"] == ["prlimit", "--as=unlimited:", "--"] and held["reserved"]


def test_where_nothing_bounds_the_run_its_address_space_limit_is_hard_and_the_battery_says_so():
    alone = lowered(cgroup_holds_memory=False)
    assert alone["soft"] == alone["hard"] == 4 * GIB
    assert isinstance(alone["room"], str) and alone["room"].startswith("not measurable here")
    assert "RLIMIT_AS" in alone["room"] and "4,096 MiB" in alone["room"]
    assert not alone["reserved"]


JUDGE = r'''
import resource
from labkit.instructor.grading.judge import begin
spec, out = begin()
out.write(open("/proc/self/oom_score_adj").read().strip() + " " + str(resource.getrlimit(resource.RLIMIT_AS)[1]))
'''


def test_the_judge_is_first_to_go_and_leaves_an_asan_build_room_under_a_grading_uid(tmp_path):
    """The judge (the checks' process, where the battery builds and runs the ASan server) makes
    itself not dumpable, after which its /proc files are root's and it could no longer set its
    oom_score_adj: it sets it first, so a container's memory limit holds it as it does a run."""
    results = tmp_path / "results"
    results.write_text("")
    results.chmod(0o666)
    spec = {"limits": {"memory_bytes": 4 * GIB, "processes": 4096, "open_files": 4096, "file_bytes": 256 << 20},
            "cpu_s": 60, "extra_processes": 64, "cgroup_holds_memory": True}
    with open(results, "w") as handle:
        spec["results_fd"] = handle.fileno()
        done = subprocess.run([sys.executable, "-c", JUDGE], input=json.dumps(spec), capture_output=True, text=True,
                              timeout=60, user=65534, group=65534, extra_groups=[], pass_fds=(handle.fileno(),),
                              cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert results.read_text() == f"1000 {resource.RLIM_INFINITY}"

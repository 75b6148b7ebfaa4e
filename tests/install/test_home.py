"""One install, many users (labkit.paths): a read-only copy of the lab, built once by root,
serves two unprivileged users at the same time.  Each one's results, pid files and builds
go to their own LABKIT_HOME (by default ~/.local/share/labkit), nothing is written into the
install, and their sweeps' CPUs are leased (cpu_leases): disjoint where the machine has
enough, or the rows say they were shared.  A user whose C joins the lab gets a copy of
csrc/ of their own, seeded with the install's objects: make compiles only what they change.

The users are two grading uids (uids.UidLease: no /etc/passwd entry needed), each with a
home folder of their own; they run the venv's Python with the install first on their path."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from labkit import system
from labkit.instructor.sandbox.uids import UidLease, kill_all

from readonly_install import read_only_install
from readonly_install import snapshot as _snapshot

pytestmark = pytest.mark.measuring  # two sweeps at once: their CPU leases are what is asserted

USER_LIMIT_S = 120


@pytest.fixture(scope="module")
def install():
    """A copy of the lab owned by root, built by root, that no one else may write to."""
    with read_only_install() as lab:
        yield lab


@pytest.fixture(scope="module")
def users(install):
    """Two unprivileged users, each with an empty home of their own."""
    lease = UidLease(2)
    homes = []
    for uid in lease.uids:
        home = install.parent / f"home-{uid}"
        home.mkdir()
        os.chown(home, uid, uid)
        homes.append((uid, home))
    yield homes
    for uid, _ in homes:
        kill_all(uid, "", None)
    lease.close()


def run_as(user, install: Path, code: str, python_path: Path | None = None, **env) -> dict:
    """`code` run by `user` with the install's labkit (or the one in `python_path`); what it
    printed last, as JSON."""
    uid, home = user
    environment = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": str(python_path or install),
                   "LANG": "C.UTF-8", **env}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=home, env=environment,
                          user=uid, group=uid, extra_groups=[], capture_output=True, text=True,
                          timeout=USER_LIMIT_S)
    assert done.returncode == 0, f"user {uid}: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


WHERE = """
    import json
    from labkit import doctor, paths
    check = doctor.find_home()
    print(json.dumps({"root": str(paths.ROOT), "home": str(paths.HOME), "shared": paths.SHARED,
                      "csrc": str(paths.CSRC), "build": str(paths.BUILD), "results": str(paths.RESULTS),
                      "run_dir": str(paths.RUN_DIR), "cffi": str(paths.CFFI_DIR),
                      "doctor": [check.status, check.detail, check.fix]}))
"""


def test_a_user_of_a_read_only_install_keeps_everything_in_their_own_home(install, users):
    where = run_as(users[0], install, WHERE)
    home = users[0][1] / ".local" / "share" / "labkit"
    assert where["root"] == str(install) and where["shared"] is True
    expected = {  # what lives where: the install's programs until the user has C of their own
        "home": home, "csrc": install / "csrc", "build": install / "build",
        "results": home / "data" / "results", "run_dir": home / "build" / "run", "cffi": home / "build" / "cffi",
    }
    for key, path in expected.items():
        assert where[key] == str(path), key
    status, detail, _ = where["doctor"]
    assert status == "ok" and "read-only for you" in detail and str(install) in detail


def test_labkit_root_names_the_lab(install, users):
    """pip install . puts the package alone into site-packages: LABKIT_ROOT says where the lab is."""
    site = install.parent / "site-packages"
    shutil.copytree(install / "labkit", site / "labkit")
    subprocess.run(["chmod", "-R", "go=rX", str(site)], check=True)
    where = run_as(users[0], install, WHERE, python_path=site, LABKIT_ROOT=str(install))
    assert where["root"] == str(install) and where["csrc"] == str(install / "csrc")
    lost = run_as(users[0], install, WHERE, python_path=site)  # without it: doctor says what to set
    assert lost["root"] == str(site) and lost["doctor"][0] == "fail" and "LABKIT_ROOT" in lost["doctor"][2]


def test_labkit_home_elsewhere(install, users):
    """Labkit home names another place and an unwritable one is a failure with its fix."""
    elsewhere = users[0][1] / "lab-state"
    assert run_as(users[0], install, WHERE, LABKIT_HOME=str(elsewhere))["home"] == str(elsewhere)
    status, detail, fix = run_as(users[0], install, WHERE, LABKIT_HOME="/proc/labkit")["doctor"]
    assert status == "fail" and "cannot write" in detail and "LABKIT_HOME" in fix


SWEEP = """
    import json, time
    from labkit import experiments, paths, store, sweep
    plan = experiments.resolve("echo_scale", "quick", models=["epoll", "threaded"], clients=[10, 20], repeats=1)
    started = time.time()
    df = sweep.run(plan)
    rows = [json.loads(line) for line in store.results_path("echo_scale").read_text().splitlines()]
    print(json.dumps({"started": started, "ended": time.time(), "results": str(store.results_path("echo_scale")),
                      "rows": [{key: row.get(key) for key in ("status", "error", "server_cpus", "client_cpus",
                                                               "cpus_shared", "cpu_quota", "pinning_note")}
                               for row in rows]}))
"""


def test_two_users_sweep_at_once_into_their_own_homes_on_leased_cpus(install, users):
    before = _snapshot(install)
    outcome = {}

    def sweep_as(user):
        outcome[user[0]] = run_as(user, install, SWEEP)

    threads = [threading.Thread(target=sweep_as, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcome) == sorted(uid for uid, _ in users), "a user's sweep did not finish (its error above)"

    for uid, home in users:
        done = outcome[uid]
        assert done["results"].startswith(str(home)), done["results"]
        assert [row["status"] for row in done["rows"]] == ["ok"] * 4, [row["error"] for row in done["rows"]]
    assert _snapshot(install) == before, "a user wrote into the install"

    a, b = (outcome[uid] for uid, _ in users)
    cpus = {uid: {cpu for row in outcome[uid]["rows"] for cpu in row["server_cpus"] + row["client_cpus"]}
            for uid, _ in users}
    shared = [row for done in (a, b) for row in done["rows"] if row["cpus_shared"]]
    at_once = a["started"] < b["ended"] and b["started"] < a["ended"]
    print(f"\nCPUs: {cpus}; rows that shared: {len(shared)}; at the same time: {at_once}; "
          f"notes: {sorted({row['pinning_note'] for row in shared})}")
    if at_once and len(system.usable_cpus()) >= 4:
        assert not set.intersection(*cpus.values()) and not shared
    elif at_once:  # 2 or 3 CPUs: the second sweep shares, and says so in its rows
        assert shared and all("also leased by" in row["pinning_note"] for row in shared)


OWN_SOURCES = """
    import json, os
    from labkit import build, paths
    own = paths.own_sources()
    bin_dir = build.build()
    programs = {p.name: p.stat().st_mtime_ns for p in bin_dir.iterdir()}
    source = own / "servers" / "epoll.c"
    source.write_text(source.read_text() + "\\n/* the user's edit */\\n")
    build.build()
    changed = sorted(p.name for p in bin_dir.iterdir() if p.stat().st_mtime_ns != programs.get(p.name))
    print(json.dumps({"csrc": str(paths.CSRC), "bin": str(bin_dir), "changed": changed}))
"""


def test_users_c_is_a_copy_in_home(install, users):
    """A users own c is a copy in their home and only their change compiles."""
    before = _snapshot(install)
    done = run_as(users[1], install, OWN_SOURCES)
    home = users[1][1] / ".local" / "share" / "labkit"
    assert done["csrc"] == str(home / "csrc") and done["bin"] == str(home / "build" / "bin")
    assert done["changed"] == ["epoll"], "the seeded objects were not reused: make rebuilt more than the edit"
    assert _snapshot(install) == before, "a user wrote into the install"
    # a later process of the same user finds their copy by itself; the other user still runs the install's
    assert run_as(users[1], install, WHERE)["csrc"] == str(home / "csrc")
    assert run_as(users[0], install, WHERE)["csrc"] == str(install / "csrc")

"""system.py: CPUs, open-file limit, machine facts, environment()."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from labkit import paths, system
from labkit.errors import LabError


def test_usable_cpus_is_the_sorted_affinity():
    assert system.usable_cpus() == sorted(os.sched_getaffinity(0))


def test_check_cpus_accepts_usable_ones():
    first = system.usable_cpus()[0]
    assert system.check_cpus([first]) == [first]
    assert system.check_cpus((str(first),)) == [first]


def test_check_cpus_names_the_usable_cpus_when_one_does_not_exist():
    usable = system.usable_cpus()
    missing = max(usable) + 1000
    with pytest.raises(LabError) as caught:
        system.check_cpus([usable[0], missing])
    assert str(missing) in caught.value.what
    assert str(usable) in caught.value.fix


@pytest.mark.parametrize("bad", [["zero"], [], None])
def test_check_cpus_rejects_nonsense(bad):
    with pytest.raises(LabError):
        system.check_cpus(bad)


def test_default_pinning_on_two_or_more_cpus(monkeypatch):
    monkeypatch.setattr(system, "usable_cpus", lambda: [2, 5, 7])
    assert system.default_pinning() == ([2], [5], "")


def test_default_pinning_on_one_cpu_says_results_mix(monkeypatch):
    monkeypatch.setattr(system, "usable_cpus", lambda: [3])
    server, client, note = system.default_pinning()
    assert server == client == [3]
    assert note.startswith("only one CPU") and "mix" in note


def test_default_pinning_here_is_disjoint_when_possible():
    server, client, note = system.default_pinning()
    if len(system.usable_cpus()) >= 2:
        assert not set(server) & set(client) and note == ""


def test_raise_nofile_raises_toward_hard_and_never_lowers():
    # In a child process, so the test run keeps its own limit.
    code = (
        "import resource; from labkit import system\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "a = system.raise_nofile(300)\n"
        "b = system.raise_nofile(10)\n"
        "c = system.raise_nofile(10**9)\n"
        "print(a, b, c, hard, system.nofile_limit()[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=paths.ROOT)
    a, b, c, hard, final = map(int, done.stdout.split())
    assert a == 300 and b == 300
    assert c == (10**9 if hard == -1 else min(10**9, hard)) == final


def test_machine_facts():
    assert system.kernel() == os.uname().release
    assert system.cpu_model()
    if shutil.which("gcc"):
        assert system.compiler().startswith("gcc")


def test_git_commit_of_this_checkout():
    system.git_commit.cache_clear()
    commit = system.git_commit()
    if shutil.which("git") and (paths.ROOT / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{4,40}(\+dirty)?", commit)


def test_git_commit_outside_a_checkout_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    system.git_commit.cache_clear()
    try:
        assert system.git_commit() is None
    finally:
        system.git_commit.cache_clear()


REQUIRED = {"kernel", "cpu_model", "cores", "usable_cpus", "labkit_version", "labkit_commit", "python",
            "hostname", "perf_version", "perf_paranoid", "perf_events_counted",
            "perf_events_unsupported", "counters_source", "nofile_soft", "timestamp"}


def test_environment_is_flat_json_with_the_required_keys():
    env = system.environment()
    assert REQUIRED <= set(env)
    again = json.loads(json.dumps(env))
    assert again == env
    assert all(not isinstance(v, dict) for v in env.values())  # flat
    assert env["cores"] == os.cpu_count()
    assert env["counters_source"] in ("perf", "proc")
    assert set(env["perf_events_counted"]).isdisjoint(env["perf_events_unsupported"])
    assert env["timestamp"].endswith("+00:00")


def test_environment_says_proc_when_perf_is_switched_off(monkeypatch):
    monkeypatch.setenv("LABKIT_NO_PERF", "1")
    try:
        env = system.environment(refresh=True)
        assert env["counters_source"] == "proc" and env["perf_events_counted"] == []
    finally:
        monkeypatch.delenv("LABKIT_NO_PERF")
        system.environment(refresh=True)

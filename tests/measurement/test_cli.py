"""`python -m labkit ...`: exit codes, messages without tracebacks, a real small sweep."""

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import paths

pytestmark = pytest.mark.timeout(240)

SYSTEM_PYTHON = "/usr/bin/python3"


def labkit(*args, python=sys.executable, env=None, timeout=180):
    return subprocess.run([python, "-m", "labkit", *args], cwd=paths.ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(paths.ROOT), **(env or {})})


@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="no system python3")
def test_build_works_with_the_system_python():
    # No venv: pandas, psutil, plotly are not importable there.
    clean_env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run([SYSTEM_PYTHON, "-m", "labkit", "build"], cwd=paths.ROOT, capture_output=True,
                          text=True, timeout=300, env={**clean_env, "PYTHONPATH": str(paths.ROOT)})
    assert done.returncode == 0, done.stderr
    assert "loadgen" in done.stdout


def test_help_lists_the_commands():
    done = labkit("--help")
    assert done.returncode == 0
    for command in ("doctor", "build", "sweep"):
        assert command in done.stdout


@pytest.mark.parametrize("args, says", [
    (["--models", "nosuch"], "unknown server model 'nosuch'"),
    (["--clients", "0"], "client count 0 is below 1"),
    (["--server-cpus", "4096"], "CPU 4096 is not usable"),
    (["--repeats", "0"], "repeats must be at least 1"),
    (["--profile", "huge"], "unknown profile 'huge'"),
    (["--until", "lat_p99_us"], "is not METRIC:PERCENT"),
    (["--until", "lat_p99_us:ten"], "is not METRIC:PERCENT"),
    (["--until", "nosuch:10"], "proc_top does not draw nosuch"),
    (["--until", "lat_p99_us:10", "--most", "3"], "can never give a 95% interval"),
])
def test_user_errors_exit_2_with_the_fix_and_no_traceback(args, says, tmp_path):
    done = labkit("sweep", "proc_top", "--results", str(tmp_path / "r.jsonl"), *args)
    assert done.returncode == 2
    assert says in done.stderr and "  -> " in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_unknown_experiment_exits_2():
    done = labkit("sweep", "no_such_experiment")
    assert done.returncode == 2 and "unknown experiment" in done.stderr and "proc_top" in done.stderr


def test_bad_usage_exits_2_with_argparses_message():
    done = labkit("sweep", "proc_top", "--clients", "many")
    assert done.returncode == 2 and "invalid int value" in done.stderr


@pytest.mark.parametrize("no_perf", ["0", "1"])
def test_a_small_sweep_prints_a_median_table_and_resumes(tmp_path, no_perf):
    results = tmp_path / "proc_top.jsonl"
    args = ["sweep", "proc_top", "--profile", "quick", "--models", "iterative", "select",
            "--clients", "3", "--repeats", "1", "--results", str(results)]
    done = labkit(*args, env={"LABKIT_NO_PERF": no_perf})
    assert done.returncode == 0, done.stderr
    assert "median of the repeats" in done.stdout
    assert "iterative" in done.stdout and "select" in done.stdout
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [row["model"] for row in rows] == ["iterative", "select"]
    assert {row["status"] for row in rows} == {"ok"}
    expected_source = "server:proc client:rusage" if no_perf == "1" else None
    if expected_source:
        assert {row["counters_source"] for row in rows} == {expected_source}

    assert not re.search(r"\d\.\d+e[+-]\d", done.stdout), done.stdout  # 20,160 and 0.008, never 2.016e+04

    again = labkit(*args, env={"LABKIT_NO_PERF": no_perf})
    assert again.returncode == 0
    assert len(results.read_text().splitlines()) == 2  # resumed: nothing measured twice
    assert f"2 of 2 point(s) were already measured in {results} and were reused" in again.stderr

    fresh = labkit(*args, "--no-resume", env={"LABKIT_NO_PERF": no_perf})
    assert fresh.returncode == 0
    assert len(results.read_text().splitlines()) == 4


def test_sweep_writes_where_labkit_results_says_as_the_notebooks_do(tmp_path):
    results = tmp_path / "from-env.jsonl"
    done = labkit("sweep", "proc_top", "--profile", "quick", "--models", "select", "--clients", "2",
                  "--repeats", "1", env={"LABKIT_RESULTS": str(results), "LABKIT_NO_PERF": "1"})
    assert done.returncode == 0, done.stderr
    assert len(results.read_text().splitlines()) == 1 and f"1 rows in {results}" in done.stdout


def test_numbers_are_printed_readably():
    from labkit.plots import readable

    assert [readable(v) for v in (20160.0, 2016.4, 12.345, 0.008259, 0.0000123, 0.0, 3.0, float("nan"),
                                  float("inf"), -float("inf"))] == \
        ["20,160", "2,016", "12.3", "0.00826", "1.23e-05", "0", "3", "—", "∞", "−∞"]


def test_doctor_exit_code_follows_its_checks():
    from labkit import doctor

    failing = any(check.status == doctor.FAIL for check in doctor.findings())
    done = labkit("doctor")
    assert done.returncode == (1 if failing else 0), done.stderr
    assert "labkit doctor" in done.stdout and "Traceback" not in done.stderr


def test_doctor_clean_removes_a_crashed_kernels_leftovers():
    # A real crash: a kernel started a server and was killed with -9 before it
    # could remove the pid file (its server died by the death signal).
    kernel = subprocess.Popen(
        [sys.executable, "-c", "from labkit import procs; import time\n"
         "s = procs.start_server('iterative'); print(s.pid, flush=True); time.sleep(60)"],
        cwd=paths.ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(paths.ROOT)})
    server_pid = int(kernel.stdout.readline())
    kernel.kill()
    kernel.wait()
    pid_file = paths.RUN_DIR / f"{server_pid}.json"
    assert pid_file.exists()
    import psutil

    psutil.wait_procs([p for p in psutil.process_iter() if p.pid == server_pid], timeout=2)
    done = labkit("doctor", "--clean")
    assert done.returncode == 0, done.stderr
    assert not pid_file.exists()
    assert pid_file.name in done.stdout

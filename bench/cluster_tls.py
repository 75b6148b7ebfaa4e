"""What mutual TLS and the gate cost a graded class: the same four notebooks graded through
a plaintext Dask cluster (as the lab graded before its certificates) and through the lab's
TLS cluster (labkit scheduler, labkit worker, the gate), rounds interleaved, in one run.

    sudo .venv/bin/python bench/cluster_tls.py [--rounds 3]

Both clusters run on this machine with two workers each; the class is the tests' tiny
one (tests/instructor/test_grade_dask.py: correct, wrong, hanging until TIMEOUT_S, a fork
bomb), so the time is the cluster's and the sandbox's, not a notebook's sweep.  Prints each
round and the medians.  The plaintext cluster exists only inside this script: labkit refuses
tcp://.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tests' helpers
sys.path.insert(0, str(ROOT / "tests" / "instructor"))  # test_grade_dask's room

from labkit.instructor.cluster import certs, tasks as cluster  # noqa: E402
from labkit.instructor.course import class_grades  # noqa: E402  after the path to tests/
from test_grade_dask import NOTEBOOK, TIMEOUT_S, Cluster, make_course  # noqa: E402


class Plaintext:
    """`dask scheduler` and two `dask worker` over tcp://, without the gate: the lab's cluster before."""

    def __init__(self, folder: Path):
        dask = str(Path(sys.executable).with_name("dask"))
        env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1")
        self.processes = [subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
             str(folder / "plain.json")], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)]
        while not (folder / "plain.json").exists():
            time.sleep(0.1)
        self.address = json.loads((folder / "plain.json").read_text())["address"]
        for name in ("p0", "p1"):
            self.processes.append(subprocess.Popen(
                [dask, "worker", self.address, "--nthreads", "1", "--no-nanny", "--resources", "grading=1",
                 "--no-dashboard", "--name", name], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        import distributed

        with distributed.Client(self.address) as client:
            client.wait_for_workers(2, timeout=60)

    def stop(self):
        for process in self.processes:
            os.killpg(process.pid, 9)
            process.wait()


def grade_plaintext(course: Path, out: Path, address: str) -> float:
    """labkit's grading, with only the connection swapped for a plaintext one."""
    import distributed

    saved = cluster.connect, certs.require_tls, certs.load
    cluster.connect = lambda address, certs=None: distributed.Client(address, timeout="15s")
    certs.require_tls = certs.load = lambda *args, **kwargs: None
    try:
        return timed(course, out, address, None)
    finally:
        cluster.connect, certs.require_tls, certs.load = saved


def timed(course: Path, out: Path, address: str, course_certs) -> float:
    started = time.monotonic()
    class_grades.grade(course / "class", out, notebooks=[NOTEBOOK], instructor_dir=course / "instructor",
                       timeout_s=TIMEOUT_S, profile=None, progress=False, scheduler=address, certs=course_certs)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        course = make_course(tmp / "course")
        course_certs = certs.init(tmp / "certs")
        plain, secure = Plaintext(tmp), Cluster(tmp / "tls", workers=2, certs=course_certs)
        times = {"plaintext": [], "TLS + gate": []}
        try:
            for round_ in range(args.rounds):
                times["plaintext"].append(grade_plaintext(course, tmp / f"plain{round_}", plain.address))
                times["TLS + gate"].append(timed(course, tmp / f"tls{round_}", secure.address, course_certs))
                print(f"round {round_ + 1}: plaintext {times['plaintext'][-1]:.1f} s, "
                      f"TLS + gate {times['TLS + gate'][-1]:.1f} s", flush=True)
        finally:
            plain.stop()
            secure.stop()
        medians = {name: statistics.median(values) for name, values in times.items()}
        print(f"4 notebooks on 2 workers, median of {args.rounds}: plaintext {medians['plaintext']:.1f} s, "
              f"TLS + gate {medians['TLS + gate']:.1f} s (ratio {medians['TLS + gate'] / medians['plaintext']:.2f})")


if __name__ == "__main__":
    main()

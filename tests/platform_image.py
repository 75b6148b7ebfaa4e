"""Run apart from make test (it downloads Debian and the lab's Python packages, minutes):
each platform's image built as the platform builds it, from a fresh Debian 12 root, and a
grading through its entry point there.

    .venv/bin/python tests/platform_image.py gradescope|prairielearn [--keep DIR] [--capstone] [--this-root]

As root, with mmdebstrap and the network.  A fresh root (mmdebstrap --variant=apt bookworm)
stands for the platform's base image; the real package (`labkit autograder ...`) is put
where the platform puts it; the build runs as the platform's does, in a container with
Docker's default capabilities and the network (Gradescope: its setup.sh as root;
PrairieLearn: the Dockerfile's RUN line); then the instructor's notebook 01 (solved) and the
students' edition's are graded through the entry point in the platform's container
(tests/platform_container.py: memory, CPU, pids, network, time as the platform sets them).
Prints the time of each step and each check's points; exit status 0 when the solutions got
every machine point and the edition what `labkit grade` gives it (none).  On PrairieLearn the
image is the students' edition and the instructor's side is the package's serverFilesCourse
folder, copied into each grading job as PrairieLearn copies it.

--capstone grades notebook 07 instead (apart from make test: at the platforms' CPU it takes
minutes): the solved notebook with the reference server (csrc/servers/mine.c) and the earlier
notebooks' C exercises solved, as a student hands them in, on the package's whole leaderboard
ladder; exit status 0 when it gets every machine point (every battery check among them) and,
on Gradescope, a leaderboard entry.  --this-root: this machine's root stands for the base image
(as in tests/test_platforms.py: no download, only the package's `make build` in the image)."""

import copy
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).parent))
import nbformat
import platform_container as pc
from capstone_servers import reference
from test_platforms import NOTEBOOK, solved

from labkit import capstone, paths
from labkit.stubs.catalog import C_EXERCISES
from labkit.instructor.grading.check_cells import check_catalog
from labkit.instructor.release import edition as release

CAPSTONE = "07_your_server"
BUILD = {"gradescope": "cd /autograder/source && bash ./setup.sh",
         "prairielearn": "cd /lab && bash scripts/setup-system.sh && rm -rf /var/lib/apt/lists/* "
                         "&& make setup build && chmod 0755 /lab/run-grader"}


def main() -> int:
    name = sys.argv[1]
    keep = Path(sys.argv[sys.argv.index("--keep") + 1]) if "--keep" in sys.argv else None
    notebook = CAPSTONE if "--capstone" in sys.argv else NOTEBOOK
    here = "--this-root" in sys.argv
    platform = pc.PLATFORMS[name]
    work = keep or Path(tempfile.mkdtemp(prefix="labkit-platform-image-"))
    root = work / "root"
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if here:
        root.mkdir(exist_ok=True)
    elif not (root / "usr").is_dir():
        subprocess.run(["mmdebstrap", "--variant=apt", "--include=ca-certificates", "bookworm", str(root)], check=True)
    if not here:
        shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
        # This machine's way out (a proxy with a certificate authority of its own), where it has one:
        # the platform's build reaches the registries directly; the image gets nothing else of it.
        local = Path("/usr/local/share/ca-certificates")
        for cert in sorted(local.glob("*.crt")) if local.is_dir() else []:
            (root / str(local).lstrip("/")).mkdir(parents=True, exist_ok=True)
            shutil.copy(cert, root / str(cert).lstrip("/"))
        bundle = Path("/etc/ssl/certs/ca-certificates.crt")
        if bundle.is_file():
            shutil.copy(bundle, root / str(bundle).lstrip("/"))
    print(f"base root: {time.monotonic() - started:.0f} s", flush=True)
    package = work / ("autograder.zip" if name == "gradescope" else "prairielearn-grader")
    shutil.rmtree(package, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "labkit", "autograder", name, "--out", str(package), "--notebooks", notebook],
                   cwd=paths.ROOT, check=True)
    course = package / "serverFilesCourse" if name == "prairielearn" else None
    base = Path("/") if here else root
    for top in ("autograder", "lab"):
        shutil.rmtree(root / top, ignore_errors=True)
    pc.unpack(platform, package, root)
    builder = pc.Platform(**{**platform.__dict__, "memory_bytes": 8192 * pc.MIB, "cpus": 2.0, "pids": None,
                             "network": True})
    started = time.monotonic()
    command = f"cd /{platform.lab} && make build" if here else BUILD[name]
    built = pc.run(builder, root, command=command, kill_s=3600, writable_image=True, base=base)
    print(f"the image's build ({command}): status {built.returncode}, {built.elapsed_s:.0f} s", flush=True)
    if built.returncode != 0:
        print(built.output[-5000:])
        return 1
    teacher, answers = solved(notebook)
    edition, _ = release.release_notebook(copy.deepcopy(teacher), notebook)
    machine = [spec for spec in check_catalog(teacher) if not spec.by_hand]
    ok = True
    for who, handed in (("solutions", answers), ("edition", edition))[:1 if notebook == CAPSTONE else 2]:
        upload = {f"my-lab/{notebook}.ipynb": nbformat.writes(handed).encode()}
        if notebook == CAPSTONE:  # a student's whole hand-in: the server, the earlier notebooks' C exercises
            upload[f"my-lab/csrc/{capstone.SOURCE}"] = reference().encode()
            for earlier in sorted({exercise.notebook for exercise in C_EXERCISES}):
                upload[f"my-lab/{earlier}.ipynb"] = nbformat.writes(solved(earlier)[1]).encode()
        graded = pc.run(platform, root, submission=upload, base=base, course=course)
        results = graded.results or {}
        key = "score" if name == "gradescope" else "points"
        got = sum(test[key] for test in results.get("tests", []))
        print(f"{who}: graded in {graded.elapsed_s:.0f} s (status {graded.returncode}, killed {graded.killed}, "
              f"OOM kills {graded.oom_kills}, results.json {graded.results_bytes} bytes): {got:g} of "
              f"{sum(spec.max_points for spec in machine):g} machine points", flush=True)
        print(json.dumps(results, indent=1)[:3000] if results else graded.output[-3000:])
        wanted = sum(spec.max_points for spec in machine) if who == "solutions" else 0
        ok = ok and bool(results) and got == wanted and not graded.killed
        if notebook == CAPSTONE and name == "gradescope":
            print(next((line for line in results.get("output", "").splitlines() if line.startswith("leaderboard")),
                       "no leaderboard line"), results.get("leaderboard"))
            ok = ok and bool(results.get("leaderboard"))
    if keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

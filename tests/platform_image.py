"""Run apart from make test (it downloads Debian and the lab's Python packages, minutes):
each platform's image built as the platform builds it, from a fresh Debian 12 root, and a
grading through its entry point there.

    .venv/bin/python tests/platform_image.py gradescope|prairielearn [--keep DIR] [--capstone | --hang] [--this-root]

As root, with mmdebstrap and the network.  A fresh root (mmdebstrap --variant=apt bookworm)
stands for the platform's base image; the real package (`labkit autograder ...`) is put
where the platform puts it; the build runs as the platform's does, in a container with
Docker's default capabilities and the network (Gradescope: its setup.sh as root;
PrairieLearn: the Dockerfile's RUN line); then the instructor's notebook 01 (solved) and the
students' edition's are graded through the entry point in the platform's container
(tests/platform_container.py: memory, CPU, pids, network, time as the platform sets them).
Prints the time of each step, the results and every check short of its points; exit status 0
when the solutions got every point of the checks measurable there (a check the container
cannot measure is 0 of 0, "not measurable here") and the edition what `labkit grade` gives it
(none).  On PrairieLearn the
image is the students' edition and the instructor's side is the package's serverFilesCourse
folder, copied into each grading job as PrairieLearn copies it.

--capstone grades notebook 07 instead (apart from make test: at the platforms' CPU it takes
minutes): the solved notebook with the reference server (csrc/servers/mine.c) and the earlier
notebooks' C exercises solved, as a student hands them in, on the package's whole leaderboard
ladder; exit status 0 when it gets every point of the checks measurable there (every battery
check among them but those the container cannot measure, listed) and, on Gradescope, a
leaderboard entry.  --hang: notebook 01 that sleeps for ever from its first cell, then the
solved 00, each notebook given HANG_NOTEBOOK_S (the package's --timeout); on Gradescope its
limits scaled down too (a HANG_PLATFORM_S grading, the package's --platform-timeout, and the
container killed then), on PrairieLearn its own 600 s job (the package's, which it cannot
change); exit status 0 when the results are written before the kill, every check of 01 is 0
saying it ran over its time, and every check of 00 ran (what 00's perf checks give depends on
the machine's counters).  --this-root: this machine's root stands for the base image
(as in tests/instructor/test_platforms.py: no download, only the package's `make build` in the image)."""

import copy
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "instructor"))  # test_platforms's room
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
# Gradescope's 300 s a notebook and 10-minute grading scaled down: the hang costs a notebook's time
HANG_NOTEBOOK_S, HANG_PLATFORM_S = 20, 160
REST = "00_setup"


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
    hang = "--hang" in sys.argv
    chosen = [NOTEBOOK, REST, "--timeout", str(HANG_NOTEBOOK_S)] if hang else [notebook]
    if hang and name == "gradescope":
        chosen += ["--platform-timeout", str(HANG_PLATFORM_S)]
    subprocess.run([sys.executable, "-m", "labkit", "autograder", name, "--out", str(package), "--notebooks", *chosen],
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
    if hang:
        ok = hang_case(platform, root, base, course)
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
        return 0 if ok else 1
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
        # every check short of its catalog's points, with why; a check this container cannot
        # measure is 0 of 0, named so (autograder/platforms.py): not failed, not wanted
        most = {spec.name: spec.max_points for spec in machine}
        unmeasurable = set()
        for test in results.get("tests", []):
            check = test["name"].split(": ", 1)[-1].split(" (")[0]
            if test[key] < most.get(check, 0):
                print(f"  {test['name']}: {test[key]:g} of {most[check]:g} -- {test.get('output', '')[:600]}")
            if "(not measurable" in test["name"]:
                unmeasurable.add(check)
        wanted = sum(most[c] for c in most if c not in unmeasurable) if who == "solutions" else 0
        if who == "solutions":
            print(f"solutions: {got:g} of the {wanted:g} points of the checks measurable here "
                  f"(not measurable: {', '.join(sorted(unmeasurable)) or 'none'})")
        ok = ok and bool(results) and got == wanted and not graded.killed
        if notebook == CAPSTONE and name == "gradescope":
            print(next((line for line in results.get("output", "").splitlines() if line.startswith("leaderboard")),
                       "no leaderboard line"), results.get("leaderboard"))
            ok = ok and bool(results.get("leaderboard"))
    if keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def hang_case(platform: pc.Platform, root: Path, base: Path, course: Path | None) -> bool:
    """--hang: 01 hung from its first cell, then the solved 00, graded on the platform's image
    (Gradescope's time scaled down to HANG_PLATFORM_S; PrairieLearn's its own)."""
    _, hung = solved(NOTEBOOK)
    first = next(i for i, cell in enumerate(hung.cells) if cell.cell_type == "code")
    hung.cells.insert(first, nbformat.v4.new_code_cell("import time\ntime.sleep(100000)\n"))
    teacher, rest = solved(REST)
    if platform.name == "gradescope":
        platform = pc.Platform(**{**platform.__dict__, "kill_s": float(HANG_PLATFORM_S)})
    handed = {f"my-lab/{NOTEBOOK}.ipynb": nbformat.writes(hung).encode(),
              f"my-lab/{REST}.ipynb": nbformat.writes(rest).encode()}
    graded = pc.run(platform, root, base=base, course=course, submission=handed)
    results = graded.results or {}
    tests = results.get("tests", [])
    key = "score" if platform.name == "gradescope" else "points"
    print(f"hang: graded in {graded.elapsed_s:.0f} s of the grading's {platform.kill_s:g} s (status "
          f"{graded.returncode}, killed {graded.killed}, results.json {graded.results_bytes} bytes)")
    for test in tests:
        print(f"  {test['name']}: {test[key]:g} of {test['max_' + key]:g} -- {test.get('output', '')[:160]}")
    if not tests:
        print(graded.output[-3000:])
    hung_tests = [t for t in tests if t["name"].startswith(f"{NOTEBOOK}: ")]
    rest_tests = [t for t in tests if t["name"].startswith(f"{REST}: ")]
    machine = [spec for spec in check_catalog(teacher) if not spec.by_hand]
    return (not graded.killed and graded.elapsed_s < platform.kill_s and bool(hung_tests)
            and all(t[key] == 0 and (re.search(r"ran over the [\d.]+ s time limit", t.get("output", ""))
                                     or ": hidden check " in t["name"])  # PrairieLearn's: withheld
                    for t in hung_tests)
            and len(rest_tests) == len(machine)
            and not any(re.search(r"did not run|not run:", t.get("output", "")) for t in rest_tests)
            and f"{REST}: the notebook ran to its end" in results.get("output", ""))


if __name__ == "__main__":
    sys.exit(main())

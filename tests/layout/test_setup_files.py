"""The set-up files say the same thing: what labkit needs (ranges, pyproject.toml), one
lock (requirements.txt) that meets them, one kernel name, the two commands, and a CI
that runs them."""

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from labkit import paths

ROOT = paths.ROOT
LOCK = ROOT / "requirements.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$")


def parse_lock(lines, where="requirements.txt") -> dict[str, str]:
    """name -> version of a lock: every line `name==version` (comments aside)."""
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        assert match, f"{where}: {line!r} is not an exact `name==version` pin"
        pins[canonicalize_name(match[1])] = match[2]
    return pins


def declared(extras=("grading", "test")) -> list[Requirement]:
    """labkit's own requirements in pyproject.toml: its dependencies and `extras`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]
    return [Requirement(line) for line in lines]


def needed(roots: list[Requirement]) -> set[str]:
    """Every package `roots` bring, transitive ones included, as the installed packages'
    own metadata says (markers evaluated here, with the extras each was asked for), but
    for what the lock leaves out (left_out) and what only they would bring."""
    seen, todo, leave = set(), list(roots), left_out()
    while todo:
        requirement = todo.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen or key[0] in leave:
            continue
        seen.add(key)
        for line in importlib.metadata.distribution(requirement.name).requires or []:
            child = Requirement(line)
            asked = [{"extra": extra} for extra in requirement.extras] + [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(env) for env in asked):
                todo.append(child)
    return {name for name, _ in seen}


def left_out() -> dict[str, str]:
    """The packages the lock leaves out on purpose, and why (scripts/lock-leaves-out.txt)."""
    lines = (ROOT / "scripts" / "lock-leaves-out.txt").read_text().splitlines()
    return {canonicalize_name(line.split()[0]): line.split(None, 1)[1] for line in lines
            if line.strip() and not line.lstrip().startswith("#")}


def test_the_lock_holds_exactly_what_labkit_and_its_extras_bring():
    """Complete (nothing installed that it does not pin) and nothing more, but for what it
    leaves out on purpose (left_out); the venv is the lock (make setup installed it), so the
    installed metadata is the lock's."""
    lock = parse_lock(LOCK.read_text().splitlines())
    brought = needed(declared()) | {"setuptools"}  # setuptools: cffi builds with it (declared too)
    assert sorted(brought - lock.keys()) == [], "not in the lock: run make lock"
    assert sorted(lock.keys() - brought) == [], "in the lock, but nothing needs it: run make lock"
    installed = {name: importlib.metadata.version(name) for name in lock}
    assert {n: v for n, v in installed.items() if v != lock[n]} == {}, "the venv is not the lock: make setup"


def test_labkit_declares_ranges_that_the_lock_satisfies():
    lock = parse_lock(LOCK.read_text().splitlines())
    for requirement in declared():
        assert requirement.specifier, f"{requirement}: say which versions labkit works with"
        assert not any(spec.operator in ("==", "===") for spec in requirement.specifier), \
            f"{requirement}: an exact pin belongs in the lock, not in what labkit needs"
        name = canonicalize_name(requirement.name)
        assert name in lock and requirement.specifier.contains(lock[name]), (str(requirement), lock.get(name))


@pytest.mark.parametrize("version, admitted", [("4.0.0", True), ("4.3.8", True), ("4.6.6", True),
                                               ("5.0.0", False), ("3.6.8", False)])
def test_a_hubs_own_jupyterlab_4_is_kept(version, admitted):
    """labkit installed into a hub's image must not replace the hub's JupyterLab 4.x."""
    jupyterlab = next(r for r in declared(()) if canonicalize_name(r.name) == "jupyterlab")
    assert jupyterlab.specifier.contains(version) == admitted


def test_the_grading_cluster_is_an_extra_not_every_students():
    base = {canonicalize_name(r.name) for r in declared(())}
    grading = {canonicalize_name(r.name) for r in declared(("grading",))} - base
    assert {"dask", "distributed", "cryptography"} <= grading
    assert not {"dask", "distributed", "cryptography"} & base


def test_lock_leaves_out_unused():
    """Each package left out says why, is in no lock line, is not installed (make setup would
    not bring it), and importing nbformat does not reach for it."""
    lock = parse_lock(LOCK.read_text().splitlines())
    assert left_out() and all(why.strip() for why in left_out().values())
    assert left_out().keys() & lock.keys() == set()
    for name in left_out():
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version(name)
    done = subprocess.run([sys.executable, "-c", "import sys, nbformat, jsonschema; "
                           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rfc3987_syntax', 'lark')))"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_lock_check_catches_a_missing_and_a_stray_package():
    lock = parse_lock(LOCK.read_text().splitlines())
    brought = needed(declared()) | {"setuptools"}
    assert lock.keys() == brought
    tampered = dict(lock)
    del tampered["tornado"]                      # a transitive package left out
    tampered["requests-toolbelt"] = "1.0.0"      # one nothing needs
    assert brought - tampered.keys() == {"tornado"} and tampered.keys() - brought == {"requests-toolbelt"}


def test_a_loose_pin_in_the_lock_is_refused():
    with pytest.raises(AssertionError, match="exact"):
        parse_lock(["pandas>=3"])


def test_conda_installs_the_lock_and_labkit():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [dep["pip"] for dep in env["dependencies"] if isinstance(dep, dict)]
    assert pip_sections == [["-r requirements.txt", "-e ."]]
    python = next(dep for dep in env["dependencies"] if isinstance(dep, str) and dep.startswith("python="))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert Requirement(f"python{project['requires-python']}").specifier.contains(python.split("=")[1] + ".0")


def test_pyproject_names_the_command_and_the_tests():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["labkit"] == "labkit.cli:main"
    assert project["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]


def _notebooks():
    return sorted(paths.NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("notebook", _notebooks(), ids=lambda p: p.name)
def test_notebook_uses_the_labkit_kernel(notebook):
    kernelspec = nbformat.read(notebook, as_version=4).metadata.get("kernelspec", {})
    assert kernelspec.get("name") == "labkit", f"{notebook.name}: kernelspec {kernelspec}"


def test_the_hub_tests_proxy_is_pinned_and_make_test_installs_it():
    """npm's share of the lock: tests/install/test_hub.py's configurable-http-proxy at an exact version in
    tests/hub/package.json, which package-lock.json (what npm ci installs) records; make test
    installs it (Makefile: HUB_PROXY)."""
    hub = ROOT / "tests" / "hub"
    wanted = json.loads((hub / "package.json").read_text())["dependencies"]
    locked = json.loads((hub / "package-lock.json").read_text())["packages"]
    assert locked[""]["dependencies"] == wanted, "run npm install --package-lock-only in tests/hub"
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: pin an exact version, not {version!r}"
        assert locked[f"node_modules/{name}"]["version"] == version
    makefile = (ROOT / "Makefile").read_text()
    assert "$(HUB_PROXY)" in makefile.split("\ntest:", 1)[1].splitlines()[0]


def test_readme_names_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme


def test_ci_runs_make_test_and_stops_on_errors():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci
    assert re.search(r"^[^#\n]*\bmake test\b", ci, re.M), ".ci/run must call `make test`"
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_make_help_lists_every_target():
    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    for target in ["lab", "test", "setup", "build", "clean"]:
        assert f"make {target} " in out


# scripts/setup-system.sh: run for real, as an unprivileged user, so it only reports.

def _as_user(command):
    """Run without root, as a student would (root drops to `nobody`)."""
    prefix = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    return prefix + command


def _readable_copy(os_release_text):
    """The script and an os-release file in a folder `nobody` can read (the
    checkout or pytest's tmp_path may be private to root)."""
    folder = Path(tempfile.mkdtemp())
    folder.chmod(0o755)
    for name, text in [("setup-system.sh", (ROOT / "scripts" / "setup-system.sh").read_text()),
                       ("os-release", os_release_text)]:
        (folder / name).write_text(text)
        (folder / name).chmod(0o644)
    return folder


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian/Ubuntu machine")
def test_setup_system_names_ubuntus_perf_packages_and_the_sudo_command():
    # This is a Debian machine, so Ubuntu's linux-tools packages are surely missing.
    folder = _readable_copy('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\n')
    try:
        result = subprocess.run(_as_user(["bash", "setup-system.sh"]), cwd=folder,
                                env={**os.environ, "OS_RELEASE_FILE": str(folder / "os-release")},
                                capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(folder)
    assert result.returncode == 0, result.stderr
    assert "sudo apt-get install -y --no-install-recommends" in result.stdout
    assert "linux-tools-common" in result.stdout
    assert f"linux-tools-{os.uname().release}" in result.stdout


def test_setup_system_without_gcc_is_fatal_with_the_fix(tmp_path):
    # A PATH with the tools the script needs but no compiler.
    for tool in ["dpkg-query", "uname"]:
        if shutil.which(tool):
            (tmp_path / tool).symlink_to(shutil.which(tool))
    result = subprocess.run([shutil.which("bash"), str(ROOT / "scripts" / "setup-system.sh")],
                            env={**os.environ, "PATH": str(tmp_path),
                                 "OS_RELEASE_FILE": "/nonexistent"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "'gcc' is not installed" in result.stderr
    assert "apt-get install -y gcc make" in result.stderr


def test_the_labs_jupyterlab_asks_no_news_question_and_checks_no_updates():
    """JupyterLab's "official Jupyter news?" prompt covered every page until dismissed; the
    lab's settings (copied into the venv by make setup) answer it: never, and no update check."""
    overrides = json.loads((ROOT / "scripts" / "jupyterlab-overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false",
                                                                        "checkForUpdates": False}
    installed = ROOT / ".venv" / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert json.loads(installed.read_text()) == overrides, "make setup copies it into the venv"
    assert "$(LAB_SETTINGS)" in (ROOT / "Makefile").read_text().split("setup:", 1)[1].splitlines()[0]

"""The set-up files say the same thing: one set of pins, one kernel name,
the two commands, and a CI that runs them."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

from labkit import paths

ROOT = paths.ROOT
REQUIREMENT_FILES = ["requirements.txt", "requirements-test.txt"]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$")


def _normalise(name):
    return re.sub(r"[-_.]+", "-", name).lower()   # PEP 503: Foo_Bar == foo-bar


def _parse_pins(lines, where):
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = PIN.match(line)
        assert match, f"{where}: {line!r} is not an exact `name==version` pin"
        pins[_normalise(match[1])] = match[2]
    return pins


def pip_pins(root):
    """name -> version from requirements*.txt under root."""
    pins = {}
    for name in REQUIREMENT_FILES:
        pins.update(_parse_pins((root / name).read_text().splitlines(), name))
    return pins


def conda_pins(root):
    """name -> version from the pip section of environment.yml under root."""
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip_sections = [dep["pip"] for dep in env["dependencies"] if isinstance(dep, dict)]
    assert pip_sections, "environment.yml has no pip: section"
    return _parse_pins(pip_sections[0], "environment.yml")


def pin_differences(root):
    """Human-readable differences between the pip and conda pins (empty = they agree)."""
    pip, conda = pip_pins(root), conda_pins(root)
    return [f"{name}: requirements {pip.get(name, 'absent')} vs environment.yml {conda.get(name, 'absent')}"
            for name in sorted(pip.keys() | conda.keys()) if pip.get(name) != conda.get(name)]


def test_requirements_and_environment_agree():
    assert pin_differences(ROOT) == []


def test_pins_include_what_the_lab_is_built_on():
    pins = pip_pins(ROOT)
    for name in ["jupyterlab", "ipywidgets", "plotly", "pandas", "papermill", "ipykernel", "pytest"]:
        assert name in pins


@pytest.mark.parametrize("tamper", [
    ("environment.yml", "plotly==7.1.0", "plotly==7.0.0"),       # a different version
    ("environment.yml", "      - tqdm==4.70.1\n", ""),           # a package missing from conda
    ("requirements.txt", "psutil==7.2.2\n", "psutil==7.2.2\nrequests==2.34.2\n"),  # one extra
])
def test_agreement_check_catches_a_tampered_copy(tmp_path, tamper):
    filename, old, new = tamper
    for name in REQUIREMENT_FILES + ["environment.yml"]:
        shutil.copy(ROOT / name, tmp_path / name)
    assert pin_differences(tmp_path) == []
    text = (tmp_path / filename).read_text()
    assert old in text
    (tmp_path / filename).write_text(text.replace(old, new))
    assert len(pin_differences(tmp_path)) == 1


def test_a_loose_pin_is_refused():
    with pytest.raises(AssertionError, match="exact"):
        _parse_pins(["pandas>=3"], "requirements.txt")


def test_pyproject_reads_dependencies_from_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "dependencies" in project["project"]["dynamic"]
    assert "dependencies" not in project["project"], "pins belong in requirements.txt only"
    dynamic = project["tool"]["setuptools"]["dynamic"]
    assert dynamic["dependencies"] == {"file": ["requirements.txt"]}
    assert project["project"]["scripts"]["labkit"] == "labkit.cli:main"
    assert project["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]


def _notebooks():
    return sorted(paths.NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("notebook", _notebooks(), ids=lambda p: p.name)
def test_notebook_uses_the_labkit_kernel(notebook):
    kernelspec = nbformat.read(notebook, as_version=4).metadata.get("kernelspec", {})
    assert kernelspec.get("name") == "labkit", f"{notebook.name}: kernelspec {kernelspec}"


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

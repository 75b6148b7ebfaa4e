"""The image recipe repo2docker builds as it is (Binder, or a hub's image built from this
repository): apt.txt, environment.yml and postBuild at the top, and no binder/ folder (with
one, repo2docker would read that folder alone).  repo2docker's base image is Ubuntu
(buildpack-deps:24.04 for repo2docker 2026.4), so apt.txt is setup-system.sh's Ubuntu list,
which stays the one place the system packages are named."""

import os
import re
import subprocess

import pytest

from labkit import paths

ROOT = paths.ROOT


def setup_system_list(distro: str) -> list[str]:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup-system.sh"), "--list", distro],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_apt_txt_is_setup_systems_ubuntu_list():
    listed = setup_system_list("ubuntu")
    assert {"gcc", "make", "libffi-dev", "linux-tools-generic", "iproute2"} <= set(listed)
    assert not any(name.startswith("linux-tools-") and name[-1].isdigit() for name in listed), \
        "a kernel-specific package: the image's build host is not the kernel it runs on"
    assert (ROOT / "apt.txt").read_text().split() == listed, \
        "apt.txt differs: bash scripts/setup-system.sh --list ubuntu > apt.txt"


@pytest.mark.parametrize("distro, has, lacks", [
    ("debian", {"linux-perf", "chromium"}, {"linux-tools-generic"}),
    ("ubuntu", {"linux-tools-common"}, {"chromium", "linux-perf"}),  # Ubuntu's chromium is a snap
])
def test_the_list_names_each_distributions_own_packages(distro, has, lacks):
    listed = set(setup_system_list(distro))
    assert has <= listed and not lacks & listed


def test_the_list_refuses_a_distribution_it_does_not_know():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup-system.sh"), "--list", "fedora"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "knows ubuntu and debian" in done.stderr and done.stdout == ""


def test_post_build_does_what_make_setup_does_for_the_images_python():
    post_build = ROOT / "postBuild"
    assert os.access(post_build, os.X_OK)
    text = post_build.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    makefile = (ROOT / "Makefile").read_text()
    # the kernel: the same name and display name as make setup's (the notebooks name "labkit")
    kernel = re.search(r"-m ipykernel install --sys-prefix (.*)", makefile)[1]
    assert f"python -m ipykernel install --sys-prefix {kernel}" in text
    assert re.search(r"^make build$", text, re.M)
    assert "cp scripts/jupyterlab-overrides.json" in text and "share/jupyter/lab/settings" in text
    assert not (ROOT / "binder").exists(), "repo2docker would read binder/ alone and miss the top-level files"

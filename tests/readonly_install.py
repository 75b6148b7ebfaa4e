"""A read-only install of the lab, as an image or an admin would make it for many users: a
copy of labkit/, csrc/, notebooks/ and data/seeds/ in a root-owned folder under /tmp, built
there by root (`make`), then made unwritable by anyone else.  test_home and test_hub serve
it to users who are not root and check that they write nothing into it (`snapshot`).

    with read_only_install() as lab:      # lab/labkit, lab/csrc, lab/build/bin, ...
        before = snapshot(lab)"""

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from labkit import paths

COPIED = ("labkit", "csrc", "notebooks", "data/seeds")


def snapshot(folder: Path) -> dict:
    """Every file and folder under `folder` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in [folder, *folder.rglob("*")]}


@contextmanager
def read_only_install():
    """The install's folder, `<top>/lab`; `<top>` (its parent) is root's too, and others may
    read it, so a test may put its users' homes there.  Removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("this test makes users and a root-owned install: run the suite as root (CI does)")
    top = Path(tempfile.mkdtemp(prefix="labkit-install-", dir="/tmp"))
    try:
        lab = top / "lab"
        for part in COPIED:
            shutil.copytree(paths.ROOT / part, lab / part, ignore=shutil.ignore_patterns("__pycache__"))
        done = subprocess.run(["make", "-C", str(lab / "csrc"), f"BUILD={lab / 'build'}"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        subprocess.run(["chmod", "-R", "u=rwX,go=rX", str(top)], check=True)
        yield lab
    finally:
        shutil.rmtree(top, ignore_errors=True)

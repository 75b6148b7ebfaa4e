"""Where things live.  Every module asks here.

Two places, the same folder in a student's own checkout:

  ROOT  the lab as installed: labkit/, csrc/, notebooks/, data/seeds/ and the
        programs `make build` compiled into build/.  A clone, or a read-only copy
        in an image that every user of a hub shares.
  HOME  one user's state: results, pid files, the C exercises' scratch builds and
        cffi modules, and, once the user's own C joins the lab (an exercise adopted
        into an edition, a model of their own), their copy of csrc/ and its build.
        LABKIT_HOME names it; by default it is ROOT when ROOT is a checkout this
        user may write, else $XDG_DATA_HOME/labkit (~/.local/share/labkit).  `labkit notebooks`
        copies the notebooks there.

So one install serves many users and writes nothing into itself: until a user has C
of their own they run the install's programs (CSRC and BUILD are ROOT's); from then
on, their copy (own_sources() makes it, once).  A process reads CSRC, BUILD and the
rest as `paths.CSRC` at the moment it needs them: own_sources() moves them."""

import os
import shutil
from pathlib import Path

# LABKIT_ROOT: the lab's folder when labkit is installed apart from it (pip install . puts
# only the package into site-packages; `pip install -e .` keeps it in the checkout)
ROOT = Path(os.environ.get("LABKIT_ROOT") or Path(__file__).resolve().parent.parent).resolve()


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK) and all(
        os.access(part, os.W_OK) for part in (folder / "build", folder / "data") if part.exists())


def _home() -> Path:
    named = os.environ.get("LABKIT_HOME")
    if named:
        return Path(named).expanduser().resolve()
    if _writable(ROOT) and (ROOT / "csrc").is_dir():  # a checkout of one's own, not a site-packages
        return ROOT
    data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data).resolve() / "labkit"


HOME = _home()
SHARED = HOME != ROOT          # the install is not this user's: their state lives in HOME

DATA = ROOT / "data"
SEEDS = DATA / "seeds"         # the seed reports' tables, as CSV
NOTEBOOKS = ROOT / "notebooks"
INSTALL_BUILD = ROOT / "build"  # what `make build` compiled where the lab is installed

WORK = HOME / "build"          # this user's outputs (ROOT/build in a checkout)
RESULTS = HOME / "data" / "results"  # sweep results, appended as they are measured
CFFI_DIR = WORK / "cffi"       # in-process modules compiled by cffi
# pid files of processes labkit started (for orphan clean-up); LABKIT_RUN_DIR moves them
RUN_DIR = Path(os.environ.get("LABKIT_RUN_DIR") or WORK / "run")

OWN_CSRC = HOME / "csrc"       # a user's copy of the sources, in a shared install


def _sources(own: bool) -> None:
    """Point CSRC and the build at ROOT's or at the user's own copy."""
    global CSRC, BUILD, BIN, SAN_BIN
    CSRC = OWN_CSRC if own else ROOT / "csrc"
    BUILD = WORK if own else INSTALL_BUILD
    BIN = BUILD / "bin"             # the normal build: one executable per model, plus loadgen
    SAN_BIN = BUILD / "san" / "bin"  # the same programs built with ASan + UBSan


_sources(own=not SHARED or OWN_CSRC.is_dir())


def own_sources() -> Path:
    """The user's own csrc/ (HOME/csrc), made on first need in a shared install: a copy of
    ROOT's sources, with ROOT's objects and programs seeded into HOME/build (modification
    times kept, the dependency files pointed at the copy), so make compiles only what the
    user changes.  In a checkout of one's own, csrc/ already is.  Returns CSRC."""
    if CSRC == OWN_CSRC:
        return CSRC
    import fcntl

    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / ".own-sources.lock", "w") as lock:  # two kernels of one user
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not OWN_CSRC.is_dir():
            partial = OWN_CSRC.with_name(OWN_CSRC.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            copy_built_tree(ROOT / "csrc", INSTALL_BUILD, partial, WORK, named=OWN_CSRC)
            partial.rename(OWN_CSRC)
    _sources(own=True)
    return CSRC


def copy_built_tree(csrc: Path, build: Path, to_csrc: Path, to_build: Path, named: Path | None = None,
                    parts=("obj", "bin", "san")) -> None:
    """Copy sources `csrc` and what make built from them (`build`'s `parts`, and the
    Makefile's liburing probe) to `to_csrc` and `to_build`, modification times kept and
    make's dependency files (-MMD writes absolute paths) pointed at the copy (`named`: the
    sources' final name, when they are copied under another first): make finds the copy
    up to date."""
    shutil.copytree(csrc, to_csrc)
    copied = [part for part in parts if (build / part).is_dir()]
    for part in copied:
        shutil.rmtree(to_build / part, ignore_errors=True)
        shutil.copytree(build / part, to_build / part, symlinks=True)
    if (build / "liburing.mk").is_file():  # csrc/Makefile's answer to its liburing probe
        to_build.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "liburing.mk", to_build / "liburing.mk")
    import re

    moved = {f"{csrc}/": f"{named or to_csrc}/", f"{build}/": f"{to_build}/"}
    prefixes = re.compile("|".join(map(re.escape, sorted(moved, key=len, reverse=True))))
    for depends in (found for part in copied for found in (to_build / part).rglob("*.d")):
        # one pass: a copy may lie inside the other tree (a scratch build under build/)
        depends.write_text(prefixes.sub(lambda match: moved[match.group()], depends.read_text()))


def describe() -> str:
    """Where this user's lab lives, in a line."""
    if not SHARED:
        return f"{ROOT} (the lab and your results and builds)"
    own = "your own csrc/ and build" if CSRC == OWN_CSRC else "the installed programs"
    return f"{HOME} (your results and builds); the lab installed in {ROOT}, read-only for you; running {own}"


def owned_folder(prefix: str, parent: Path) -> Path:
    """A fresh folder (mode 700) named <prefix>-<our pid>-..., after removing those of the same
    prefix whose process is gone: a process killed with -9 cannot remove its own (graders,
    grading workers, notebook_run's kernel sockets)."""
    import re
    import tempfile

    import psutil

    def gone(pid: int) -> bool:  # a zombie (killed, not yet reaped) is gone too
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    for stale in parent.glob(f"{prefix}-*"):
        found = re.match(rf"{re.escape(prefix)}-(\d+)-", stale.name)
        if found and gone(int(found.group(1))) and stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-", dir=parent))

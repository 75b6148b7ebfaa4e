"""Reading what students handed in, as root, without being turned against ourselves.

Every file is opened with O_NOFOLLOW and read only when it is a regular file
of a bounded size: a symbolic link to the instructor's notebook or to
/etc/shadow is refused, not followed.  Error messages say what was wrong with
a file, never what is in it.  Names taken from the submission (a student's
folder) become file names through safe_name(), so a 255-byte name cannot
break a path.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from ... import capstone, paths
from ...stubs.catalog import C_EXERCISES

MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024
EXERCISES_C = Path("csrc") / "exercises"  # a student's C exercise files, beside the notebook as in their csrc/
MAX_C_BYTES = 1 << 20                     # one of them, at most
CAPSTONE_NOTEBOOK = "07_your_server"      # its submission carries the student's server too:
CAPSTONE_SERVER = Path("csrc") / capstone.SOURCE  # csrc/servers/mine.c, beside the notebook
MAX_SERVER_BYTES = 256 * 1024


class Refused(Exception):
    """A submitted file that is not read; str() says why, without its content."""


def read_regular(path: Path, limit: int = MAX_NOTEBOOK_BYTES, what: str = "the file") -> bytes:
    """The bytes of `path` if it is a regular file (not a link, not a folder) of at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == 40:  # ELOOP: the last component is a symbolic link
            raise Refused(f"{what} is a symbolic link: links are not followed, hand in the file itself") from None
        raise Refused(f"{what} could not be opened ({os.strerror(error.errno)})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise Refused(f"{what} is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{what} is not a regular file")
        if info.st_size > limit:
            raise Refused(f"{what} is {info.st_size // 1024} KiB, over the {limit // 1024} KiB limit")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(f"{what} grew over the {limit // 1024} KiB limit while it was read")
        return data
    except OSError as error:
        raise Refused(f"{what} could not be read ({os.strerror(error.errno)})") from None
    finally:
        os.close(fd)


def read_notebook(path: Path):
    """The submitted notebook (nbformat node), or Refused with the reason."""
    import nbformat

    data = read_regular(path, what="the notebook")
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except UnicodeDecodeError as error:
        raise Refused(f"the notebook is not UTF-8 text (byte {error.start})") from None
    except ValueError as error:  # JSONDecodeError says where, not what
        where = f" at line {error.lineno}, column {error.colno}" if hasattr(error, "lineno") else ""
        raise Refused(f"the notebook is not valid notebook JSON{where} (cut short, or edited by hand?)") from None
    except Exception as error:  # noqa: BLE001 -- nbformat's validation errors may quote the file
        raise Refused(f"the notebook is not a valid notebook ({type(error).__name__})") from None


def handed_in(notebook_path: Path, notebook: str) -> dict[str, bytes | Refused]:
    """What grading takes of a submission, the one definition of it (the ledger's digest, the
    C files a run compiles, a cluster task's payload): by path in the student's folder, the
    notebook (`notebook`.ipynb, at `notebook_path`), each file of the lab's csrc/exercises/
    the student has there, for the capstone's notebook their csrc/servers/mine.c, and each
    earlier notebook that holds a C exercise (its function joins the run's lab as it did the
    student's: lab_copy); each read as a regular file of bounded size, never through a link,
    else the Refused that says why.  A file the lab does not have is not part of it."""
    folder = notebook_path.parent
    wanted = {f"{notebook}.ipynb": (notebook_path, MAX_NOTEBOOK_BYTES)}
    for earlier in sorted({exercise.notebook for exercise in C_EXERCISES if exercise.notebook < notebook}):
        wanted[f"{earlier}.ipynb"] = (folder / f"{earlier}.ipynb", MAX_NOTEBOOK_BYTES)
    lab = paths.ROOT / EXERCISES_C
    for path in sorted(p for p in lab.rglob("*") if p.is_file()) if lab.is_dir() else []:
        relative = path.relative_to(paths.ROOT)
        wanted[str(relative)] = (folder / relative, MAX_C_BYTES)
    if notebook == CAPSTONE_NOTEBOOK:
        wanted[str(CAPSTONE_SERVER)] = (folder / CAPSTONE_SERVER, MAX_SERVER_BYTES)
    files: dict[str, bytes | Refused] = {}
    for name, (path, limit) in wanted.items():
        # O_NOFOLLOW guards the last name only: were csrc/ a link, it would be followed
        odd = next((parent for parent in reversed(path.relative_to(folder).parents)
                    if str(parent) != "." and not is_folder(folder / parent)), None)
        try:
            if odd is not None and not os.path.lexists(folder / odd):
                raise Refused(f"{name} was not handed in")
            if odd is not None:
                raise Refused(f"{name}: {odd} is not a folder (a link?): links are not followed")
            files[name] = read_regular(path, limit=limit, what=name)
        except Refused as refused:
            files[name] = refused
    return files


def is_folder(path: Path) -> bool:
    """A real folder, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def safe_name(name: str, limit: int = 100) -> str:
    """`name` as a file name: odd characters replaced, long names cut and made unique by a hash."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "_"
    if cleaned != name or len(cleaned) > limit:
        digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:10]
        cleaned = f"{cleaned[:limit]}-{digest}"
    return cleaned

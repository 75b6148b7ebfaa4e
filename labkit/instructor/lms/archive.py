"""An LMS's download, read as root without being turned against ourselves.

A zip is judged whole before a byte of it is written anywhere: it is refused,
naming the members, if any member

  * has a name that leaves the folder it is unpacked in (an absolute path, a
    `..` part, a drive letter or a backslash, a NUL byte), or two members
    have the same name;
  * is a symbolic link, a device or anything else but a file or a folder
    (links are never followed, so a link to /etc/shadow is never read);
  * is encrypted, or overlaps another member's bytes (the "overlapping files"
    zip bomb: many names for one compressed stream);

or if there are more than MAX_MEMBERS members, or their declared sizes add up
to more than MAX_TOTAL_BYTES.  Sizes in a zip's headers are the sender's word,
so each member is also read with a bound on the bytes it actually inflates
to: one over MAX_FILE_BYTES is refused alone (Refused, with its size so far;
the other members are collected), and the whole stops at MAX_TOTAL_BYTES.

A plain folder (`--from folder`) is walked without following links; a link
is refused as the submissions reader refuses one (labkit.instructor.basics.submissions).
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

from ...errors import LabError
from ..basics.submissions import MAX_NOTEBOOK_BYTES, Refused, is_folder, read_regular

MAX_MEMBERS = 20_000
MAX_FILE_BYTES = MAX_NOTEBOOK_BYTES          # 20 MiB: the grader reads nothing larger
MAX_TOTAL_BYTES = 4 << 30                    # 4 GiB unpacked, a class of 200 with room to spare


@dataclass(frozen=True)
class Member:
    """One file of a download: its path inside it (a relative POSIX path), the time the
    archive gives it (naive: a zip stores local time without a zone), its declared size."""
    name: str
    time: datetime | None
    size: int

    @property
    def path(self) -> PurePosixPath:
        return PurePosixPath(self.name)


def bad_name(name: str) -> str:
    """Why `name` cannot be unpacked inside a folder, or ""."""
    if "\0" in name:
        return "has a NUL byte in its name"
    if "\\" in name:
        return "has a backslash in its name (a Windows path, or a way out of the folder)"
    if name.startswith("/"):
        return "is an absolute path"
    parts = name.rstrip("/").split("/")
    if any(part == ".." for part in parts):
        return "has a '..' in its path: it would be written outside the folder"
    if parts and len(parts[0]) >= 2 and parts[0][1] == ":":
        return "starts with a drive letter"
    if any(part == "" for part in parts):
        return "has an empty part in its path"
    return ""


class ZipDownload:
    """An LMS's zip, checked whole at open (see the module's docstring)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError) as error:
            raise LabError(f"{self.path} is not a zip file that can be read ({error})",
                           "give the zip the LMS let you download, whole (not unpacked, not cut short)") from None
        self.total = 0
        try:
            self.members = self._check()
        except LabError:
            self._zip.close()
            raise

    def _check(self) -> list[Member]:
        infos = self._zip.infolist()
        if len(infos) > MAX_MEMBERS:
            raise self._refuse([], f"it has {len(infos):,} members, more than the {MAX_MEMBERS:,} a class's "
                                   "download holds")
        problems, seen, members = [], set(), []
        for info in infos:
            name = info.filename
            why = bad_name(name)
            kind = stat.S_IFMT(info.external_attr >> 16)
            if not why and kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                why = "is a symbolic link" if kind == stat.S_IFLNK else "is not a file or a folder"
            if not why and info.flag_bits & 0x1:
                why = "is encrypted"
            if not why and name.rstrip("/") in seen:
                why = "appears twice"
            seen.add(name.rstrip("/"))
            if why:
                problems.append(f"{name!r} {why}")
            elif not info.is_dir():
                members.append(Member(name, _zip_time(info), info.file_size))
        problems += self._overlaps(infos)
        if problems:
            raise self._refuse(problems, "")
        declared = sum(member.size for member in members)
        if declared > MAX_TOTAL_BYTES:
            raise self._refuse([], f"its files unpack to {declared / (1 << 30):.1f} GiB, more than the "
                                   f"{MAX_TOTAL_BYTES >> 30} GiB a class's notebooks take (a zip bomb?)")
        return members

    def _overlaps(self, infos) -> list[str]:
        """Members whose compressed bytes start inside another's (one stream, many names)."""
        def name_bytes(info) -> int:
            return len(info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace"))

        spans = sorted((info.header_offset, info.header_offset + 30 + name_bytes(info) + info.compress_size,
                        info.filename) for info in infos if not info.is_dir())
        return [f"{name!r} overlaps {before!r} (one compressed stream under two names: a zip bomb)"
                for (_, end, before), (start, _, name) in zip(spans, spans[1:]) if start < end]

    def _refuse(self, problems: list[str], why: str) -> LabError:
        said = why or (f"{len(problems)} member(s) cannot be unpacked safely: " + "; ".join(problems[:5])
                       + ("; ..." if len(problems) > 5 else ""))
        return LabError(f"{self.path} refused, nothing collected: {said}",
                        "download the submissions from the LMS again; an LMS never makes such a zip, so this one "
                        "was made or changed by someone else")

    def read(self, member: Member) -> bytes:
        """The member's bytes, inflated with a bound: Refused when it is over MAX_FILE_BYTES
        (whatever its header says); LabError when the download as a whole passes MAX_TOTAL_BYTES."""
        chunks, got = [], 0
        try:
            with self._zip.open(member.name) as stream:
                while True:
                    chunk = stream.read(min(1 << 20, MAX_FILE_BYTES + 1 - got))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    got += len(chunk)
                    if got > MAX_FILE_BYTES:
                        self.total += got
                        raise Refused(f"it inflates to more than {MAX_FILE_BYTES >> 20} MiB (its header said "
                                      f"{member.size:,} bytes): not collected")
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:
            # Python's zipfile inflates no more than the header's size, and checks the CRC: a header
            # that lies about the size ends here
            raise Refused(f"it cannot be unpacked ({error}): not collected") from None
        self.total += got
        if self.total > MAX_TOTAL_BYTES:
            raise self._refuse([], f"its files inflate to more than {MAX_TOTAL_BYTES >> 30} GiB (a zip bomb?)")
        return b"".join(chunks)

    def close(self) -> None:
        self._zip.close()


def _zip_time(info: zipfile.ZipInfo) -> datetime | None:
    try:
        return datetime(*info.date_time)
    except ValueError:
        return None


class FolderDownload:
    """A folder of submissions, walked without following links: the same reading as a zip."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not is_folder(self.path):
            raise LabError(f"{self.path} is not a folder", "give the folder that holds one folder per student")
        self.members: list[Member] = []
        self.links: list[str] = []
        for top, folders, files in os.walk(self.path, followlinks=False):
            folders[:] = sorted(f for f in folders if not f.startswith("."))
            for name in sorted(files) + [f for f in folders if os.path.islink(os.path.join(top, f))]:
                full = Path(top) / name
                relative = full.relative_to(self.path).as_posix()
                if full.is_symlink():
                    self.links.append(relative)
                    continue
                info = full.lstat()
                self.members.append(Member(relative, datetime.fromtimestamp(info.st_mtime), info.st_size))
        if len(self.members) > MAX_MEMBERS:
            raise LabError(f"{self.path} holds {len(self.members):,} files, more than {MAX_MEMBERS:,}",
                           "give the folder of the class's submissions only")

    def read(self, member: Member) -> bytes:
        return read_regular(self.path / member.name, limit=MAX_FILE_BYTES, what=member.name)

    def close(self) -> None:
        pass

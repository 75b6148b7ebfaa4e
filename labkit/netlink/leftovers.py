"""What outlives a Link, and what cleans it up: each Link's record in build/run (names, owner
pid), the Links this process made (removed at exit), the reaper that deletes a root Link's
namespaces when its owner dies however it dies, and what `labkit doctor --clean` finds and
removes after a kill -9."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil

from labkit import paths

from .host import run_ip

RECORD_GLOB = "netns-*.json"

# Links made by this process, by id (labkit.netlink.link.Link), removed at exit whatever happened.
LIVE: dict = {}

# The reaper: waits (a sleep at a time, so the trap runs at once), and on SIGTERM (its death
# signal: its owner died) deletes the namespaces named after it, then the record.
_REAPER = ('trap \'kill "$sleeping" 2>/dev/null; for ns in "$@"; do ip netns del "$ns" 2>/dev/null; done; '
           'rm -f "$RECORD"; exit 0\' TERM; '
           'while :; do sleep 3600 & sleeping=$!; wait "$sleeping"; done')


def start_reaper(namespaces: list[str], record):
    """A child that deletes `namespaces` and `record` when this process dies (None without setpriv)."""
    from labkit import launcher

    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None  # labkit doctor --clean is the way then
    return launcher.spawn([setpriv, "--pdeathsig", "TERM", "--", "sh", "-c", _REAPER, "reaper", *namespaces],
                          role="link-reaper", env={**os.environ, "RECORD": str(record)})


@atexit.register
def _remove_all() -> None:
    for link in list(LIVE.values()):
        link.remove()


def leftover_records() -> list[tuple[str, list[str]]]:
    """(record file name, namespaces) of links whose owner is gone (killed with -9)."""
    import psutil

    found = []
    for record in sorted(paths.RUN_DIR.glob(RECORD_GLOB)) if paths.RUN_DIR.is_dir() else []:
        try:
            data = json.loads(record.read_text())
            owner, namespaces = int(data["owner_pid"]), list(data["namespaces"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not psutil.pid_exists(owner):
            found.append((record.name, namespaces))
    return found


def clean_leftovers() -> list[str]:
    """Delete the namespaces of every link whose owner is gone, and their records."""
    done = []
    for name, namespaces in leftover_records():
        for ns in namespaces:
            if run_ip("netns", "del", ns, check=False).returncode == 0:
                done.append(f"deleted network namespace {ns}")
        (paths.RUN_DIR / name).unlink(missing_ok=True)
        done.append(f"removed link record {name}")
    return done


def lab_namespaces() -> list[str]:
    """The lab's namespaces that exist now (`ip netns list`)."""
    listed = run_ip("netns", "list", check=False).stdout.split()
    return [name for name in listed if re.fullmatch(r"lk[0-9a-f]{6}[smc]", name)]

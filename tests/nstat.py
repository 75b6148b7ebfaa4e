"""The kernel's network counters as `nstat` prints them: the tool the tests hold
labkit.kernel_view's own readings against.

    nstat("TcpExtListenOverflows")   # the absolute count in this network namespace

`nstat -azs NAME`: absolute values (-a, not the increase since its last use), zeros
shown (-z), its history file left as it was (-s).  A missing nstat or counter fails.
"""

import subprocess


def nstat(name: str) -> int:
    """`name`'s absolute value in this process's network namespace."""
    out = subprocess.run(["nstat", "-azs", name], capture_output=True, text=True, check=True, timeout=10).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return int(fields[1])
    raise AssertionError(f"nstat printed no {name}: {out}")

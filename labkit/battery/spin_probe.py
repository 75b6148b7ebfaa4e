"""The battery's spin verdict (spins, for cases.sheds_when_out_of_descriptors) and its
yardstick: how much CPU a loop that only spins gets on this machine now, measured beside
the server."""

from __future__ import annotations

import os
import subprocess
import sys


SPIN_SHARE = 0.25  # a server using a quarter of what a spinning process got beside it, while clients wait in its
                  # queue, spins (one that waits uses next to none)
PROBE_LEAST = 0.1  # s: a spinning process that got less in the 2 s window measured a machine that ran nothing
                   # then (a probe can get 0.0 s), and no verdict: 0 s is not "a quarter of 0 s" spinning


def spins(server_cpu_s: float, probe_cpu_s: float) -> bool:
    """Whether a server that used `server_cpu_s` while clients waited spun, against what a
    process that only spun beside it got (`probe_cpu_s`); never on a probe that got nothing."""
    return probe_cpu_s >= PROBE_LEAST and server_cpu_s >= SPIN_SHARE * probe_cpu_s


class SpinProbe:
    """A process that only spins, for as long as the block lasts: the CPU time it got is what
    a spinning loop gets on this machine now (a whole CPU on a quiet one, a share of one on a
    busy one), the yardstick for a server's own CPU time over the same window."""

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        self.started = self._cpu()
        return self

    def _cpu(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def __exit__(self, *_):
        self.got = self._cpu() - self.started
        self.process.kill()
        self.process.wait()

"""The yardstick of the battery's spin verdict (cases.sheds_when_out_of_descriptors): how
much CPU a loop that only spins gets on this machine now, measured beside the server."""

from __future__ import annotations

import os
import subprocess
import sys


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

"""Servers and the load generator: what to run (a spec), running it pinned, reading it back.

A ServerSpec (model, service, workers, any extra flags) and a LoadSpec (the
load generator's flags) are each turned into an argv in one place; an experiment
builds them from a grid point, `measure.point` runs them.  Every process starts
through labkit.launcher (pinning, death signal, pid file, launch prefix); nothing
outlives its owner.

  pinning.py   Pinning: the server's and the client's CPUs, from the machine or checked
  limits.py    before anything starts: a free port, open files for the connections asked for
  argv.py      a flag and its value as argv words (exact: a float as strtod reads it back)
  server.py    ServerSpec, Server, start_server: a server model run and ready
  load.py      LoadSpec, ClientRun, run_load: the load generator run under perf

The names below are the package's: callers (and tests that patch them) use procs.NAME;
a module's own setting is patched where it is read (procs.load.CLIENT_WALL_MARGIN_S).
"""

from .argv import exact
from .limits import FD_MARGIN, ensure_nofile, open_files_problem
from .load import ClientRun, LoadSpec, run_load
from .pinning import Pinning
from .server import Server, ServerSpec, has_workers, read_ready_line, start_server, takes_workers

__all__ = ["FD_MARGIN", "ClientRun", "LoadSpec", "Pinning", "Server", "ServerSpec",
           "ensure_nofile", "exact", "has_workers", "open_files_problem", "read_ready_line", "run_load",
           "start_server", "takes_workers"]

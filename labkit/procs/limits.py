"""What is checked before anything starts: the port is free, and the open-file limit holds
the connections asked for (raised where it can be, else refused, saying how many fit)."""

from __future__ import annotations

import errno
import resource
import socket

from .. import system
from ..errors import LabError

# Room for the load generator's own descriptors (stdio, perf, epoll...) above one per client.
FD_MARGIN = 32


def _port_owner(port: int) -> str:
    import psutil

    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    try:
                        return f"{psutil.Process(conn.pid).name()} (pid {conn.pid})"
                    except psutil.Error:
                        return f"pid {conn.pid}"
                return "a process this user cannot see"
    except psutil.AccessDenied:
        pass
    return "another process"


def port_in_use(port: int) -> LabError:
    return LabError(f"port {port} is in use by {_port_owner(port)}",
                    "use port=0 to let the system choose a free port, or stop that process")


def check_port_free(port: int) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # Servers set SO_REUSEADDR too, so a TIME_WAIT leftover is not "busy".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("0.0.0.0", port))
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        raise port_in_use(port) from None
    finally:
        probe.close()


def open_files_problem(clients: int, idle: int, limit: int) -> LabError | None:
    """The LabError for `clients` + `idle` connections under an open-file `limit`
    (saying how many would fit), or None when they fit."""
    want = clients + idle + FD_MARGIN
    if limit == resource.RLIM_INFINITY or want <= limit:
        return None
    fits = max(limit - FD_MARGIN, 0)
    raise_it = ", or raise the limit (`ulimit -n` before starting Jupyter, or /etc/security/limits.conf)"
    if idle:
        return LabError(f"{clients} clients + {idle} idle connections need about {want} open files, "
                        f"but the limit is {limit}",
                        f"use at most {max(fits - clients, 0)} idle connections beside {clients} clients" + raise_it)
    return LabError(f"{clients} clients need about {want} open files, but the limit is {limit}",
                    f"use at most {fits} clients" + raise_it)


def ensure_nofile(clients: int, idle: int = 0) -> None:
    """Raise the soft open-file limit for `clients` + `idle` connections (children
    inherit it), or refuse them, saying how many would fit."""
    problem = open_files_problem(clients, idle, system.raise_nofile(clients + idle + FD_MARGIN))
    if problem:
        raise problem

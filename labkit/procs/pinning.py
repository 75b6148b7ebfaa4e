"""The CPUs a server and its client run on: chosen from the machine, or given and checked."""

from __future__ import annotations

from dataclasses import dataclass

from .. import system
from ..errors import LabError


@dataclass(frozen=True)
class Pinning:
    """The CPUs the server and the client run on, and what to say about them."""

    server_cpus: list[int] | None = None  # None: not pinned
    client_cpus: list[int] | None = None
    note: str = ""
    from_machine: bool = False  # neither side's CPUs were chosen: a sweep leases its own (cpu_leases)

    @classmethod
    def resolve(cls, server_cpus=None, client_cpus=None, allow_overlap: bool = False) -> "Pinning":
        """Disjoint CPUs from the machine (system.default_pinning) where not given;
        given ones are checked.  Overlap is refused where two CPUs exist, unless
        allowed (then it is noted)."""
        default_server, default_client, note = system.default_pinning()
        server = sorted(system.check_cpus(server_cpus)) if server_cpus is not None else default_server
        client = sorted(system.check_cpus(client_cpus)) if client_cpus is not None else default_client
        shared = sorted(set(server) & set(client))
        if shared and len(system.usable_cpus()) > 1:
            if not allow_overlap:
                raise LabError(f"server CPUs {server} and client CPUs {client} overlap on {shared}",
                               "pin the server and the client to different CPUs, "
                               "e.g. server_cpus=[0], client_cpus=[1]")
            note = note or f"server CPUs {server} and client CPUs {client} overlap, so the results mix both"
        elif shared:
            note = note or ("only one CPU: server and client share it, so the client's work "
                            "is counted against the server's time")
        return cls(server, client, note, from_machine=server_cpus is None and client_cpus is None)


def check_cpus(cpus) -> list[int] | None:
    if cpus is None:
        return None
    if isinstance(cpus, int):
        cpus = [cpus]
    return sorted(system.check_cpus(list(cpus)))

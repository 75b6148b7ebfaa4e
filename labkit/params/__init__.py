"""An experiment's parameters: what each one is, where its value goes, and the ones every
experiment shares.

An experiment declares its parameters as Param(name, kind, default, help, to=...);
everything else follows from the kind (labkit.params.kinds says what every kind
provides: its check, its panel widget, its read-back).
`to` says where the value goes at each grid point: the server (a flag of the
server model), the load generator (one of its flags), both, the pinning, or
the sweep itself (repeats).

  kinds.py    the Kind contract and the general kinds: lists, choices, numbers, flags
  sizes.py    byte sizes and buffer shapes, with their units
  machine.py  CPU sets (FROM_MACHINE until resolved) and link rates
  __init__    Param, where a value goes, and the parameters every experiment shares;
              every kind is importable from here (from labkit.params import Sizes)
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import (Choice, ChoiceList, Flag, Int, IntList, Kind, Models, Number, Percent, Warmup,
                    whole_number)
from .machine import FROM_MACHINE, Cpus, LinkRate, cpu_text
from .sizes import SIZE_UNITS, Shapes, Size, Sizes, parse_size, size_text

__all__ = ["BOTH", "FROM_MACHINE", "LINK", "LOAD", "NO_LINK", "PINNING", "SERVER", "SIZE_UNITS", "SWEEP",
           "Choice", "ChoiceList", "Cpus", "Flag", "Int", "IntList", "Kind", "LinkRate", "Models", "Number",
           "Param", "Percent", "Shapes", "Size", "Sizes", "Warmup", "arrivals_param", "autocorking_param", "cpu_params",
           "cpu_text", "parse_size", "placement_params", "profile_stacks_param", "repeats_param", "size_text",
           "whole_number"]

# Where a parameter's value goes at each grid point (LINK: the link between server and
# client, labkit.netlink, when they are placed in namespaces).
SERVER, LOAD, BOTH, PINNING, SWEEP, LINK = "server", "load", "both", "pinning", "sweep", "link"


@dataclass(frozen=True)
class Param:
    """One parameter of an experiment.

    `to` is where its value goes (SERVER, LOAD, BOTH, PINNING, SWEEP) and
    `flag` the server's or load generator's flag it becomes (default: its
    name), so `Param("exchanges", IntList(), [200], to=LOAD, flag="requests")`
    becomes `loadgen --requests 200`.  A `fixed` parameter is the
    experiment's workload: the panel does not offer it."""

    name: str
    kind: Kind
    default: object
    help: str = ""
    to: str = LOAD
    flag: str | None = None
    fixed: bool = False
    label: str = ""  # a short axis title ("concurrent clients"); default: its name
    server_flag: str | None = None  # a LOAD parameter the server is told too (clients -> --expect)

    def __post_init__(self):
        if self.to not in (SERVER, LOAD, BOTH, PINNING, SWEEP, LINK):
            raise ValueError(f"parameter {self.name}: to={self.to!r} is none of server, load, both, pinning, sweep, "
                             "link")

    @property
    def column(self) -> str:
        """Its name in a grid point and a results row (models -> model)."""
        return getattr(self.kind, "column", self.name)

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def flag_name(self) -> str:
        return self.flag or self.name


def cpu_params() -> tuple[Param, Param]:
    """server_cpus and client_cpus, as every experiment has them."""
    return (Param("server_cpus", Cpus(), FROM_MACHINE, "CPUs the server is pinned to", to=PINNING),
            Param("client_cpus", Cpus(), FROM_MACHINE, "CPUs the load generator is pinned to", to=PINNING))


def placement_params(placement=("same_host",), rate=None, delay_ms=(0,)) -> tuple[Param, ...]:
    """Where server and client run, as every experiment has it: on this host (loopback), or
    in two network namespaces joined by a veth link (labkit.netlink), shaped to a rate and
    given a delay (an axis: throughput against delay) and a loss.  A same_host point has no
    link: its link parameters stay at their empty values (Experiment.grid).  The arguments
    are the defaults (an experiment about links starts across one)."""
    return (Param("placement", ChoiceList("same_host", "namespaces"), list(placement),
                  "same_host: loopback; namespaces: two network stacks joined by a veth link", to=LINK),
            Param("link_rate", LinkRate(), rate, "namespaces: the link's rate, e.g. 1gbit (empty: not shaped)",
                  to=LINK),
            Param("link_delay_ms", IntList(least=0, most=10_000, noun="link delay", unit="ms"), list(delay_ms),
                  "namespaces: the delay each way, ms (netem, or the lab's delay line)", to=LINK,
                  label="one-way delay (ms)"),
            Param("link_loss_percent", Percent(), 0.0, "namespaces: frames lost each way, percent", to=LINK),
            Param("link_jitter_ms", Int(least=0), 0, "namespaces: each frame's delay varies by up to this, ms "
                  "(no more than the delay)", to=LINK),
            Param("link_mtu", Int(least=576), 1500, "namespaces: the link's MTU, bytes (loopback's is 65536)",
                  to=LINK))


# A same_host point's link parameters (it has no link).
NO_LINK = {"link_rate": None, "link_delay_ms": 0, "link_loss_percent": 0.0, "link_jitter_ms": 0, "link_mtu": 1500,
           "link_autocorking": "on"}


def autocorking_param() -> Param:
    """Linux's TCP autocorking (net.ipv4.tcp_autocorking, on by default since 3.14): a small write
    waits while sent data is unacknowledged, the last queued buffer has room, and an earlier
    packet of the socket is not yet freed by its transmit completion (in a qdisc such as tbf,
    in the device, or sent and not yet completed: tcp_should_autocork), so small writes merge
    even with TCP_NODELAY.  Per namespace, so only across a link (placement namespaces) can the
    lab turn it off without touching this host's setting."""
    return Param("link_autocorking", ChoiceList("on", "off"), ["on"],
                 "namespaces: net.ipv4.tcp_autocorking in both hosts' namespaces (off: a small write is not "
                 "held back while an earlier packet waits in a queue)", to=LINK, label="autocorking")


def profile_stacks_param(default: bool = False) -> Param:
    """Where the server's time goes at every point: its stacks sampled by perf record and its
    system calls counted by name (labkit.perf.stacks); a few seconds more per point."""
    return Param("profile_stacks", Flag(), default, "record where the server's time goes at every point: "
                 "sampled stacks (a flame chart) and system calls by name", to=SWEEP)


def arrivals_param(default=("even",)) -> Param:
    """How an open loop spaces the requests it offers at its rate (loadgen --arrivals,
    csrc/loadgen/arrivals.h): evenly, one every 1/rate (wrk2's constant throughput), or as a
    Poisson process of the same mean rate (exponential gaps, drawn from the run's seed: the
    arrivals queueing theory's M/M/1 and M/D/1 assume).  A list: one point each."""
    return Param("arrivals", ChoiceList("even", "poisson"), list(default),
                 "open loop: requests evenly spaced (1/rate apart) or a Poisson process of that rate "
                 "(exponential gaps, seeded)", label="arrivals")


def repeats_param(default: int = 3) -> Param:
    return Param("repeats", Int(least=1), default, "measurements per point (median and spread are shown)",
                 to=SWEEP)

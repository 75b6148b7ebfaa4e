"""measure.point for a test, in one call: a server model, a load and CPUs.

    row = measuring.point("epoll", clients=300, requests=20, service="echo", engine="events")

Keyword arguments other than these become the load generator's flags (size,
engine, rate, duration, warmup, idle)."""

from labkit import measure as measure_module
from labkit.measure import Run
from labkit.procs import LoadSpec, Pinning, ServerSpec


def point(model, clients, requests=1, service="top", workers=None, server_cpus=None, client_cpus=None,
            timeout=60.0, stacks=False, **options):
    return measure_module.point(Run(ServerSpec(model, service, workers),
                                    LoadSpec(clients, requests, service, options, timeout),
                                    Pinning(server_cpus, client_cpus), stacks=stacks))

"""Experiment 5 (different hosts): uploads across a shaped link, against its delay.

One connection can have at most one receive window of bytes in flight, so its rate is
at most window / round trip; when the link's bandwidth-delay product (rate x round trip)
outgrows the window, a single connection cannot fill the link however fast it is, and
many connections together still can.  Before that, every new connection starts slowly
(slow start doubles its window once per round trip), which a short upload never
outgrows.  The grid: connections x one-way delay, each point a fresh link of
`link_rate` between two namespaces (labkit.netlink), each connection one upload."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, IntList, Models, Param, Sizes, cpu_params, placement_params,
                           profile_stacks_param, repeats_param)

EXPERIMENT = Experiment(
    name="bdp",
    title="Uploads across a link against its delay: the bandwidth-delay product",
    parameters=(
        Param("models", Models(), ["epoll"], "server concurrency models to compare", to=SERVER),
        Param("clients", IntList(least=1, noun="connection count", unit="connections"), [1, 8],
              "connections uploading at once (one and many)", label="connections"),
        Param("size", Sizes(least=1), [100 * 1024 ** 2], "bytes each connection uploads", label="upload size"),
        repeats_param(3),
        profile_stacks_param(),
        Param("service", Choice("sink"), "sink", "the service the server runs", to=BOTH, fixed=True),
        Param("engine", Choice("events"), "events", "load generator engine", fixed=True),
        *cpu_params(),
        *placement_params(placement=["namespaces"], rate="1gbit", delay_ms=[0, 5, 20, 50]),
    ),
    x="link_delay_ms",
    profiles={"quick": {"clients": [1, 4], "size": [16 * 1024 ** 2], "repeats": 1, "link_delay_ms": [0, 5, 25]}},
    figures=(Figure("goodput_gbit_s"), Figure("transfer_s", log_y=True), Figure("tcp_retrans_segs"),
             Figure("server_cpu_ms_per_mb"), Figure("elapsed_s")),
)

"""Experiment 2, second part: a fixed open-loop load on 100 active connections
beside 0 to 10,000 silent ones, for select, poll and epoll: who pays for the
descriptors that do nothing."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, Int, IntList, Models, Number, Param, Warmup, arrivals_param,
                           cpu_params, placement_params, profile_stacks_param, repeats_param)

EXPERIMENT = Experiment(
    name="idle_conns",
    title="Idle connections: a fixed active load beside 0 to 10,000 silent ones (select, poll, epoll)",
    parameters=(
        Param("models", Models(), ["select", "poll", "epoll"], "readiness models to compare", to=SERVER),
        # 500: select still fits under FD_SETSIZE
        Param("idle", IntList(least=0, noun="idle count", unit="idle connections"),
              [0, 500, 1000, 2000, 5000, 10000], "silent connections held open beside the active ones",
              label="idle connections"),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [100], "active connections",
              label="active connections"),
        Param("rate", Number(), 5000, "requests per second in total (open loop, latency from each request's due time)"),
        arrivals_param(),
        Param("duration", Number(), 4, "seconds of load per point"),
        Param("warmup", Warmup(), "1s", "left out of the latency figures: '1s' or a count of exchanges"),
        Param("size", Int(least=1), 64, "bytes per message"),
        repeats_param(3),
        profile_stacks_param(True),
        Param("service", Choice("top", "echo", "sink"), "echo", "the service the server runs", to=BOTH,
              fixed=True),
        Param("engine", Choice("events", "threads"), "events", "load generator engine", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="idle",
    profiles={"quick": {"profile_stacks": False, "idle": [0, 1000], "duration": 1, "warmup": "0.2s", "repeats": 1}},
    figures=(
        Figure("lat_p99_us"), Figure("lat_p50_us"), Figure("server_cpu_us_per_request"),
        Figure("server_cs_per_request"), Figure("throughput_rps"), Figure("server_task-clock"),
        Figure("lost_connections", include_failed=True),
    ),
)

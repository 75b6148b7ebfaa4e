"""Experiment 6, what breaks first: latency against offered load.

An open loop offers each rate for `duration` seconds, spread over `clients`
connections, to the `top` service (a scan of /proc per request: the server, not the
load generator, is the limit).  By default the requests are evenly spaced, not random:
request g is due at start + g / rate (`arrivals` even; csrc/loadgen/arrivals.c), so below
the knee the waits come from service times that vary, late requests the generator releases
together, and the server loop's batches (Kingman's W ~ rho/(1-rho) (c_a^2 + c_s^2)/2 E[S]
with c_a^2 near 0).  `arrivals` poisson offers the same mean rate as a Poisson process
(c_a^2 = 1, the arrivals M/M/1's rho/(1-rho) assumes; experiment service_time holds a
server of known cost against it).  Latency counts from when each request was due, so
the requests a saturated server holds back are not hidden (coordinated omission).
labkit.what_breaks marks each model's knee (the first rate whose completions fall more
than 5% short of the offer) and checks Little's law at every point: the requests in
flight, sampled every 10 ms by the load generator, against completed rate x mean
latency."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, Int, IntList, Models, Number, Param, Warmup, arrivals_param,
                           cpu_params, placement_params, repeats_param)

EXPERIMENT = Experiment(
    name="offered_load",
    title="Latency against offered load: the knee, p99 and p99.9, Little's law",
    parameters=(
        Param("models", Models(), ["threaded", "poll", "epoll", "epoll_workers"], "server models to compare",
              to=SERVER),
        Param("rate", IntList(least=1, noun="offered rate", unit="requests per second"),
              [250, 500, 1000, 2000, 3000, 4500, 6000, 9000],
              "requests per second offered (open loop), past the server's capacity",
              label="offered rate (requests/s)"),
        arrivals_param(),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [50],
              "connections the offered requests are spread over", label="connections"),
        Param("duration", Number(), 3, "seconds each rate is offered"),
        Param("warmup", Warmup(), "0.5s", "left out of the figures: '0.5s' or a count of exchanges"),
        Param("k", Int(least=1), 2, "processes per top reply"),
        Param("workers", Int(least=1, optional=True, empty="one per CPU"), None,
              "processes for epoll_workers (empty: one per CPU the server may use)", to=SERVER),
        repeats_param(3),
        Param("service", Choice("top", "echo", "sink"), "top", "the service the server runs", to=BOTH, fixed=True),
        Param("engine", Choice("events", "threads"), "events", "load generator engine (open loop)", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="rate",
    log_x=True,
    # quick: the top rate twice what epoll served on a quiet 2-core machine (2,890 of 3,000 offered;
    # the scan's cost grows with the processes on the machine), so the knee shows
    profiles={"quick": {"models": ["threaded", "epoll"], "rate": [250, 1000, 2000, 6000], "duration": 1,
                        "warmup": "0.2s", "repeats": 1}},
    figures=(
        Figure("lat_p99_us", log_y=True), Figure("lat_p999_us", log_y=True), Figure("lat_p50_us", log_y=True),
        Figure("completed_rps"), Figure("inflight_mean", log_y=True), Figure("server_cpu_us_per_request"),
        Figure("server_task-clock"), Figure("lost_connections", include_failed=True),
    ),
)
